"""Batch jobs through the queue against `streamer score` of the same file, the time from submit to running, and a resumed job.

    python benchmarks/jobs.py [--events N] [--repeat R] [--submits K] [--figures s,q,t,r]

(s) `streamer score` of a Parquet file of ``--events`` rows into a new Iceberg table: one process,
    timed from its start to its exit (the baseline).
(q) The same file as a job into a new table: a `streamer worker` process is started first and is
    idle; timed from the start of the `streamer jobs submit` process to the job's ``finished_at``
    in its ``completed`` status. q/s, rows per second of (q) over (s), is printed (target >= 0.9),
    with where each figure's time goes: (s)'s start-up and exit against its run (its summary's
    seconds), (q)'s submit command, its wait to ``running`` and its run on the worker.
The worker runs a job of 1,000 rows before the figures: a worker's first job pays its imports.
(t) ``--submits`` jobs of a 1,000-row file, one at a time, each submitted to the idle worker: the
    time from the start of `jobs submit` to the job's ``started_at`` (``running``), and from the
    status's ``submitted_at`` (written by the submit, after its start-up) to ``started_at``,
    median and max (target: under 2 s).
(r) A resumed job: a job of ``--events`` rows into a new table whose files commit every
    ``--resume-file-mb`` MB; the worker running it is SIGKILLed once the job reports a third of its
    rows, and a second worker, started then, resumes it. DuckDB reads the table back: its rows
    against the file's, duplicates (rows less distinct event ids) and missing ids (the file's ids
    not in the table), with the job's attempts and its status's history.

Each of (s) and (q) runs ``--repeat`` times, in a shuffled order each round; medians and minima
are printed. The file is written before the figures, outside their time, with lake.py's events;
every process reads one config file in a temporary folder (its own jobs topics and group, the
embedded SQLite catalog). Both figures count their process start-up (Python, the config, the
model's session, which the worker builds per job): what a user waits for. A benchmark, not a
test: the figures are only comparable within one run on one machine.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
from harness import ROOT, rounds  # benchmarks/: also puts the project on sys.path
from lake import EVENT_FILE, parts

from streamer.config_file import load_unscored
from streamer.dev.broker import kafka_cluster
from streamer.jobs.board import Board, ensure_topics
from streamer.jobs.queue import least_busy
from streamer.jobs.states import JobStatus, State
from tests.jobs.support import jobs_config

WAIT_S = 600.0


class Bench:
    """A run's folder, its config files, its board (following the status topic) and its workers."""

    def __init__(self, bootstrap: str, scratch: Path) -> None:
        self.scratch, self.run = scratch, uuid.uuid4().hex[:6]
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        self.config = self._config(bootstrap, "jobs.yaml", 128)
        self.cfg = load_unscored(str(self.config))
        ensure_topics(self.cfg)
        self.board = _retry(lambda: Board(self.cfg).follow())  # a topic just made may not have its leaders yet
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.parts: dict[str, list[tuple[float, ...]]] = {}  # each figure's seconds, by part, per round

    def _config(self, bootstrap: str, name: str, file_mb: int) -> Path:
        return jobs_config(self.scratch, bootstrap, target_file_mb=file_mb, progress_ms=1000, run=self.run, name=name)

    def streamer(self, *argv: str | Path) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([sys.executable, "-m", "streamer", *map(str, argv)], env=self.env, capture_output=True,
                              text=True, timeout=WAIT_S, check=False)
        if done.returncode != 0:
            raise SystemExit(f"streamer {' '.join(map(str, argv))}: exit {done.returncode}\n{done.stderr[-2000:]}")
        return done

    def start_worker(self, name: str, config: Path | None = None) -> None:
        """A `streamer worker` process, returned once the group has a member with partitions."""
        log = (self.scratch / f"{name}.log").open("wb")
        self.workers[name] = subprocess.Popen(
            [sys.executable, "-m", "streamer", "worker", "--config", str(config or self.config), "--name", name],
            env=self.env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while least_busy(self.cfg) is None:
            if self.workers[name].poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"worker {name} did not join: {(self.scratch / f'{name}.log').read_text()[-2000:]}")
            time.sleep(0.2)

    def stop_workers(self) -> None:
        for proc in self.workers.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.workers.values():
            proc.wait(30)
        self.workers.clear()

    def spec(self, name: str, source: Path, table: str) -> Path:
        path = self.scratch / f"{name}.yaml"
        path.write_text(f"source: {{parquet: {source}}}\ntarget: {{table: {table}}}\n")
        return path

    def submit(self, job_id: str, spec: Path, config: Path | None = None) -> float:
        """Submit a job with `streamer jobs submit`; the wall-clock time at its start."""
        started = time.time()
        self.streamer("jobs", "submit", "--config", config or self.config, spec, "--id", job_id)
        return started

    def final(self, job_id: str) -> JobStatus:
        status = self.board.wait(job_id, lambda s: s.final, WAIT_S)
        if status is None or status.state != State.COMPLETED:
            raise SystemExit(f"job {job_id}: {status}")
        return status


def _retry(make: Callable[[], Board], tries: int = 20) -> Board:
    for i in range(tries):
        try:
            return make()
        except Exception:  # noqa: BLE001 (a fresh topic's metadata settles within seconds)
            if i == tries - 1:
                raise
            time.sleep(0.5)
    raise AssertionError("unreachable")


def write_file(path: Path, n: int) -> None:
    with pq.ParquetWriter(path, EVENT_FILE, compression="zstd") as writer:
        for part in parts(n):
            writer.write_table(pa.Table.from_pylist(part, EVENT_FILE))


def score_run(bench: Bench, source: Path, table: str, n: int) -> float:
    """(s): rows per second of `streamer score`, from its start to its exit."""
    started = time.monotonic()
    out = bench.streamer("score", "--config", bench.config, "--from", source, "--to-table", table, "--run-id", table)
    seconds = time.monotonic() - started
    assert f"rows {n} = predictions {n} + rejects 0" in out.stdout, out.stdout
    own = float(re.findall(r"([\d.]+) s in all", out.stdout)[-1])  # its summary's: from the warmed model to the commit
    bench.parts.setdefault("s", []).append((seconds - own, own))
    return n / seconds


def job_run(bench: Bench, source: Path, table: str, n: int) -> float:
    """(q): rows per second of the job, from the start of its submit to its finish."""
    started = bench.submit(table, bench.spec(table, source, table))
    submitted = time.time()
    status = bench.final(table)
    assert (status.predictions, status.rejects) == (n, 0), status
    assert status.finished_at_ms is not None and status.started_at_ms is not None
    bench.parts.setdefault("q", []).append((submitted - started, status.started_at_ms / 1000 - submitted,
                                            (status.finished_at_ms - status.started_at_ms) / 1000))
    return n / (status.finished_at_ms / 1000 - started)


def to_running(bench: Bench, small: Path, k: int) -> tuple[list[float], list[float], list[float]]:
    """(t): seconds from the submit's start, and from its status's submitted_at, to running; and
    from running to completed."""
    from_start, from_status, runs = [], [], []
    for i in range(k):
        job_id = f"t{i}_{bench.run}"
        started = bench.submit(job_id, bench.spec(job_id, small, f"t_{bench.run}"))
        status = bench.final(job_id)
        assert status.started_at_ms is not None and status.finished_at_ms is not None and status.attempt == 1
        from_start.append(status.started_at_ms / 1000 - started)
        from_status.append((status.started_at_ms - status.submitted_at_ms) / 1000)
        runs.append((status.finished_at_ms - status.started_at_ms) / 1000)
    return from_start, from_status, runs


def resumed(bench: Bench, source: Path, n: int, file_mb: int) -> None:
    """(r): a job whose worker is SIGKILLed mid-job, finished by a second worker; its rows counted."""
    config = bench._config(bench.cfg.kafka["bootstrap.servers"], "resume.yaml", file_mb)
    table = f"r_{bench.run}"
    bench.start_worker("bench-a", config)
    bench.submit(table, bench.spec(table, source, table), config)
    at = bench.board.wait(table, lambda s: s.final or s.rows_done >= n // 3, WAIT_S)
    assert at is not None and at.state == State.RUNNING, at
    bench.workers["bench-a"].send_signal(signal.SIGKILL)
    bench.workers["bench-a"].wait(10)
    killed = time.monotonic()
    bench.start_worker("bench-b", config)
    status = bench.final(table)
    took = time.monotonic() - killed
    rows, distinct, missing, snapshots = count_rows(bench, table, source)
    print(f"(r) resumed job: SIGKILL of bench-a at {at.rows_done:,} rows reported of {n:,}; bench-b finished it "
          f"{took:.1f} s after the kill (the group's session timeout 6 s, then {bench.cfg.jobs.progress_ms} ms "
          f"progress periods of quiet); attempt {status.attempt}, {snapshots} snapshots in the table")
    print(f"    table rows {rows:,} = source {n:,}: {rows == n}; duplicates {rows - distinct:,}; missing {missing:,}")
    for line in status.events:
        print(f"    {line}")


def count_rows(bench: Bench, table: str, source: Path) -> tuple[int, int, int, int]:
    """The table's rows, distinct event ids, the file's ids missing from it, and its snapshots, read by DuckDB."""
    from pyiceberg.catalog.sql import SqlCatalog

    warehouse = bench.scratch / "lake"
    catalog = SqlCatalog("streamer", uri=f"sqlite:///{warehouse}/catalog.db", warehouse=warehouse.as_uri())
    loaded = catalog.load_table(f"streamer.{table}")
    con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    for name in ("avro", "iceberg"):
        module = __import__(f"duckdb_extension_{name}")
        con.execute(f"LOAD '{next(Path(module.__file__).parent.glob('extensions/*/*.duckdb_extension'))}'")
    scan = f"iceberg_scan('{loaded.metadata_location}')"
    rows, distinct = con.sql(f"SELECT count(*), count(DISTINCT event_id) FROM {scan}").fetchone() or (0, 0)
    missing = con.sql(f"SELECT count(*) FROM read_parquet('{source}') AS f ANTI JOIN {scan} AS t USING (event_id)"
                      ).fetchone() or (0,)
    return int(rows), int(distinct), int(missing[0]), len(loaded.snapshots())


def figures(args: argparse.Namespace, bootstrap: str, scratch: Path) -> None:
    wanted = set(args.figures.split(","))
    source, small = scratch / "events.parquet", scratch / "small.parquet"
    write_file(source, args.events)
    write_file(small, 1000)
    bench = Bench(bootstrap, scratch)
    try:
        if wanted & {"s", "q", "t"}:
            bench.start_worker("bench-idle")
            warm = f"w_{bench.run}"
            bench.submit(warm, bench.spec(warm, small, warm))
            first = bench.final(warm)
            assert first.started_at_ms is not None and first.finished_at_ms is not None
            print(f"the worker's first job (1,000 rows, not timed in the figures): running to completed "
                  f"{(first.finished_at_ms - first.started_at_ms) / 1000:.2f} s (its imports: the lake, the model "
                  "runtime)", flush=True)
        runs: dict[str, Callable[[str], float]] = {
            "s": lambda table: score_run(bench, source, table, args.events),
            "q": lambda table: job_run(bench, source, table, args.events),
        }
        rates: dict[str, list[float]] = {}
        for round_, tag, fn in rounds({k: fn for k, fn in runs.items() if k in wanted}, args.repeat):
            rate = fn(f"{tag}{round_}_{bench.run}")
            rates.setdefault(tag, []).append(rate)
            print(f"  round {round_ + 1}: ({tag}) {rate:,.0f} rows/s", flush=True)
        print(f"rows {args.events:,} of 32 features, median and min of {args.repeat} runs, "
              f"each from its process's start (unpinned)")
        names = {"s": "streamer score (a process)", "q": "the same file as a job"}
        for k in sorted(rates, reverse=True):
            print(f"({k}) {names[k]:<27} median {statistics.median(rates[k]):>10,.0f}   "
                  f"min {min(rates[k]):>10,.0f} rows/s")
        if {"s", "q"} <= set(rates):
            print(f"q/s {statistics.median(rates['q']) / statistics.median(rates['s']):.2f} (target >= 0.9)   "
                  "per round: " + " ".join(f"{q / s:.2f}" for q, s in zip(rates["q"], rates["s"], strict=True)))
        if "s" in bench.parts:
            start_up, own = (statistics.median(x) for x in zip(*bench.parts["s"], strict=True))
            print(f"    (s) medians: the process's start-up and exit {start_up:.2f} s, its run {own:.2f} s "
                  "(the model warmed up to the last commit)")
        if "q" in bench.parts:
            submit, queued, running = (statistics.median(x) for x in zip(*bench.parts["q"], strict=True))
            print(f"    (q) medians: the submit command {submit:.2f} s, then to running {queued:.2f} s, "
                  f"running to completed {running:.2f} s (the worker's config, model session and run)")
        if "t" in wanted:
            from_start, from_status, runs = to_running(bench, small, args.submits)
            print(f"(t) submit to running, {args.submits} jobs to an idle worker: from the submit's start "
                  f"median {statistics.median(from_start):.2f} s, max {max(from_start):.2f} s; from its "
                  f"submitted_at median {statistics.median(from_status):.2f} s, max {max(from_status):.2f} s "
                  f"(target < 2 s); running to completed median {statistics.median(runs):.2f} s")
        bench.stop_workers()
        if "r" in wanted:
            resumed(bench, source, args.events, args.resume_file_mb)
    finally:
        for proc in bench.workers.values():
            if proc.poll() is None:
                proc.kill()
        bench.board.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000, help="rows of the file (default 1,000,000)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of (s) and (q): median and min are printed")
    ap.add_argument("--submits", type=int, default=5, help="jobs of (t), one at a time")
    ap.add_argument("--resume-file-mb", type=int, default=2, help="(r)'s lake.target_file_mb: a commit per file")
    ap.add_argument("--figures", default="s,q,t,r", help="comma-separated figures to run (default: s,q,t,r)")
    args = ap.parse_args()
    with kafka_cluster() as bootstrap, tempfile.TemporaryDirectory() as scratch:
        figures(args, bootstrap, Path(scratch))


if __name__ == "__main__":
    main()
