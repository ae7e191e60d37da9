"""Spark: a table scored on the tests' standalone cluster through spark-submit equals `streamer score`'s,
rejects included, into Iceberg and Parquet; a committed run id refused, forced, and an executor killed."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streamer.lake.places import open_catalog
from tests.conftest import EXAMPLE
from tests.engines.conftest import Scored, unstamped
from tests.lake.test_score import config, events
from tests.support.duck import connect
from tests.support.spark_cluster import SparkCluster, children, cmdline

MAIN = "streamer/engines/spark_main.py"
ROOT = EXAMPLE.parents[2]


def config_file(folder: Path, warehouse: Path) -> Path:
    """The example config (its paths made absolute) with ``lake.warehouse``, as a file spark-submit reads."""
    text = EXAMPLE.read_text().replace("../../", f"{ROOT}/")
    path = folder / "stream.yaml"
    path.write_text(f"{text}\nlake:\n  warehouse: {warehouse}\n  target_file_mb: 1\n")
    return path


def submit(cluster: SparkCluster, *args: str, timeout_s: float = 420) -> subprocess.CompletedProcess[str]:
    return cluster.submit([MAIN, *args], timeout_s=timeout_s)


def read_table(warehouse: Path, name: str) -> pa.Table:
    catalog = open_catalog(config(warehouse.parent).lake)
    location = catalog.load_table(f"streamer.{name}").metadata_location
    return connect().sql(f"SELECT * FROM iceberg_scan('{location}')").to_arrow_table()


def test_the_million_rows_into_an_iceberg_table_equal_streamer_scores(spark_cluster: SparkCluster,
                                                                      million: Scored, tmp_path: Path) -> None:
    warehouse = Path(str(million.cfg.lake.warehouse))
    done = submit(spark_cluster, "--config", str(config_file(tmp_path, warehouse)), "--from", str(million.folder),
                  "--to-table", "spark_million", "--run-id", "spark-million")
    assert done.returncode == 0, done.stderr[-4000:]
    assert "999997 predictions, 3 rejects into streamer.spark_million_rejects" in done.stdout
    got, got_rejects = read_table(warehouse, "spark_million"), read_table(warehouse, "spark_million_rejects")
    want, want_rejects = million.predictions, million.rejects
    assert set(got.column("run_id").to_pylist()) == {"spark-million"}
    assert unstamped(got).equals(unstamped(want.select(got.column_names).cast(got.schema)))
    assert unstamped(got_rejects).equals(unstamped(want_rejects.select(got_rejects.column_names)
                                                   .cast(got_rejects.schema)))


def test_the_million_rows_into_parquet_equal_streamer_scores(spark_cluster: SparkCluster, million: Scored,
                                                             tmp_path: Path) -> None:
    out = tmp_path / "scores"
    done = submit(spark_cluster, "--config", str(config_file(tmp_path, tmp_path / "lake")), "--from",
                  str(million.folder), "--to-parquet", str(out), "--run-id", "spark-pq")
    assert done.returncode == 0, done.stderr[-4000:]
    assert (out / "run_id=spark-pq" / "_SUCCESS").read_text() == "spark-pq"
    con = connect()
    got = con.sql(f"SELECT * FROM read_parquet('{out}/**/*.parquet', hive_partitioning = true)").to_arrow_table()
    got_rejects = con.sql(f"SELECT * FROM read_parquet('{out}_rejects/**/*.parquet', hive_partitioning = true)").to_arrow_table()
    assert got.column("event_date").to_pylist()[:1] == [got.column("event_time")[0].as_py().date()]
    want, want_rejects = million.predictions, million.rejects
    got = got.select(want.column_names)
    got_rejects = got_rejects.select(want_rejects.column_names)
    assert unstamped(got).equals(unstamped(want.cast(got.schema)))
    assert unstamped(got_rejects).equals(unstamped(want_rejects.cast(got_rejects.schema)))


SMALL = 4000  # rows of the table the fault and retry tests score: 4 files of 1000, one reject


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A table of SMALL rows in 4 Parquet files, and a config file whose lake is beside it."""
    root = tmp_path_factory.mktemp("spark-small")
    table = events(SMALL, {123: {"features": [1.0] * 3}})
    (root / "events").mkdir()
    for i in range(4):
        pq.write_table(table.slice(i * 1000, 1000), root / "events" / f"part-{i}.parquet")
    return root / "events", config_file(root, root / "lake")


def each_row_once(warehouse: Path, name: str) -> tuple[int, int]:
    """(rows, distinct places) of a table's predictions."""
    got = read_table(warehouse, name)
    places = set(zip(got.column("source_partition").to_pylist(), got.column("source_offset").to_pylist(), strict=True))
    return got.num_rows, len(places)


@dataclass(frozen=True)
class KilledRun:
    """A submit of the small table (run ``k1``, table ``killed``) during which executors were killed."""

    events: Path
    cfg: Path
    submitted: subprocess.CompletedProcess[str]
    killed: int


@pytest.fixture(scope="module")
def killed_run(spark_cluster: SparkCluster, small: tuple[Path, Path]) -> KilledRun:
    """The small table scored while an executor that runs a task (its Python worker is up) is
    SIGKILLed, once: the job goes on on the executors the workers start again."""
    events_at, cfg = small
    out = cfg.parent / "submit"
    job = spark_cluster.start_submit([MAIN, "--config", str(cfg), "--from", str(events_at), "--to-table", "killed",
                                      "--run-id", "k1"], out)
    killed = []
    try:
        deadline = time.monotonic() + 240
        while not killed and job.poll() is None and time.monotonic() < deadline:
            for executor in spark_cluster.executors():
                if any("pyspark" in cmdline(child) for child in children(executor)):
                    os.kill(executor, signal.SIGKILL)
                    killed.append(executor)
                    break
            time.sleep(0.02)
        code = job.wait(timeout=300)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait(timeout=30)
    done = subprocess.CompletedProcess(job.args, code, out.with_suffix(".stdout").read_text(),
                                       out.with_suffix(".stderr").read_text())
    return KilledRun(events_at, cfg, done, len(killed))


def test_an_executor_killed_mid_job_is_replaced_and_each_row_lands_once(
        killed_run: KilledRun, record_property: pytest.RecordProperty) -> None:
    record_property("executors_killed", killed_run.killed)
    assert killed_run.killed == 1, "no executor ran a Python task while the job ran"
    assert killed_run.submitted.returncode == 0, killed_run.submitted.stdout[-4000:]
    assert f"scored {SMALL} rows" in killed_run.submitted.stdout
    assert each_row_once(killed_run.cfg.parent / "lake", "killed") == (SMALL - 1, SMALL - 1)


def test_a_committed_run_id_is_refused_and_force_replaces_its_rows(spark_cluster: SparkCluster,
                                                                    killed_run: KilledRun) -> None:
    assert killed_run.submitted.returncode == 0
    args = ["--config", str(killed_run.cfg), "--from", str(killed_run.events), "--to-table", "killed",
            "--run-id", "k1"]
    refused = submit(spark_cluster, *args)
    assert refused.returncode == 2
    # spark-submit passes the Python driver's stderr on to its own stdout.
    assert [line for line in refused.stdout.splitlines() if line.startswith("streamer:")] == [
        "streamer: flag --run-id: run 'k1' already committed into streamer.killed; --force scores it again, "
        "replacing its rows, or give another --run-id"]
    assert "Traceback" not in refused.stdout + refused.stderr
    forced = submit(spark_cluster, *args, "--force")
    assert forced.returncode == 0, forced.stdout[-4000:]
    assert each_row_once(killed_run.cfg.parent / "lake", "killed") == (SMALL - 1, SMALL - 1)

    table = open_catalog(config(killed_run.cfg.parent).lake).load_table("streamer.killed")
    runs = [s.summary.get("streamer.run-id") for s in table.snapshots() if s.summary is not None]
    assert runs == ["k1", "k1"]
