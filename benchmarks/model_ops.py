"""What model operations cost, in one run on one broker: a challenger, a hot reload, the fallback.

    python benchmarks/model_ops.py [--events N] [--repeat R] [--reloads K]

(a) The processor alone, and (b) with one challenger in shadow (the champion's own model, so the
    challenger does exactly the champion's model work again on its thread); b/a is the cost of a
    challenger in throughput. The run ends when the champion has produced every prediction; the
    challenger's queue (shadow.queue_batches) decides how much it skips when it cannot keep up, so
    the shadow rows compared are printed too.
(c) The processor with its breaker held open (a model that always fails and a constant fallback):
    c/a is what degraded scoring runs at.
(d) Hot reload: ``--reloads`` forced reloads of the demo model (as SIGHUP asks), each from the
    loop's first look after the request to the swap between two batches (load, warm-up at
    batching.max_size, the probe checks), as the processor's reload histogram records it.
Each of (a)-(c) runs ``--repeat`` times, interleaved; medians are printed. A benchmark, not a
test: the figures are comparable only within one run on one machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path

import numpy as np
from prometheus_client import CollectorRegistry

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from streamer.commands.demo import demo_config, encoded_events, produce_events, synthetic_events  # noqa: E402
from streamer.config import ChallengerConfig, Config  # noqa: E402
from streamer.dev.broker import kafka_cluster  # noqa: E402
from streamer.errors import InferenceError  # noqa: E402
from streamer.formats.configured import input_codec  # noqa: E402
from streamer.kafka.topics import create_topics  # noqa: E402
from streamer.testing import FunctionRunner  # noqa: E402
from streamer.wiring.stream import build_processor  # noqa: E402


def fresh(base: Config, tag: str, **changes: object) -> Config:
    """The base config with its own group and output topic (created here), so runs share only the input."""
    run = uuid.uuid4().hex[:6]
    cfg = replace(base, input=replace(base.input, group_id=f"ops-{tag}-{run}"),
                  output=replace(base.output, topic=f"ops-{tag}-out-{run}"))
    create_topics(str(cfg.kafka["bootstrap.servers"]), {cfg.output.topic: 3, f"{cfg.input.topics[0]}.dlq": 1})
    return replace(cfg, **changes)  # type: ignore[arg-type]


def run(cfg: Config, n: int, failing: bool = False) -> tuple[float, float]:
    """events/s of the champion, and the shadow rows compared (0 without challengers)."""
    runner = None
    if failing:
        def broken(x: np.ndarray) -> np.ndarray:
            raise InferenceError("broken")
        runner = FunctionRunner(broken, 32)
    registry = CollectorRegistry()
    processor = build_processor(cfg, runner=runner, registry=registry)
    processor.run(until=lambda s: s.outputs >= n)
    assert processor.stats.predictions == n, processor.stats.predictions
    compared = sum(s.value for m in registry.collect() if m.name == "streamer_shadow_compared_rows"
                   for s in m.samples if s.name.endswith("_total"))
    return processor.stats.events_per_s(), compared


def reloads(cfg: Config, k: int) -> list[float]:
    """Seconds from the loop's first look after a reload request to the swap, for ``k`` forced
    reloads, as the processor's own reload histogram records them."""
    registry = CollectorRegistry()
    processor = build_processor(replace(cfg, model=replace(cfg.model, reload_check_ms=0)), registry=registry)
    thread = threading.Thread(target=processor.run, daemon=True)
    thread.start()

    def recorded() -> tuple[float, float]:
        model = {"model": cfg.model.name}
        return (registry.get_sample_value("streamer_model_reload_seconds_count", model) or 0.0,
                registry.get_sample_value("streamer_model_reload_seconds_sum", model) or 0.0)

    seen: list[float] = []
    deadline = time.monotonic() + 120
    while len(seen) < k and time.monotonic() < deadline:
        count, total = recorded()
        processor.reload()
        while recorded()[0] == count and time.monotonic() < deadline:
            time.sleep(0.01)  # polling a benchmark's counter, not synchronising a test
        seen.append(recorded()[1] - total)
    processor.stop()
    thread.join(60)
    assert processor.stats.reloads == len(seen), (processor.stats.reloads, len(seen))
    return seen


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--reloads", type=int, default=20)
    args = ap.parse_args()
    with kafka_cluster() as bootstrap:
        base = demo_config(bootstrap, uuid.uuid4().hex[:6], args.batch)
        create_topics(bootstrap, {base.input.topics[0]: 3})
        produce_events(bootstrap, base.input.topics[0],
                       encoded_events(input_codec(base.input), synthetic_events(args.events, 32)))
        challenger = (ChallengerConfig(base.model.path, "challenger", "2"),)
        plain, shadowed, degraded, compared = [], [], [], []
        for _ in range(args.repeat):
            plain.append(run(fresh(base, "plain"), args.events)[0])
            rate, rows = run(fresh(base, "shadow", shadow=replace(base.shadow, challengers=challenger)),
                             args.events)
            shadowed.append(rate)
            compared.append(rows)
            degraded.append(run(fresh(base, "degraded", model=replace(
                base.model, fallback_scores=(0.0,), breaker_probe_ms=60_000)), args.events, failing=True)[0])
        a, b, c = (statistics.median(x) for x in (plain, shadowed, degraded))
        print(f"(a) processor            {a:10,.0f} events/s")
        print(f"(b) with one challenger  {b:10,.0f} events/s   b/a {b / a:.2f}   "
              f"(shadow compared {statistics.median(compared):,.0f} of {args.events:,} rows)")
        print(f"(c) breaker open         {c:10,.0f} events/s   c/a {c / a:.2f}")
        swaps = reloads(fresh(base, "reload"), args.reloads)
        print(f"(d) hot reload: {len(swaps)} swaps, SIGHUP to swap median {statistics.median(swaps) * 1000:.0f} ms, "
              f"max {max(swaps) * 1000:.0f} ms")
        print(f"model ops: a challenger costs {1 - b / a:.0%} of throughput; a hot reload swaps in "
              f"{statistics.median(swaps) * 1000:.0f} ms (median)")


if __name__ == "__main__":
    main()
