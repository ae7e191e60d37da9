"""Several models in one stream, in one run on one broker: routed per event against one model.

    python benchmarks/many_models.py [--events N] [--repeat R] [--format avro|json]

The events are the demo's (32 features), their ``entity_id`` one of three tenants in turn, on one
topic, written once. Each figure is a processor reading the whole topic in a group of its own:

(a) one model (the demo model), no route: every event scored by it.
(b) three models, ``route: {field: entity_id}`` mapping each tenant to its own model (the demo
    model's file under three names, so the model work equals (a)'s and the difference is the
    routing: reading the field, splitting the chunk, three batchers, three topics).
    b/a in events/s is the throughput target (>= 0.8).
(c) three processors of one model each, in turn, each reading the whole topic (a deployment per
    tenant, as without routing): a processor without a route cannot skip the other tenants'
    events, so each consumes, decodes and scores all of them. (c)'s CPU per event is the three
    processors' CPU over the topic's events; the target is (b) < (c).

CPU is the process's (all threads: the loop, librdkafka's), from the first decoded chunk to the
last acknowledgement, per event of the topic. Each figure runs ``--repeat`` times, interleaved;
medians are printed. A benchmark, not a test: figures compare only within one run on one machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from streamer.commands.demo import demo_config, encoded_events, produce_events, synthetic_events  # noqa: E402
from streamer.config import (  # noqa: E402
    Config,
    ModelEntry,
    ModelsConfig,
    RouteConfig,
    model_entries,
    prediction_topic,
    route_models,
)
from streamer.dev.broker import kafka_cluster  # noqa: E402
from streamer.formats.configured import input_codec  # noqa: E402
from streamer.kafka.messages import Acked  # noqa: E402
from streamer.kafka.topics import create_topics  # noqa: E402
from streamer.pipeline.batcher import Batch  # noqa: E402
from streamer.pipeline.records import Rows, Scored  # noqa: E402
from streamer.wiring.stream import build_processor  # noqa: E402

TENANTS = ("acme", "globex", "initech")


class CpuWindow:
    """The process's CPU from the first decoded chunk to the last acknowledgement (an Observer)."""

    def __init__(self) -> None:
        self.first: float | None = None
        self.last = 0.0

    def decoded(self, rows: Rows) -> None:
        if self.first is None and len(rows):
            self.first = time.process_time()

    def scored(self, batch: Batch[Rows], seconds: float, out: Scored, predicted: Rows) -> None:
        pass

    def acked(self, acked: Acked) -> None:
        self.last = time.process_time()

    @property
    def seconds(self) -> float:
        return self.last - (self.first or self.last)


def fresh(base: Config, tag: str, **changes: object) -> Config:
    """The base config with its own group and output topics (created here): runs share only the input."""
    run = uuid.uuid4().hex[:6]
    cfg = replace(base, input=replace(base.input, group_id=f"many-{tag}-{run}"),
                  output=replace(base.output, topic=f"many-{tag}-out-{run}"), **changes)  # type: ignore[arg-type]
    outputs = {prediction_topic(cfg, name): 3 for name in route_models(cfg)} | {cfg.output.topic: 3}
    create_topics(str(cfg.kafka["bootstrap.servers"]), outputs | {f"{cfg.input.topics[0]}.dlq": 1})
    return cfg


def routed(base: Config) -> Config:
    """Three models (the demo model's file under three names), each tenant's events to its own."""
    m = base.model
    named = {f"m{i}": ModelEntry(replace(m, name=f"m{i}")) for i in range(len(TENANTS))}
    return replace(base, model=named["m0"].model, models=ModelsConfig(named=named, default="m0"),
                   route=RouteConfig("entity_id", {t: f"m{i}" for i, t in enumerate(TENANTS)}),
                   output=replace(base.output, topic_per_model=True))


def run(cfg: Config, n: int) -> tuple[float, float]:
    """events/s and CPU seconds of one processor over the topic's ``n`` events."""
    window = CpuWindow()
    processor = build_processor(cfg, observers=(window,))
    processor.run(until=lambda s: s.outputs >= n)
    assert processor.stats.predictions == n, processor.stats.predictions
    return processor.stats.events_per_s(), window.seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--format", choices=["avro", "json"], default="avro")
    args = ap.parse_args()
    n = args.events
    with kafka_cluster() as bootstrap:
        base = demo_config(bootstrap, uuid.uuid4().hex[:6], args.batch)
        if args.format == "json":
            base = replace(base, input=replace(base.input, format="json", schema=None))
        create_topics(bootstrap, {base.input.topics[0]: 3})
        events = synthetic_events(n, 32)
        for i, e in enumerate(events):
            e["entity_id"] = TENANTS[i % len(TENANTS)]
        produce_events(bootstrap, base.input.topics[0], encoded_events(input_codec(base.input), events))
        many = routed(base)
        assert len(model_entries(many)) == len(TENANTS) + 1  # the demo model's own section beside them
        one_rate, one_cpu, many_rate, many_cpu, split_cpu = [], [], [], [], []
        for _ in range(args.repeat):
            rate, cpu = run(fresh(base, "one"), n)
            one_rate.append(rate)
            one_cpu.append(cpu)
            rate, cpu = run(fresh(many, "routed"), n)
            many_rate.append(rate)
            many_cpu.append(cpu)
            split_cpu.append(sum(run(fresh(base, f"tenant{t}"), n)[1] for t in range(len(TENANTS))))
        a, b = statistics.median(one_rate), statistics.median(many_rate)
        ca, cb, cc = (statistics.median(x) / n * 1e6 for x in (one_cpu, many_cpu, split_cpu))
        print(f"input {args.format}, {n:,} events, batching.max_size {args.batch}, {args.repeat} rounds (medians)")
        print(f"(a) one model                 {a:10,.0f} events/s   CPU {ca:6.1f} us/event")
        print(f"(b) three models, routed      {b:10,.0f} events/s   CPU {cb:6.1f} us/event   b/a {b / a:.2f}")
        print(f"(c) three processors, 1 each  {'':>10}            CPU {cc:6.1f} us/event   b/c {cb / cc:.2f}")
        print(f"many models: routed throughput {b / a:.2f}x one model's (target >= 0.8); "
              f"CPU per event {cb / cc:.2f}x three single-model processors' (target < 1)")


if __name__ == "__main__":
    main()
