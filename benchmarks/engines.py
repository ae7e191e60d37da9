"""One Parquet table scored by `streamer score`, by Spark and Ray Data through the product, and by a hand-written pandas UDF: rows/s per core, CPU per row, start-up apart.

    python benchmarks/engines.py [--rows N] [--files F] [--repeat R] [--engines score,spark,udf,ray] [--json PATH]

The input: ``--rows`` events of the example model (32 float features, ``event_id``,
``entity_id``, ``event_time``) in ``--files`` Parquet files, two of them rows no model takes (31
values, a NaN) so every run writes rejects; and the same in a tenth of the rows (the small run).
Each engine scores both into a Parquet target, each run its own process, as a user runs it:

(score) ``streamer score --to-parquet``, on one core (its process pinned to it): the baseline.
(spark) ``spark-submit streamer/engines/spark_main.py`` on a standalone cluster of two workers of
        one core each (tests/support/spark_cluster.py), the driver on this machine.
(ray)   ``streamer score --engine ray --address`` on a head and one more node
        (tests/support/ray_cluster.py) sharing this machine's cores.
(udf)   ``spark-submit benchmarks/engines_udf.py`` on the same Spark cluster: the pandas UDF a user
        writes without this product (ONNX Runtime per batch, the contract converted by hand).

Per row and the fixed costs come from the two sizes (medians): per row = (big - small) / the rows
between them, of each run's own seconds, as its summary line prints them ((score) from the model
warmed up and the source opened to the last commit; (spark) and (udf) from the Spark session up to
the last write; (ray) from the call on, connecting to the cluster included, to the last write), and
of its CPU. Rows/s = 1 / per row: the job's start (executors, Python workers, the model loaded, to
the first batch) is no part of it. Start-up = the small run's wall time (its process's start to
exit) less its rows x per row: the process, the session, the job's start. Rows/s per core = rows/s /
the cores the engine has: 1 for (score), 2 for the others (two one-core Spark workers; Ray's nodes
share the machine's 2). CPU is that of every process this one started over the run: the run's own
and, for Spark and Ray, the cluster's (the workers, the executors and their Python workers, the
raylets and Ray's workers, their idle daemons included), the ended ones from ``RUSAGE_CHILDREN``
(this process adopts orphans, so a daemon that outlives its parent is counted) and the living ones
from ``/proc/<pid>/stat``. Rows per CPU-second = 1 / CPU per row: what one core busy with the engine
alone scores, which other load on the machine does not move. Each cluster's own start (processes up
to ready) is timed apart. Medians of ``--repeat`` rounds. Each run's predictions and rejects are
counted against the input. A benchmark, not a test: the figures are only comparable within one run
on one machine.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from harness import ROOT  # benchmarks/: also puts the project on sys.path

from tests.support.ray_cluster import RayCluster, ray_cluster
from tests.support.spark_cluster import SparkCluster, spark_cluster

T0 = 1_796_000_000_000
WIDTH = 32
BAD = {10: "short", 20: "nan"}  # rows of the first file no model takes: 3 values, a NaN
TICK = os.sysconf("SC_CLK_TCK")
MACHINE_CORES = len(os.sched_getaffinity(0))
# The summary line's seconds: streamer score's and Ray's "12.3 s in all", spark_main.py's and the UDF's "in 12.3s".
JOB_SECONDS = re.compile(r"([\d.]+) s in all|\bin ([\d.]+)s\b")
SPARK_MAIN = "streamer/engines/spark_main.py"
NAMES = {"score": "streamer score (1 core)", "spark": "Spark, the product", "ray": "Ray Data, the product",
         "udf": "Spark, hand-written UDF"}
CORES = {"score": 1, "spark": 2, "ray": min(2, MACHINE_CORES), "udf": 2}


def events(n: int, seed: int, bad: bool) -> pa.Table:
    """``n`` events of 32 float features, 10 a second; with ``bad``, the rows of :data:`BAD` unfit."""
    features = np.random.default_rng(seed).standard_normal((n, WIDTH), dtype=np.float32)
    lengths, kept = np.full(n, WIDTH, np.int32), np.ones((n, WIDTH), bool)
    if bad:
        features[20, 5] = np.nan
        lengths[10], kept[10, 3:] = 3, False
    flat = features[kept]  # row by row
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    return pa.table({"event_id": [f"evt-{seed}-{i}" for i in range(n)],
                     "entity_id": [f"acct-{i % 97}" for i in range(n)],
                     "event_time": T0 + np.arange(n, dtype=np.int64) * 100,
                     "features": pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat, pa.float32()))})


def write_events(folder: Path, rows: int, files: int) -> None:
    folder.mkdir(parents=True)
    for f in range(files):
        pq.write_table(events(rows // files, f, bad=f == 0), folder / f"part-{f}.parquet", row_group_size=65536)


def write_config(path: Path, warehouse: Path) -> None:
    """The example config (its model and contract) with absolute paths and a warehouse of its own."""
    path.write_text(f"""kafka:
  bootstrap.servers: 127.0.0.1:1
input:
  topics: [features]
  group_id: bench-engines
  format: avro
  schema: {ROOT / "streamer/schemas/feature_event.avsc"}
  features_field: features
model:
  path: {ROOT / "models/fraud_mlp.onnx"}
  name: fraud_mlp
  version: "1"
  providers: [cpu]
output:
  topic: predictions
  schema: {ROOT / "streamer/schemas/prediction.avsc"}
lake:
  warehouse: {warehouse}
""")


def adopt_orphans() -> None:
    """Make this process the reaper of its descendants' orphans (``PR_SET_CHILD_SUBREAPER``): a
    daemon whose parent exits first (an executor's Python workers) is counted when it ends, not
    lost to init."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def spent_cpu(keep: set[int]) -> float:
    """CPU seconds of every process this one started and their descendants, ended or running:
    the reaped ones' (``RUSAGE_CHILDREN``) and the living ones' from ``/proc/<pid>/stat`` (each with
    its own reaped children). An orphan handed to this process that has ended is reaped here,
    except the processes of ``keep`` (those a ``Popen`` waits for)."""
    me = os.getpid()
    table: dict[int, tuple[str, int, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # it ended while we looked
        fields = stat[stat.rindex(")") + 2:].split()  # state ppid pgrp session ... utime stime cutime cstime
        table[int(entry)] = (fields[0], int(fields[1]), sum(int(x) for x in fields[11:15]) / TICK)
    for pid, (state, ppid, _) in list(table.items()):
        if state == "Z" and ppid == me and pid not in keep:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
                table.pop(pid)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    children: dict[int, list[int]] = {}
    for pid, (_, ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = usage.ru_utime + usage.ru_stime, list(children.get(me, []))
    while todo:
        pid = todo.pop()
        total += table[pid][2]
        todo.extend(children.get(pid, []))
    return total


@dataclass(frozen=True, slots=True)
class Run:
    rows: int
    wall_s: float  # the process's, start to exit
    job_s: float  # the run's own, as its summary line says it
    cpu_s: float


def run_process(argv: list[str], env: dict[str, str], keep: set[int], rows: int, *,
                one_core: bool = False) -> Run:
    """``argv`` run to its end: its wall seconds, the run's own seconds (its summary line's), and
    the CPU of every process this one started over that time (the clusters' included); ``keep``:
    the clusters' own processes."""
    before = spent_cpu(keep)
    pin = (lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})) if one_core else None
    start = time.monotonic()
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, preexec_fn=pin)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        log.seek(0)
        printed = log.read().decode(errors="replace")
    if proc.returncode != 0:
        raise SystemExit(f"{argv[:4]} exited {proc.returncode}:\n{printed[-4000:]}")
    found = JOB_SECONDS.findall(printed)
    if not found:
        raise SystemExit(f"{argv[:4]} printed no summary with its seconds:\n{printed[-4000:]}")
    return Run(rows, wall, float(next(x for x in found[-1] if x)), spent_cpu(keep) - before)


def counted(out: Path, rejects: Path | None, rows: int) -> None:
    """Every input row is in the output once: a prediction, or a reject (in ``rejects``, or in the
    UDF's one output with its reason)."""
    got = ds.dataset(out, format="parquet", partitioning="hive").to_table()
    if rejects is None:
        bad = got.column("reject_reason").is_valid().to_numpy(zero_copy_only=False).sum()
        assert (got.num_rows, bad) == (rows, len(BAD)), f"{out}: {got.num_rows} rows, {bad} rejects for {rows}"
        return
    refused = ds.dataset(rejects, format="parquet", partitioning="hive").count_rows()
    assert (got.num_rows, refused) == (rows - len(BAD), len(BAD)), f"{out}: {got.num_rows} + {refused} for {rows}"


class Engines:
    """Each engine's run of one input folder into a new target under ``scratch``."""

    def __init__(self, scratch: Path, config: Path) -> None:
        self.scratch, self.config = scratch, config
        self.spark: SparkCluster | None = None
        self.ray: RayCluster | None = None
        self.n = 0

    def keep(self) -> set[int]:
        """The processes a ``Popen`` of a cluster waits for."""
        return {p.pid for p in self.spark.processes} if self.spark is not None else set()

    def target(self, tag: str) -> tuple[str, Path]:
        self.n += 1
        return f"{tag}-{self.n}", self.scratch / "out" / f"{tag}-{self.n}"

    def product_args(self, events: Path, run: str, out: Path) -> list[str]:
        return ["--config", str(self.config), "--from", str(events), "--to-parquet", str(out), "--run-id", run]

    def score(self, events: Path, rows: int) -> Run:
        run, out = self.target("score")
        got = run_process([sys.executable, "-m", "streamer", "score", *self.product_args(events, run, out)],
                          os.environ.copy(), self.keep(), rows, one_core=True)
        counted(out, Path(f"{out}_rejects"), rows)
        return got

    def spark_run(self, events: Path, rows: int) -> Run:
        assert self.spark is not None
        run, out = self.target("spark")
        argv = self.spark.submit_command([SPARK_MAIN, *self.product_args(events, run, out)])
        got = run_process(argv, self.spark.env(), self.keep(), rows)
        counted(out, Path(f"{out}_rejects"), rows)
        return got

    def udf(self, events: Path, rows: int) -> Run:
        assert self.spark is not None
        _, out = self.target("udf")
        argv = self.spark.submit_command(["benchmarks/engines_udf.py", str(events), str(out),
                                          str(ROOT / "models/fraud_mlp.onnx")])
        got = run_process(argv, self.spark.env(), self.keep(), rows)
        counted(out, None, rows)
        return got

    def ray_run(self, events: Path, rows: int) -> Run:
        assert self.ray is not None
        run, out = self.target("ray")
        argv = [sys.executable, "-m", "streamer", "score", "--engine", "ray", "--address", self.ray.address,
                *self.product_args(events, run, out)]
        got = run_process(argv, self.ray.env(), self.keep(), rows)
        counted(out, Path(f"{out}_rejects"), rows)
        return got


@contextlib.contextmanager
def clusters(engines: Engines, wanted: set[str], up: dict[str, float]) -> Iterator[None]:
    """The clusters the wanted engines need, each started once and its start timed."""
    with contextlib.ExitStack() as stack:
        if wanted & {"spark", "udf"}:
            (engines.scratch / "spark").mkdir()
            start = time.monotonic()
            engines.spark = stack.enter_context(spark_cluster(engines.scratch / "spark"))
            up["spark"] = up["udf"] = time.monotonic() - start
        if "ray" in wanted:
            start = time.monotonic()
            engines.ray = stack.enter_context(ray_cluster(engines.scratch / "ray"))
            up["ray"] = time.monotonic() - start
        yield


def fit(small: list[Run], big: list[Run]) -> dict[str, float]:
    """Per row (the runs' own seconds, CPU) and the fixed costs from the medians of the two sizes."""
    rows, n = big[0].rows - small[0].rows, small[0].rows
    js, jb = statistics.median(r.job_s for r in small), statistics.median(r.job_s for r in big)
    cs, cb = statistics.median(r.cpu_s for r in small), statistics.median(r.cpu_s for r in big)
    per_row, cpu_per_row = (jb - js) / rows, (cb - cs) / rows
    return {"rows_per_s": 1 / per_row, "cpu_us_per_row": cpu_per_row * 1e6,
            "startup_s": statistics.median(r.wall_s for r in small) - n * per_row,
            "startup_cpu_s": cs - n * cpu_per_row}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows of the big run (the small one: a tenth)")
    ap.add_argument("--files", type=int, default=4, help="Parquet files the rows are written in")
    ap.add_argument("--repeat", type=int, default=1, help="rounds: medians are printed")
    ap.add_argument("--engines", default="score,spark,udf,ray", help="comma-separated: score,spark,udf,ray")
    ap.add_argument("--json", type=Path, help="also write the figures to this file")
    args = ap.parse_args()
    wanted = set(args.engines.split(","))
    adopt_orphans()
    with tempfile.TemporaryDirectory(prefix="bench-engines-") as tmp:
        scratch = Path(tmp)
        sizes = {"small": args.rows // 10, "big": args.rows}
        for size, rows in sizes.items():
            write_events(scratch / size, rows, args.files)
        write_config(scratch / "engines.yaml", scratch / "lake")
        engines = Engines(scratch, scratch / "engines.yaml")
        runs: dict[str, Callable[[Path, int], Run]] = {"score": engines.score, "spark": engines.spark_run,
                                                       "udf": engines.udf, "ray": engines.ray_run}
        measured: dict[str, dict[str, list[Run]]] = {}
        up: dict[str, float] = {}
        with clusters(engines, wanted, up):
            for round_ in range(args.repeat):
                for tag in [t for t in runs if t in wanted]:
                    for size, rows in sizes.items():
                        got = runs[tag](scratch / size, rows - (rows % args.files))
                        measured.setdefault(tag, {}).setdefault(size, []).append(got)
                        print(f"  round {round_ + 1}: ({tag}) {got.rows:,} rows in {got.wall_s:.1f} s, the run's own "
                              f"{got.job_s:.1f} s, {got.cpu_s:.1f} s CPU", flush=True)
    figures = {tag: {**fit(m["small"], m["big"]), "cores": CORES[tag], "cluster_up_s": up.get(tag, 0.0)}
               for tag, m in measured.items()}
    report(figures, args)
    if args.json:
        args.json.write_text(json.dumps({"rows": args.rows, "files": args.files, "machine_cores": MACHINE_CORES,
                                         "figures": figures,
                                         "runs": {t: {s: [asdict(r) for r in rs] for s, rs in m.items()}
                                                  for t, m in measured.items()}}, indent=2))


def report(figures: dict[str, dict[str, float]], args: argparse.Namespace) -> None:
    print(f"{args.rows:,} rows in {args.files} Parquet files (small run: a tenth), {MACHINE_CORES} cores, "
          f"median of {args.repeat}; per row and start-up from the two sizes")
    for tag, f in figures.items():
        print(f"({tag:<5}) {NAMES[tag]:<26} {f['rows_per_s']:>9,.0f} rows/s on {f['cores']:.0f} core(s) = "
              f"{f['rows_per_s'] / f['cores']:>8,.0f} per core; {f['cpu_us_per_row']:5.1f} us CPU/row = "
              f"{1e6 / f['cpu_us_per_row']:>8,.0f} rows per CPU-second; start-up {f['startup_s']:5.1f} s, "
              f"{f['startup_cpu_s']:5.1f} s CPU"
              + (f", cluster up {f['cluster_up_s']:.1f} s" if f["cluster_up_s"] else ""))
    wall = {tag: f["rows_per_s"] / f["cores"] for tag, f in figures.items()}
    cpu = {tag: 1e6 / f["cpu_us_per_row"] for tag, f in figures.items()}
    for tag, base, target in (("spark", "score", 0.7), ("ray", "score", 0.7), ("spark", "udf", 2.0)):
        if tag in wall and base in wall:
            print(f"{tag}/{base} per core {wall[tag] / wall[base]:.2f}, per CPU-second {cpu[tag] / cpu[base]:.2f} "
                  f"(target >= {target})")

if __name__ == "__main__":
    main()
