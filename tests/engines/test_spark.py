"""Spark: a table scored on the tests' standalone cluster equals `streamer score`'s, rejects included:
the million rows into Iceberg, and a small table into Parquet; a committed run id refused (exit 2
from spark-submit's entry point) and forced; an executor killed mid-job. The runs share one session
of this process on the cluster, so each costs its rows rather than an application's start (about
30 s here); the docs page's test runs spark-submit itself."""

from __future__ import annotations

import io
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from streamer.commands.lake import Target, run_score
from streamer.config import Config, LakeConfig
from streamer.engines import spark_main
from streamer.engines.scorer import ArrowScorer
from streamer.engines.spark import catalog_conf, score_dataframe
from streamer.engines.spark_io import SparkRun, score_table
from streamer.errors import ReplayFinishedError
from streamer.lake.places import open_catalog
from tests.conftest import EXAMPLE
from tests.engines.conftest import Scored, unstamped
from tests.lake.test_score import config, events
from tests.support.duck import connect
from tests.support.spark_cluster import SparkCluster, children, cmdline

# The session's start (executors, their Python workers) and the million rows on two one-core workers.
pytestmark = pytest.mark.timeout(900)
ROOT = EXAMPLE.parents[2]


def config_file(folder: Path, warehouse: Path) -> Path:
    """The example config (its paths made absolute) with ``lake.warehouse``, as a file spark_main reads."""
    text = EXAMPLE.read_text().replace("../../", f"{ROOT}/")
    path = folder / "stream.yaml"
    path.write_text(f"{text}\nlake:\n  warehouse: {warehouse}\n  target_file_mb: 1\n")
    return path


def read_table(lake: LakeConfig, name: str) -> pa.Table:
    location = open_catalog(lake).load_table(f"streamer.{name}").metadata_location
    return connect().sql(f"SELECT * FROM iceberg_scan('{location}')").to_arrow_table()


@pytest.fixture(scope="module")
def spark(spark_cluster: SparkCluster, million: Scored) -> Iterator[Any]:
    """One session of this process on the cluster, its catalog the million rows' lake (every run of
    this module writes there, each into a table of its own). The executors import this checkout,
    tests/ included: its path is theirs."""
    with spark_cluster.session(catalog_conf(million.cfg.lake)) as session:
        yield session


def test_the_million_rows_into_an_iceberg_table_equal_streamer_scores(
        spark: Any, million: Scored, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    done = score_table(spark, million.cfg, str(million.folder), Target(table="spark_million"), "spark-million")
    assert (done.predictions, done.rejects) == (999_997, 3)
    got, got_rejects = read_table(million.cfg.lake, "spark_million"), read_table(million.cfg.lake,
                                                                                 "spark_million_rejects")
    want, want_rejects = million.predictions, million.rejects
    assert set(got.column("run_id").to_pylist()) == {"spark-million"}
    assert unstamped(got).equals(unstamped(want.select(got.column_names).cast(got.schema)))
    assert unstamped(got_rejects).equals(unstamped(want_rejects.select(got_rejects.column_names)
                                                   .cast(got_rejects.schema)))

    # spark-submit's entry point again with the run id: refused before a session starts, exit 2, one line.
    config = config_file(tmp_path, Path(str(million.cfg.lake.warehouse)))
    code = spark_main.main(["--config", str(config), "--from", str(million.folder), "--to-table", "spark_million",
                            "--run-id", "spark-million"])
    err = capsys.readouterr().err
    assert code == 2 and err == ("streamer: flag --run-id: run 'spark-million' already committed into "
                                 "streamer.spark_million; --force scores it again, replacing its rows, or give "
                                 "another --run-id\n")


SMALL = 4000  # rows of the table the Parquet, fault and retry runs score: 4 files of 1000, two rejects


@dataclass(frozen=True)
class Small:
    """A table of SMALL rows in 4 Parquet files, its config (the session's lake), and what
    ``streamer score`` wrote for it."""

    events: Path
    cfg: Config
    predictions: pa.Table
    rejects: pa.Table


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory, million: Scored) -> Small:
    root = tmp_path_factory.mktemp("spark-small")
    table = events(SMALL, {123: {"features": [1.0] * 3}, 3999: {"features": [float("nan")] * 32}})
    (root / "events").mkdir()
    for i in range(4):
        pq.write_table(table.slice(i * 1000, 1000), root / "events" / f"part-{i}.parquet", row_group_size=300)
    cfg = replace(config(root), lake=million.cfg.lake)  # the session's catalog
    run_score(cfg, str(root / "events"), Target(parquet=str(root / "reference")), run_id="reference",
              progress=io.StringIO())
    return Small(root / "events", cfg, ds.dataset(root / "reference", format="parquet").to_table(),
                 ds.dataset(root / "reference_rejects", format="parquet").to_table())


def test_a_table_into_parquet_equals_streamer_scores(spark: Any, small: Small, tmp_path: Path) -> None:
    out = tmp_path / "scores"
    done = score_table(spark, small.cfg, str(small.events), Target(parquet=str(out)), "spark-pq")
    assert (done.predictions, done.rejects) == (SMALL - 2, 2)
    assert (out / "run_id=spark-pq" / "_SUCCESS").read_text() == "spark-pq"
    con = connect()
    got = con.sql(f"SELECT * FROM read_parquet('{out}/**/*.parquet', hive_partitioning = true)").to_arrow_table()
    got_rejects = con.sql(f"SELECT * FROM read_parquet('{out}_rejects/**/*.parquet', hive_partitioning = true)"
                          ).to_arrow_table()
    assert got.column("event_date").to_pylist()[:1] == [got.column("event_time")[0].as_py().date()]
    assert set(got.column("run_id").to_pylist()) == {"spark-pq"}
    want, want_rejects = small.predictions, small.rejects
    got, got_rejects = got.select(want.column_names), got_rejects.select(want_rejects.column_names)
    assert got.num_rows == SMALL - 2 and got_rejects.num_rows == 2
    assert unstamped(got).equals(unstamped(want.cast(got.schema)))
    assert unstamped(got_rejects).equals(unstamped(want_rejects.cast(got_rejects.schema)))


class CountingScorer(ArrowScorer):
    """An ArrowScorer that adds each batch's row count to a file: how often rows were scored."""

    def __init__(self, *args: Any, tally: Path, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tally = tally

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "tally": self.tally}

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self.tally = state["tally"]

    def outcomes(self, batch: pa.RecordBatch | pa.Table) -> pa.Table:
        with self.tally.open("a") as out:
            out.write(f"{batch.num_rows}\n")
        return super().outcomes(batch)


def test_each_row_is_scored_once_however_many_actions_read_both_frames(spark: Any, small: Small,
                                                                       tmp_path: Path) -> None:
    table = events(3000, {7: {"features": [1.0] * 3}, 2900: {"features": [float("nan")] * 32}})
    df = spark.createDataFrame(table).repartition(3)
    tally = tmp_path / "scored.txt"
    predictions, rejects = score_dataframe(df, small.cfg, "once",
                                           scorer=CountingScorer(small.cfg, "once", tally=tally))
    assert (predictions.count(), rejects.count()) == (2998, 2)
    got = predictions.toArrow()
    assert sorted(rejects.toArrow().column("error").to_pylist()) == ["ValidationError"] * 2
    assert got.num_rows == 2998 and set(got.column("run_id").to_pylist()) == {"once"}
    assert sum(int(n) for n in tally.read_text().split()) == 3000  # four actions, one scoring


def each_row_once(lake: LakeConfig, name: str) -> tuple[int, int]:
    """(rows, distinct places) of a table's predictions."""
    location = open_catalog(lake).load_table(f"streamer.{name}").metadata_location
    got = connect().sql(f"SELECT source_partition, source_offset FROM iceberg_scan('{location}')").to_arrow_table()
    places = set(zip(got.column("source_partition").to_pylist(), got.column("source_offset").to_pylist(), strict=True))
    return got.num_rows, len(places)


KILLED, NEXT = "transactions-2026-12-01", "transactions-2026-12-02"  # alike in their first 16 characters


@dataclass(frozen=True)
class KilledRun:
    """A run of the small table (run ``KILLED``, table ``killed``) during which an executor was killed."""

    run: SparkRun
    killed: int


@pytest.fixture(scope="module")
def killed_run(spark: Any, spark_cluster: SparkCluster, small: Small) -> KilledRun:
    """The small table scored while an executor running one of its tasks is SIGKILLed, once: the
    job goes on on the executor its worker starts again."""
    tracker = spark.sparkContext.statusTracker()
    done: list[SparkRun] = []
    runner = threading.Thread(target=lambda: done.append(
        score_table(spark, small.cfg, str(small.events), Target(table="killed"), KILLED)))
    killed: list[int] = []
    runner.start()
    deadline = time.monotonic() + 240
    while not killed and runner.is_alive() and time.monotonic() < deadline:
        stages = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
        if any(stage is not None and stage.numActiveTasks > 0 for stage in stages):
            for executor in spark_cluster.executors():
                if any("pyspark" in cmdline(child) for child in children(executor)):
                    os.kill(executor, signal.SIGKILL)
                    killed.append(executor)
                    break
        time.sleep(0.02)
    runner.join(timeout=300)
    assert done, "the run did not finish"
    return KilledRun(done[0], len(killed))


def test_an_executor_killed_mid_job_is_replaced_and_each_row_lands_once(
        killed_run: KilledRun, small: Small, record_property: pytest.RecordProperty) -> None:
    record_property("executors_killed", killed_run.killed)
    assert killed_run.killed == 1, "no executor ran a Python task while the job ran"
    assert (killed_run.run.predictions, killed_run.run.rejects) == (SMALL - 2, 2)
    assert each_row_once(small.cfg.lake, "killed") == (SMALL - 2, SMALL - 2)


def test_a_committed_run_id_is_refused_and_force_replaces_its_rows(spark: Any, killed_run: KilledRun,
                                                                    small: Small) -> None:
    assert killed_run.run.predictions == SMALL - 2
    with pytest.raises(ReplayFinishedError, match=f"'{KILLED}' already committed into streamer.killed"):
        score_table(spark, small.cfg, str(small.events), Target(table="killed"), KILLED)
    # A run alike in its first 16 characters, then the first one forced: its rows alone are replaced.
    score_table(spark, small.cfg, str(small.events), Target(table="killed"), NEXT)
    forced = score_table(spark, small.cfg, str(small.events), Target(table="killed"), KILLED, force=True)
    assert (forced.predictions, forced.rejects) == (SMALL - 2, 2)
    location = open_catalog(small.cfg.lake).load_table("streamer.killed").metadata_location
    per_run = connect().sql(f"SELECT run_id, count(*), count(DISTINCT source_partition * 100000 + source_offset) "
                            f"FROM iceberg_scan('{location}') GROUP BY run_id ORDER BY run_id").fetchall()
    assert per_run == [(KILLED, SMALL - 2, SMALL - 2), (NEXT, SMALL - 2, SMALL - 2)]
    table = open_catalog(small.cfg.lake).load_table("streamer.killed")
    runs = [s.summary.get("streamer.run-id") for s in table.snapshots() if s.summary is not None]
    assert runs == [KILLED, NEXT, KILLED]
