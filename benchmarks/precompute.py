"""Predictions precomputed into Redis against the same rows scored into an Iceberg table, in one run.

    python benchmarks/precompute.py [--rows N] [--repeat R] [--figures p,i]

(p) `streamer score --to-kv` of a Parquet file of ``--rows`` events, one per entity, into a local
    Redis (Debian's ``redis-server``, started here with a password, as the tests start it): one hash
    per entity under the run's key space, the switch of ``P:current`` at its end.
(i) `streamer score --to-table` of the same file into a new Apache Iceberg table on local disk (a
    temporary warehouse folder, the embedded SQLite catalog, the default ``lake.target_file_mb``).
Rates are the runs' own, as their summary line prints them: from the run's start (the model warmed
up, the file opened) to its last commit (Redis: to the switch). CPU per row is this process's CPU
time over the whole call (every thread) divided by the rows; the Redis server's CPU (its own
process's, from ``INFO cpu``) is printed apart. Each figure runs ``--repeat`` times in a shuffled order each round, each
run under a fresh key prefix or table; medians and minima are printed, with p/i. One run of each
on 2,000 rows comes first, outside the figures: the first run of a process pays its imports and
the catalog's creation.

No broker: both read the file. A benchmark, not a test: the figures are only comparable within one
run on one machine.
"""

from __future__ import annotations

import argparse
import io
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from harness import PINNED, rounds, timed  # benchmarks/: also puts the project on sys.path

from streamer.commands.demo import demo_config
from streamer.commands.lake import LakeSummary, Target, run_score
from streamer.config import Config, KvConfig, LakeConfig, Secret
from streamer.config_check import Location
from streamer.dev.redis import LocalRedis, local_redis
from streamer.stores.client import connect
from streamer.stores.keys import KeySpace

PART = 100_000  # rows generated and written at a time


def write_rows(path: Path, n: int, n_features: int = 32) -> None:
    """``n`` events of ``n_features`` normal features, entity ``u<i>`` each, in parts of :data:`PART`."""
    schema = pa.schema([pa.field("event_id", pa.string()), pa.field("entity_id", pa.string()),
                        pa.field("event_time", pa.timestamp("ms", tz="UTC")),
                        pa.field("features", pa.list_(pa.float32()))])
    with pq.ParquetWriter(path, schema, compression="zstd") as writer:
        for start in range(0, n, PART):
            m = min(PART, n - start)
            ids = np.arange(start, start + m)
            flat = np.random.default_rng(start).normal(size=m * n_features).astype(np.float32)
            writer.write_table(pa.table({
                "event_id": pa.array([f"evt-{i}" for i in ids]), "entity_id": pa.array([f"u{i}" for i in ids]),
                "event_time": pa.array(1_767_225_600_000 + ids, pa.timestamp("ms", tz="UTC")),
                "features": pa.ListArray.from_arrays(np.arange(0, (m + 1) * n_features, n_features, dtype=np.int32),
                                                     pa.array(flat))}, schema=schema))


def rate_of(summary: LakeSummary, n: int) -> float:
    """The run's rows per second, after checking that every row became a prediction."""
    counts = summary.counts
    assert (counts.predictions, counts.rejects) == (n, 0), f"{summary.sink}: {counts} for {n} rows"
    return counts.rows / summary.seconds


SERVER_CPU: list[float] = []  # (p)'s Redis server CPU time per row, in microseconds, each run


def server_cpu(kv: KvConfig) -> float:
    """The Redis server's CPU seconds so far (INFO cpu: its user and system time)."""
    info = connect(kv).info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def into_kv(cfg: Config, server: LocalRedis, parquet: Path, n: int) -> float:
    """(p): the file into Redis under a fresh prefix; checks that readers were switched to the run."""
    prefix = f"bench{uuid.uuid4().hex[:6]}"
    kv = KvConfig(address=server.address, password=Secret(server.password), prefix=prefix)
    before = server_cpu(kv)
    summary = run_score(replace(cfg, kv=kv), str(parquet), Target(kv=""), run_id="p", progress=io.StringIO())
    SERVER_CPU.append((server_cpu(kv) - before) / n * 1e6)
    assert connect(kv).get(KeySpace(prefix).current) == b"p", "readers were not switched to the run"
    return rate_of(summary, n)


def into_table(cfg: Config, warehouse: Path, parquet: Path, n: int) -> float:
    """(i): the file into a new Iceberg table."""
    summary = run_score(replace(cfg, lake=LakeConfig(warehouse=Location(str(warehouse)))), str(parquet),
                        Target(table=f"i_{uuid.uuid4().hex[:6]}"), run_id="i", progress=io.StringIO())
    return rate_of(summary, n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000, help="rows (entities) per run (default 200,000)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each figure: median and min are printed")
    ap.add_argument("--figures", default="p,i", help="comma-separated figures to run (default: p,i)")
    args = ap.parse_args()
    wanted = set(args.figures.split(","))
    with tempfile.TemporaryDirectory() as scratch, local_redis(Path(scratch) / "redis") as server:
        folder = Path(scratch)
        parquet = folder / "rows.parquet"
        write_rows(parquet, args.rows)
        cfg = demo_config("127.0.0.1:9", uuid.uuid4().hex[:6])  # the example config's model and contract; no broker
        small = folder / "warm-up.parquet"
        write_rows(small, 2000)
        into_kv(cfg, server, small, 2000)
        SERVER_CPU.clear()
        into_table(cfg, folder / "lake", small, 2000)
        runs: dict[str, Callable[[], float]] = {
            "p": lambda: into_kv(cfg, server, parquet, args.rows),
            "i": lambda: into_table(cfg, folder / "lake", parquet, args.rows),
        }
        rates: dict[str, list[float]] = {}
        cpu: dict[str, list[float]] = {}
        for round_, tag, fn in rounds({k: fn for k, fn in runs.items() if k in wanted}, args.repeat):
            rate, us, _, _ = timed(fn, args.rows)
            rates.setdefault(tag, []).append(rate)
            cpu.setdefault(tag, []).append(us)
            print(f"  round {round_ + 1}: ({tag}) {rate:,.0f} rows/s, {us:.1f} us CPU/row", flush=True)
    names = {"p": "score into Redis", "i": "score into Iceberg"}
    med = {k: float(np.median(v)) for k, v in rates.items()}
    print(f"rows {args.rows:,} (one entity each), median and min of {args.repeat} runs, {PINNED}")
    for k in sorted(rates):
        print(f"({k}) {names[k]:<19} median {med[k]:>10,.0f}   min {min(rates[k]):>10,.0f} rows/s"
              f"   {np.median(cpu[k]):6.1f} us CPU/row")
    if SERVER_CPU:
        print(f"(p)'s Redis server: median {np.median(SERVER_CPU):.1f} us CPU/row (its own process, not in the above)")
    if "p" in med and "i" in med:
        print(f"p/i {med['p'] / med['i']:.2f}   per round: "
              + " ".join(f"{p / i:.2f}" for p, i in zip(rates["p"], rates["i"], strict=True)))


if __name__ == "__main__":
    main()
