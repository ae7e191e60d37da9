"""The heavy model on whichever provider is present: model-only rates, and the processor with and
without pipelined inference, on Kafka or (where no broker can run) from memory.

    python benchmarks/gpu.py [--model M] [--events N] [--batch B] [--sizes 64,...,4096]
                             [--memory-only] [--repeat R]

(a) Model only: rows/s of the model on pre-built float32 arrays at each batch size (64 to 4096),
    on the provider ONNX Runtime gives (CUDA when present, else the CPU).
(b) In memory: the real processor loop (decode, batch, infer, encode, "produce", commit after
    acks) fed pre-encoded Avro messages from memory by an in-memory consumer, its predictions
    taken by an in-memory producer that acknowledges at once. No Kafka, no Java: it runs on a GPU
    host without a broker. Inline (model.pipelined false) and pipelined (true), each ``--repeat``
    times interleaved; events/s, and the model's share of wall time (the inference seconds the
    processor's own histogram records, over the run's wall time: the GPU-busy share when the
    provider is CUDA).
(c) On Kafka (unless ``--memory-only``, and only where a broker starts): the same two runs
    against a real broker.
Ratios are of medians within this run; the last line sums them up.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
from prometheus_client import CollectorRegistry

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from streamer.commands.demo import demo_config, encoded_events, synthetic_events  # noqa: E402
from streamer.config import Config  # noqa: E402
from streamer.formats.configured import input_codec  # noqa: E402
from streamer.kafka.clients import KafkaClients  # noqa: E402
from streamer.model.contract import FEATURES  # noqa: E402
from streamer.model.runner import model_runner  # noqa: E402
from streamer.model.signature import Columns  # noqa: E402
from streamer.pipeline.records import Partition  # noqa: E402
from streamer.wiring.stream import build_processor  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ROOT / "models" / "fraud_encoder.onnx"


class MemoryMessage:
    """What the processor reads of a consumed message, from memory."""

    __slots__ = ("_topic", "_partition", "_offset", "_key", "_value")

    def __init__(self, topic: str, partition: int, offset: int, key: bytes, value: bytes) -> None:
        self._topic, self._partition, self._offset, self._key, self._value = topic, partition, offset, key, value

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes:
        return self._key

    def value(self) -> bytes:
        return self._value

    def headers(self) -> None:
        return None

    def timestamp(self) -> tuple[int, int]:
        return (1, int(time.time() * 1000))

    def error(self) -> None:
        return None


class MemoryConsumer:
    """A consumer of messages held in memory: one member, every partition assigned at once."""

    def __init__(self, messages: list[MemoryMessage], on_commit: Callable[..., None] | None = None,
                 **_: Any) -> None:
        self._messages, self._next, self._on_commit, self._assigned = messages, 0, on_commit, False
        self._callbacks: dict[str, Any] = {}
        self.committed: dict[Partition, int] = {}

    def subscribe(self, topics: list[str], on_assign: Any = None, on_revoke: Any = None, on_lost: Any = None) -> None:
        self._callbacks = {"assign": on_assign, "revoke": on_revoke}

    def _partitions(self) -> list[Any]:
        from confluent_kafka import TopicPartition
        return [TopicPartition(t, p) for t, p in sorted({(m.topic(), m.partition()) for m in self._messages})]

    def poll(self, timeout: float) -> MemoryMessage | None:
        got = self.consume(1, timeout)
        return got[0] if got else None

    def consume(self, n: int, timeout: float) -> list[MemoryMessage]:
        if not self._assigned:
            self._assigned = True
            self._callbacks["assign"](self, self._partitions())
        out = self._messages[self._next:self._next + n]
        self._next += len(out)
        if not out and timeout > 0:
            time.sleep(min(timeout, 0.001))
        return out

    def commit(self, offsets: list[Any], asynchronous: bool = True) -> list[Any] | None:
        for tp in offsets:
            self.committed[(tp.topic, tp.partition)] = tp.offset
        if asynchronous:
            if self._on_commit is not None:
                self._on_commit(None, offsets)
            return None
        return offsets

    def pause(self, partitions: list[Any]) -> None:
        pass

    def resume(self, partitions: list[Any]) -> None:
        pass

    def close(self) -> None:
        if self._assigned and self._callbacks.get("revoke"):
            self._callbacks["revoke"](self, self._partitions())
        self._assigned = False


class MemoryProducer:
    """A producer whose broker acknowledges everything at the next poll."""

    def __init__(self, **_: Any) -> None:
        self._reports: list[Any] = []
        self.produced = 0

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None,
                on_delivery: Any = None, **_: Any) -> None:
        self.produced += 1
        if on_delivery is not None:
            self._reports.append(on_delivery)

    def poll(self, timeout: float = 0) -> int:
        reports, self._reports = self._reports, []
        for report in reports:
            report(None, None)
        return len(reports)

    def flush(self, timeout: float = 0) -> int:
        self.poll()
        return 0

    def __len__(self) -> int:
        return len(self._reports)


def in_memory(cfg: Config, messages: list[MemoryMessage]) -> KafkaClients:
    return KafkaClients(consumer=lambda **kw: MemoryConsumer(messages, **kw),
                        producer=lambda **kw: MemoryProducer(**kw), ensure_topic=lambda topic, like: None)


def model_only(cfg: Config, sizes: list[int], rows: int) -> dict[int, float]:
    runner = model_runner(cfg)
    out = {}
    for size in sizes:
        x = Columns({FEATURES: np.random.default_rng(size).normal(size=(size, runner.contract.feature_width)).astype(np.float32)})
        runner.run(x)  # warm at this shape
        calls = max(3, rows // size)
        started = time.perf_counter()
        for _ in range(calls):
            runner.run(x)
        out[size] = calls * size / (time.perf_counter() - started)
    print(f"(a) model only on {runner.provider}: " + ", ".join(f"{s}: {r:,.0f}" for s, r in out.items())
          + " rows/s")
    return out


def processor_run(cfg: Config, n: int, clients: KafkaClients | None) -> tuple[float, float]:
    """events/s and the model's share of wall time, from the first event to the last ack."""
    registry = CollectorRegistry()
    processor = build_processor(cfg, registry=registry, clients=clients)  # the same loop, any clients
    processor.run(until=lambda s: s.outputs >= n)
    assert processor.stats.predictions == n, processor.stats.predictions
    rate = processor.stats.events_per_s()
    model_s = sum(s.value for m in registry.collect() if m.name == "streamer_inference_seconds"
                  for s in m.samples if s.name.endswith("_sum"))
    return rate, model_s / (n / rate)


def compare(label: str, make: Callable[[bool], tuple[Config, KafkaClients | None]], n: int,
            repeat: int) -> float:
    runs: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for _ in range(repeat):
        for pipelined in (False, True):
            cfg, clients = make(pipelined)
            runs[pipelined].append(processor_run(cfg, n, clients))
    med = {p: (statistics.median(r for r, _ in v), statistics.median(s for _, s in v)) for p, v in runs.items()}
    (a, sa), (b, sb) = med[False], med[True]
    print(f"{label}: inline {a:,.0f} events/s (model {sa:.0%} of wall time), pipelined {b:,.0f} events/s "
          f"(model {sb:.0%}); pipelined/inline {b / a:.2f}")
    return b / a


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=HEAVY)
    ap.add_argument("--events", type=int, default=50_000)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--sizes", default="64,128,256,512,1024,2048,4096")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--memory-only", action="store_true", help="no broker: model only and in-memory runs")
    args = ap.parse_args()
    run = uuid.uuid4().hex[:6]
    base = demo_config("memory:0", run, args.batch)
    base = replace(base, model=replace(base.model, path=args.model.resolve(), name=args.model.stem))
    model_only(base, [int(s) for s in args.sizes.split(",")], rows=max(args.events, 20_000))
    codec = input_codec(base.input)
    topic = base.input.topics[0]
    messages = [MemoryMessage(topic, i % 3, i // 3, k, v)
                for i, (k, v) in enumerate(encoded_events(codec, synthetic_events(args.events, 32)))]
    messages.sort(key=lambda m: (m.offset(), m.partition()))

    def memory(pipelined: bool) -> tuple[Config, KafkaClients | None]:
        cfg = replace(base, model=replace(base.model, pipelined=pipelined))
        return cfg, in_memory(cfg, messages)

    ratios = [compare("(b) in memory", memory, args.events, args.repeat)]
    if not args.memory_only:
        ratios.append(kafka(base, args, run))
    print(f"heavy model: pipelined/inline {' / '.join(f'{r:.2f}' for r in ratios)} "
          f"({'in memory, on Kafka' if len(ratios) > 1 else 'in memory'})")


def kafka(base: Config, args: argparse.Namespace, run: str) -> float:
    from streamer.commands.demo import produce_events
    from streamer.dev.broker import kafka_cluster
    from streamer.kafka.topics import create_topics

    with kafka_cluster() as bootstrap:
        cfg0 = demo_config(bootstrap, run, args.batch)
        cfg0 = replace(cfg0, model=base.model)
        create_topics(bootstrap, {cfg0.input.topics[0]: 3})
        produce_events(bootstrap, cfg0.input.topics[0],
                       encoded_events(input_codec(cfg0.input), synthetic_events(args.events, 32)))

        def on_kafka(pipelined: bool) -> tuple[Config, KafkaClients | None]:
            tag = uuid.uuid4().hex[:6]
            cfg = replace(cfg0, input=replace(cfg0.input, group_id=f"gpu-{tag}"),
                          output=replace(cfg0.output, topic=f"gpu-out-{tag}"),
                          model=replace(cfg0.model, pipelined=pipelined))
            create_topics(bootstrap, {cfg.output.topic: 3, f"{cfg.input.topics[0]}.dlq": 1})
            return cfg, None

        return compare("(c) on Kafka", on_kafka, args.events, args.repeat)


if __name__ == "__main__":
    main()
