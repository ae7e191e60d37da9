"""Figure (m): the heavy model made INT8, against itself in FP32, proven by `streamer evaluate`.

    python benchmarks/evaluate.py [--events N] [--batch B] [--repeat R]

``--events`` demo events go to a topic of a broker started here. The heavy model
(models/fraud_encoder.onnx, a small transformer encoder) is quantized with `streamer model
optimize --int8`: dynamically, and statically calibrated on 10,000 rows of that topic. `streamer
evaluate` replays the topic ``--repeat`` times per INT8 file, with the FP32 model as the champion
and the INT8 file as the candidate, on the stream's batches (``--batch`` rows, the example
config's 256 by default). Each run times both models' calls on the same batches, so the ratio is
measured within one run: INT8 events/s over FP32 events/s (rows over the model calls' wall time),
and CPU per event. The agreement of the two models' decisions (score >= 0.5) and the p99 and
largest |delta score| come from the same report. Medians over the runs are printed, and the last
lines are the figure, one per INT8 kind. A benchmark, not a test: comparable only within one run
on one machine.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path

from harness import PINNED  # benchmarks/: also puts the project on sys.path

from streamer.commands.demo import demo_config, encoded_events, produce_events, synthetic_events
from streamer.commands.evaluate import evaluate
from streamer.commands.model import calibration_rows
from streamer.config import LakeConfig
from streamer.config_check import Location
from streamer.dev.broker import kafka_cluster
from streamer.formats.configured import input_codec
from streamer.kafka.ranges import When
from streamer.kafka.topics import create_topics
from streamer.model.optimize import optimize
from streamer.wiring.evaluate import Evaluation, Outputs

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ROOT / "models" / "fraud_encoder.onnx"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=100_000, help="events replayed per run (default 100,000)")
    ap.add_argument("--batch", type=int, default=256, help="rows per model call (default 256, the stream's)")
    ap.add_argument("--repeat", type=int, default=3, help="evaluate runs; medians are printed (default 3)")
    args = ap.parse_args()
    with kafka_cluster() as bootstrap, tempfile.TemporaryDirectory() as scratch:
        PINNED.client_side()
        work = Path(scratch)
        base = demo_config(bootstrap, uuid.uuid4().hex[:6], args.batch)
        cfg = replace(base, model=replace(base.model, path=HEAVY, name="fraud_encoder", providers=("cpu",)),
                      lake=LakeConfig(warehouse=Location(str(work / "lake"))))
        create_topics(bootstrap, {cfg.input.topics[0]: 3})
        produce_events(bootstrap, cfg.input.topics[0],
                       encoded_events(input_codec(cfg.input), synthetic_events(args.events, 32, seed=5)))
        calibration = calibration_rows(cfg, "earliest..latest", 10_000)
        candidates = {"dynamic": optimize(HEAVY, work / "dynamic.onnx", int8=True).out,
                      "static": optimize(HEAVY, work / "static.onnx", int8=True, calibration=calibration).out}
        lines = [f"heavy model {HEAVY.stat().st_size:,} bytes FP32; {args.events:,} events, batches of {args.batch}, "
                 f"{args.repeat} runs each"]
        for kind, path in candidates.items():
            runs = []
            for i in range(args.repeat):
                started = time.monotonic()
                result = evaluate(cfg, Evaluation(path, When("earliest"), When("latest"), work / f"{kind}-{i}",
                                                  candidate_version=f"int8-{kind}", batch_size=args.batch,
                                                  outputs=Outputs(parquet=str(work / f"{kind}-{i}" / "sides"))),
                                  progress=io.StringIO())
                m = json.loads(Path(result.json).read_text())["metrics"]
                runs.append(m)
                print(f"  {kind} run {i + 1}: FP32 {m['champion_events_per_s']:,.0f} events/s "
                      f"({m['champion_cpu_us_per_event']:.1f} us CPU/event, p99 batch "
                      f"{m['champion_p99_batch_ms']:.2f} ms), INT8 {m['candidate_events_per_s']:,.0f} events/s "
                      f"({m['candidate_cpu_us_per_event']:.1f} us, p99 batch {m['candidate_p99_batch_ms']:.2f} ms), "
                      f"{time.monotonic() - started:.0f} s", flush=True)

            def med(key: str) -> float:
                return statistics.median(r[key] for r in runs)  # noqa: B023 - used at once, in this round

            last = runs[-1]
            lines.append(f"(m) INT8 {kind} ({path.stat().st_size:,} bytes) {med('candidate_events_per_s'):,.0f} vs FP32 "
                         f"{med('champion_events_per_s'):,.0f} events/s = {med('speedup'):.2f}x; CPU "
                         f"{med('candidate_cpu_us_per_event'):.1f} vs {med('champion_cpu_us_per_event'):.1f} us/event; "
                         f"agreement {last['agreement']:.4f}, p99 |delta score| {last['p99_abs_delta']:.4f}, "
                         f"max {last['max_abs_delta']:.4f}")
        print("\n".join(lines))


if __name__ == "__main__":
    main()
