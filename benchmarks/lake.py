"""Backfills into the lake against figure (g), on one broker in one run: (k), (l) and the RSS run.

    python benchmarks/lake.py [--events N] [--repeat R] [--figures g,k,l] [--pin]
    python benchmarks/lake.py --rss [--events N]

(g) `streamer replay` of the whole input to a backfill topic (throughput.py's figure, the same call).
(k) The same replay into an Apache Iceberg table on local disk: a temporary warehouse folder, the
    embedded SQLite catalog, the default ``lake.target_file_mb``; k/g is printed beside (g).
(l) `streamer score` of a Parquet file holding the same rows (event_id, entity_id, event_time,
    features) into a table of that warehouse; the file is written before the figure, outside its time.
Rates are the runs' own: (g) from its first event read to its last output acknowledged, (k) and (l)
from the run's start (the model warmed up, the source opened) to its last commit, as the run's
summary line prints them. CPU per event is this process's CPU time over the whole call (every
thread: the loop, librdkafka's, ONNX Runtime's, pyarrow's) divided by the events. Each figure runs
``--repeat`` times, in a shuffled order each round; medians and minima are printed.

``--rss``: one replay of ``--events`` (2,000,000 by default) into a table, with this process's
resident set size read from ``/proc/self/statm`` every 0.5 s on a thread, and printed at 10%, 50%,
90% and 100% of the run's time, with the largest sample from 10% on against the one at 10%
(the issue's bound: within 1.2x, flat after the warm-up).

The input is generated and produced in parts of :data:`PART` events, and the Parquet file written
from the same parts, so this process never holds the whole input: its RSS is the run's own. A
benchmark, not a test: the figures are only comparable within one run on one machine.
"""

from __future__ import annotations

import argparse
import gc
import io
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from figure_runs import replay_run  # benchmarks/: throughput.py's (g)
from harness import PINNED, fresh, rounds, timed  # benchmarks/: also puts the project on sys.path

from streamer.commands.demo import demo_config, encoded_events, produce_events, synthetic_events
from streamer.commands.lake import LakeSummary, Target, run_lake_replay, run_score
from streamer.config import Config, LakeConfig
from streamer.config_check import Location
from streamer.dev.broker import kafka_cluster
from streamer.formats.configured import input_codec
from streamer.kafka.ranges import When
from streamer.kafka.topics import create_topics

PART = 100_000  # events generated, produced and written to Parquet at a time
PARTITIONS = 3
EVENT_FILE = pa.schema([pa.field("event_id", pa.string(), nullable=False),
                        pa.field("entity_id", pa.string(), nullable=False),
                        pa.field("event_time", pa.timestamp("ms", tz="UTC"), nullable=False),
                        pa.field("features", pa.list_(pa.float32()), nullable=False)])
PAGE = os.sysconf("SC_PAGE_SIZE")


def parts(n: int, n_features: int = 32) -> Iterator[list[dict[str, object]]]:
    """The synthetic events of the demo, ``PART`` at a time, numbered ``evt-0`` to ``evt-<n-1>``."""
    for start in range(0, n, PART):
        part = synthetic_events(min(PART, n - start), n_features, seed=start)
        for i, event in enumerate(part):
            event["event_id"] = f"evt-{start + i}"
        yield part


def prepare(base: Config, bootstrap: str, n: int, parquet: Path | None) -> None:
    """The input topic filled with ``n`` events; with ``parquet``, the same rows in that file."""
    topic = base.input.topics[0]
    create_topics(bootstrap, {topic: PARTITIONS})
    codec = input_codec(base.input)
    writer = pq.ParquetWriter(parquet, EVENT_FILE, compression="zstd") if parquet is not None else None
    try:
        for part in parts(n):
            produce_events(bootstrap, topic, encoded_events(codec, part))
            if writer is not None:
                writer.write_table(pa.Table.from_pylist(part, EVENT_FILE))
    finally:
        if writer is not None:
            writer.close()
    gc.collect()


def lake_config(cfg: Config, warehouse: Path) -> Config:
    """``cfg`` writing to a warehouse folder of the embedded catalog, every other lake setting its default."""
    return replace(cfg, lake=LakeConfig(warehouse=Location(str(warehouse))))


def rate_of(summary: LakeSummary, n: int) -> float:
    """The run's rows per second, after checking that every event became a prediction."""
    counts = summary.counts
    assert (counts.predictions, counts.rejects) == (n, 0), f"{summary.verb}: {counts} for {n} events"
    return counts.rows / summary.seconds


def into_table(cfg: Config, warehouse: Path, n: int) -> float:
    """(k): the replay of the whole input into a new table."""
    summary = run_lake_replay(lake_config(cfg, warehouse), When("earliest"), When("latest"),
                              Target(table=f"k_{cfg.input.group_id}".replace("-", "_")),
                              run_id=cfg.input.group_id, progress=io.StringIO())
    return rate_of(summary, n)


def score_file(cfg: Config, warehouse: Path, parquet: Path, n: int) -> float:
    """(l): ``streamer score`` of the Parquet file into a new table."""
    summary = run_score(lake_config(cfg, warehouse), str(parquet),
                        Target(table=f"l_{cfg.input.group_id}".replace("-", "_")),
                        run_id=cfg.input.group_id, progress=io.StringIO())
    return rate_of(summary, n)


def figures(args: argparse.Namespace, bootstrap: str, scratch: Path) -> None:
    wanted = set(args.figures.split(","))
    base = demo_config(bootstrap, uuid.uuid4().hex[:6], args.batch)
    parquet = scratch / "events.parquet"
    prepare(base, bootstrap, args.events, parquet if "l" in wanted else None)
    runs: dict[str, Callable[[Config], float]] = {
        "g": replay_run,
        "k": lambda c: into_table(c, scratch / "lake", args.events),
        "l": lambda c: score_file(c, scratch / "lake", parquet, args.events),
    }
    rates: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    for round_, tag, fn in rounds({k: fn for k, fn in runs.items() if k in wanted}, args.repeat):
        cfg = fresh(base, tag)
        create_topics(bootstrap, {cfg.output.topic: PARTITIONS})
        rate, us, _, _ = timed(lambda: fn(cfg), args.events)
        rates.setdefault(tag, []).append(rate)
        cpu.setdefault(tag, []).append(us)
        print(f"  round {round_ + 1}: ({tag}) {rate:,.0f} events/s, {us:.1f} us CPU/event", flush=True)
    names = {"g": "replay to a topic", "k": "replay into Iceberg", "l": "score a Parquet file"}
    med = {k: float(np.median(v)) for k, v in rates.items()}
    print(f"events {args.events:,}, {PARTITIONS} partitions, replay batch {args.batch} (lake runs: their own), "
          f"median and min of {args.repeat} runs, {PINNED}")
    for k in sorted(rates):
        print(f"({k}) {names[k]:<21} median {med[k]:>10,.0f}   min {min(rates[k]):>10,.0f} events/s"
              f"   {np.median(cpu[k]):6.1f} us CPU/event")
    if "k" in med and "g" in med:
        print(f"k/g {med['k'] / med['g']:.2f} (target >= 0.9)   per round: "
              + " ".join(f"{k / g:.2f}" for k, g in zip(rates["k"], rates["g"], strict=True)))
    if "l" in med and "g" in med:
        print(f"l/g {med['l'] / med['g']:.2f}")


class RssSampler:
    """This process's resident set size, read from ``/proc/self/statm`` every ``every_s`` on a thread."""

    def __init__(self, every_s: float = 0.5) -> None:
        self.every_s = every_s
        self.samples: list[tuple[float, int]] = []  # (monotonic time, bytes)
        self.arrow: list[int] = []  # bytes held by pyarrow's memory pool at each sample
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="rss-sampler", daemon=True)

    @staticmethod
    def rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * PAGE

    def __enter__(self) -> RssSampler:
        self._take()
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._done.set()
        self._thread.join()
        self._take()

    def _sample(self) -> None:
        while not self._done.wait(self.every_s):
            self._take()

    def _take(self) -> None:
        self.samples.append((time.monotonic(), self.rss()))
        self.arrow.append(pa.total_allocated_bytes())

    def at(self, share: float) -> int:
        """The sample nearest to ``share`` of the time sampled."""
        start, end = self.samples[0][0], self.samples[-1][0]
        when = start + share * (end - start)
        return min(self.samples, key=lambda s: abs(s[0] - when))[1]


def rss_run(args: argparse.Namespace, bootstrap: str, scratch: Path) -> None:
    base = demo_config(bootstrap, uuid.uuid4().hex[:6], args.batch)
    prepare(base, bootstrap, args.events, None)
    cfg = fresh(base, "rss")
    before = RssSampler.rss()
    with RssSampler() as rss:
        rate = into_table(cfg, scratch / "lake", args.events)
    mb = 1 << 20
    shares = {share: rss.at(share) for share in (0.1, 0.5, 0.9, 1.0)}
    start = rss.samples[0][0]
    late = max(b for t, b in rss.samples if t - start >= 0.1 * (rss.samples[-1][0] - start))
    print(f"rss: replay of {args.events:,} events into an Iceberg table, {rate:,.0f} events/s, "
          f"{len(rss.samples)} samples over {rss.samples[-1][0] - start:.1f} s; RSS before {before / mb:,.0f} MB, "
          + ", ".join(f"at {share:.0%} {b / mb:,.0f} MB" for share, b in shares.items())
          + f"; max from 10% on {late / mb:,.0f} MB = {late / shares[0.1]:.2f}x RSS@10% (target <= 1.2x)")
    if args.samples:
        print("rss samples (s, RSS MB, of it pyarrow's pool MB): " + " ".join(
            f"{t - start:.1f},{b / mb:.0f},{a / mb:.0f}" for (t, b), a in zip(rss.samples, rss.arrow, strict=True)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, help="events per run (default 1,000,000; 2,000,000 with --rss)")
    ap.add_argument("--batch", type=int, default=512, help="the replay to a topic's batch, as throughput.py's")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each figure: median and min are printed")
    ap.add_argument("--figures", default="g,k,l", help="comma-separated figures to run (default: g,k,l)")
    ap.add_argument("--pin", action="store_true", help="the broker on one core, this process on another")
    ap.add_argument("--rss", action="store_true", help="the RSS run instead of the figures")
    ap.add_argument("--samples", action="store_true", help="with --rss, print every sample")
    args = ap.parse_args()
    args.events = args.events or (2_000_000 if args.rss else 1_000_000)
    if args.pin:
        PINNED.choose()
    with kafka_cluster() as bootstrap, tempfile.TemporaryDirectory() as scratch:
        PINNED.client_side()
        (rss_run if args.rss else figures)(args, bootstrap, Path(scratch))


if __name__ == "__main__":
    main()
