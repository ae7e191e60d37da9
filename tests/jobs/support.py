"""The jobs tests' parts: a config of fresh jobs topics, a Parquet file of events, worker processes, a table read back with DuckDB."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from confluent_kafka import KafkaException
from pyiceberg.catalog.sql import SqlCatalog

from streamer.config import UnscoredConfig
from streamer.config_file import load_unscored
from streamer.jobs.board import Board
from streamer.jobs.states import JobStatus
from streamer.kafka import clients
from tests.support import duck

ROOT = Path(__file__).resolve().parents[2]
WIDTH = 32


def jobs_config(folder: Path, bootstrap: str, *, target_file_mb: int = 128, progress_ms: int = 300,
                run: str | None = None, name: str = "config.yaml") -> Path:
    """A config with fresh jobs topics and group (``run``'s: configs of one run share them), its lake
    in ``folder``; workers fail over in seconds. benchmarks/jobs.py writes its configs with it too."""
    run = run or uuid.uuid4().hex[:8]
    path = folder / name
    path.write_text(f"""\
kafka:
  bootstrap.servers: {bootstrap}
  session.timeout.ms: "6000"
  heartbeat.interval.ms: "1000"
input:
  topics: [ "features-{run}" ]
  group_id: group-{run}
  format: avro
  schema: {ROOT}/streamer/schemas/feature_event.avsc
  features_field: features
model:
  path: {ROOT}/models/fraud_mlp.onnx
  name: fraud_mlp
  version: "1"
  providers: [cpu]
output:
  topic: predictions-{run}
  schema: {ROOT}/streamer/schemas/prediction.avsc
lake:
  warehouse: lake
  target_file_mb: {target_file_mb}
jobs:
  topic: jobs-{run}
  status_topic: jobs-{run}.status
  group_id: workers-{run}
  partitions: 4
  progress_ms: {progress_ms}
""")
    return path


def events_file(path: Path, rows: int, seed: int = 7, first: int = 0) -> Path:
    """``rows`` feature events (ids ``e-<first>``...) as one Parquet file, in row groups of 8,192."""
    rng = np.random.default_rng(seed)
    ids = np.arange(first, first + rows)
    table = pa.table({
        "event_id": pa.array([f"e-{i}" for i in ids]),
        "entity_id": pa.array([f"u{i % 10}" for i in ids]),
        "event_time": pa.array(1_767_225_600_000 + ids, pa.timestamp("ms", tz="UTC")),
        "features": pa.ListArray.from_arrays(np.arange(0, (rows + 1) * WIDTH, WIDTH, dtype=np.int32),
                                             pa.array(rng.random(rows * WIDTH, np.float32))),
    })
    pq.write_table(table, path, row_group_size=8192)
    return path


def start_worker(config: Path, name: str, log: Path, fault: list[str] | None = None) -> subprocess.Popen[bytes]:
    """``streamer worker`` as a process of its own group (``fault``: tests/support/worker_faults.py's words)."""
    head = [sys.executable, "-m", "tests.support.worker_faults", *fault] if fault else [sys.executable, "-m", "streamer"]
    with log.open("ab") as out:
        return subprocess.Popen([*head, "worker", "--config", str(config), "--name", name], cwd=ROOT, stdout=out,
                                stderr=subprocess.STDOUT, process_group=0,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})


def stop_workers(*procs: subprocess.Popen[bytes]) -> None:
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)


def await_members(config: Path, n: int, timeout_s: float = 60.0) -> None:
    """Wait until the workers' group has ``n`` members with partitions (a job submitted then stays
    with the member that takes it)."""
    cfg = config_of(config)
    admin = clients.config_admin(cfg)
    deadline = time.monotonic() + timeout_s
    members: list[Any] = []
    try:
        while True:
            try:
                group = admin.describe_consumer_groups([cfg.jobs.group_id], request_timeout=10)[
                    cfg.jobs.group_id].result(10)
            except KafkaException as exc:  # the group's coordinator still loading on a fresh broker
                assert clients.is_transient(exc.args[0]), exc
            else:
                members = [m for m in group.members if m.assignment.topic_partitions]
                if len(members) == n and str(group.state).endswith("STABLE"):
                    return
            assert time.monotonic() < deadline, f"the group has {len(members)} members, not {n}"
            time.sleep(0.2)  # the group's state is asked for; no event says it changed
    finally:
        del admin  # no client outlives its use (the session's last check)


def config_of(path: Path) -> UnscoredConfig:
    return load_unscored(path)


def await_status(config: Path, job_id: str, done: Callable[[JobStatus], bool], timeout_s: float = 90.0) -> JobStatus:
    """The job's status once ``done`` holds for it (AssertionError with the last one at the timeout)."""
    board = Board(config_of(config)).follow()
    try:
        status = board.wait(job_id, done, timeout_s)
    finally:
        board.close()
    assert status is not None and done(status), f"job {job_id}: {status}"
    return status


def table_rows(config: Path, table: str) -> tuple[int, int, list[str]]:
    """(rows, distinct event ids, the event ids) of an Iceberg table of the config's lake."""
    lake = config.parent / "lake"
    catalog = SqlCatalog("streamer", uri=f"sqlite:///{lake}/catalog.db", warehouse=lake.as_uri())
    location = catalog.load_table(f"streamer.{table}").metadata_location
    con = duck.connect()
    rows, distinct = con.execute(f"SELECT count(*), count(DISTINCT event_id) FROM iceberg_scan('{location}')").fetchone()
    ids = [r[0] for r in con.execute(f"SELECT event_id FROM iceberg_scan('{location}')").fetchall()]
    return int(rows), int(distinct), ids
