"""`streamer score --engine ray` on a real Ray cluster (a head and one more node): the rows `streamer score` writes,
rejects included, into Iceberg and Parquet; a run id that committed refused, --force replacing it; a scoring actor
SIGKILLed mid-job, retried by Ray, each row written once; and `score_dataset` over a Dataset.

Compared with ``unstamped``: the run's own stamps (``run_id``, ``scored_at``, ``rejected_at``) differ between
any two runs, and a Parquet run's Hive folders add ``event_date`` / ``rejected_date`` (and ``run_id``) as
columns; every other column is equal bit for bit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streamer.cli import main
from streamer.engines.scorer import POSITION, ArrowScorer
from streamer.lake.places import open_catalog
from tests.engines.conftest import Scored, unstamped
from tests.lake.test_score import config, events
from tests.support.duck import connect
from tests.support.ray_cluster import ENV, RayCluster

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "deploy" / "config" / "example.yaml"
RUN_TIMEOUT_S = 420  # one run of the million rows on two 1-CPU nodes
KILL_AFTER_CPU_S = 1.5  # an actor is killed once it has scored for this long: mid-job, its model loaded


def config_file(folder: Path) -> Path:
    """The example config (as ``tests.lake.test_score.config`` loads it) as a file, its lake in ``folder/lake``."""
    text = EXAMPLE.read_text().replace("../../", f"{ROOT}/")
    path = folder / "config.yaml"
    path.write_text(f"{text}\nlake:\n  warehouse: {folder / 'lake'}\n  target_file_mb: 1\n")
    return path


def score(cluster: RayCluster, cfg: Path, source: Path, *flags: str) -> subprocess.Popen[str]:
    """``streamer score --engine ray`` on ``cluster``, in a process of its own (as a user runs it)."""
    return subprocess.Popen([sys.executable, "-m", "streamer", "score", "--config", str(cfg), "--from", str(source),
                             "--engine", "ray", "--address", cluster.address, *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cfg.parent,
                            env={**cluster.env(), "PYTHONPATH": str(ROOT)})


def finished(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=RUN_TIMEOUT_S)
    return proc.returncode, out, err


def same(got: pa.Table, want: pa.Table) -> bool:
    """``got`` (read back by DuckDB) equals ``want`` (``streamer score``'s) on ``want``'s columns but the stamps."""
    names = [n for n in want.column_names if n in got.column_names]
    got = got.select(names)
    return unstamped(got).equals(unstamped(want.select(names).cast(got.schema)))


@pytest.mark.timeout(RUN_TIMEOUT_S + 60)
def test_the_million_rows_into_an_iceberg_table_are_streamer_scores_and_the_run_id_is_refused_again(
        ray_cluster: RayCluster, million: Scored, tmp_path: Path) -> None:
    cfg = config_file(tmp_path)
    code, out, err = finished(score(ray_cluster, cfg, million.folder, "--to-table", "nightly", "--run-id", "r1"))
    assert code == 0, err[-3000:]
    assert "rows 1000000 = predictions 999997 + rejects 3" in out
    assert "\tINFO" not in err, err[-2000:]  # Ray's own logs stay off the terminal beyond warnings

    catalog = open_catalog(config(tmp_path).lake)
    table = catalog.load_table("streamer.nightly")
    rejects = catalog.load_table("streamer.nightly_rejects")
    summary = table.current_snapshot().summary
    assert (summary.get("streamer.run-id"), summary.get("streamer.engine")) == ("r1", "ray")
    con = connect()
    got = con.sql(f"SELECT * FROM iceberg_scan('{table.metadata_location}')").to_arrow_table()
    got_rejects = con.sql(f"SELECT * FROM iceberg_scan('{rejects.metadata_location}')").to_arrow_table()
    assert same(got, million.predictions) and same(got_rejects, million.rejects)

    code, _, err = finished(score(ray_cluster, cfg, million.folder, "--to-table", "nightly", "--run-id", "r1"))
    assert code == 2 and "'r1' already committed into streamer.nightly; --force" in err, err[-2000:]


@pytest.mark.timeout(RUN_TIMEOUT_S + 60)
def test_the_million_rows_into_parquet_once_each_with_a_scoring_actor_killed_mid_job(
        ray_cluster: RayCluster, million: Scored, tmp_path: Path) -> None:
    cfg = config_file(tmp_path)
    out_dir = tmp_path / "scores"
    proc = score(ray_cluster, cfg, million.folder, "--to-parquet", str(out_dir), "--run-id", "p1")
    killed = kill_a_scoring_actor(ray_cluster, proc)
    code, out, err = finished(proc)
    print(f"scoring actors SIGKILLed mid-job: {killed}")
    assert code == 0, err[-3000:]
    assert killed == 1
    assert "rows 1000000 = predictions 999997 + rejects 3" in out
    assert (out_dir / "run_id=p1" / "_SUCCESS").is_file()

    con = connect()
    got = con.sql(f"SELECT * FROM read_parquet('{out_dir}/**/*.parquet', hive_partitioning = true)").to_arrow_table()
    got_rejects = con.sql(f"SELECT * FROM read_parquet('{out_dir}_rejects/**/*.parquet', "
                          "hive_partitioning = true)").to_arrow_table()
    assert got.num_rows == 999_997 and got_rejects.num_rows == 3  # each row once, the retried batches too
    assert same(got, million.predictions) and same(got_rejects, million.rejects)


def kill_a_scoring_actor(cluster: RayCluster, proc: subprocess.Popen[str]) -> int:
    """SIGKILL one of ``cluster``'s scoring actors once it has scored for ``KILL_AFTER_CPU_S`` of CPU
    (its model loaded, batches under way), while the run goes on; how many were killed (0 or 1)."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while proc.poll() is None and time.monotonic() < deadline:
        for pid in cluster.workers("Scoring"):
            if cpu_seconds(pid) >= KILL_AFTER_CPU_S:
                os.kill(pid, signal.SIGKILL)
                return 1
        time.sleep(0.05)  # a poll interval between checks of the condition, not a wait for it
    return 0


def cpu_seconds(pid: int) -> float:
    """The CPU time (user + system) process ``pid`` has used; 0 when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.timeout(240)
def test_force_scores_a_committed_run_again_replacing_its_rows(ray_cluster: RayCluster, tmp_path: Path) -> None:
    cfg = config_file(tmp_path)
    pq.write_table(events(3000, {7: {"features": [1.0] * 3}}), tmp_path / "events.parquet", row_group_size=1000)
    flags = ("--to-table", "small", "--run-id", "s1", "--batch-size", "1000", "--concurrency", "1")
    assert finished(score(ray_cluster, cfg, tmp_path / "events.parquet", *flags))[0] == 0
    code, out, err = finished(score(ray_cluster, cfg, tmp_path / "events.parquet", *flags, "--force"))
    assert code == 0, err[-3000:]
    assert "rows 3000 = predictions 2999 + rejects 1" in out

    catalog = open_catalog(config(tmp_path).lake)
    con = connect()
    for name, rows in (("streamer.small", 2999), ("streamer.small_rejects", 1)):
        table = catalog.load_table(name)
        got = con.sql(f"SELECT count(*), count(DISTINCT source_offset) FROM "
                      f"iceberg_scan('{table.metadata_location}')").fetchone()
        assert got == (rows, rows), name  # the forced run replaced the first one's rows: each row once
    runs = [s.summary.get("streamer.run-id") for s in catalog.load_table("streamer.small").snapshots()
            if s.summary is not None and s.summary.get("streamer.run-id")]
    assert set(runs) == {"s1"} and len(runs) >= 2  # the first run's commit, the forced run's (a delete, an append)


@pytest.mark.parametrize("flags, named", [
    (["--to-kv"], "--to-kv"),
    ([], "--to-table"),
    (["--to-parquet", "out", "--concurrency", "0"], "--concurrency"),
])
def test_a_ray_run_that_cannot_write_once_per_run_id_is_refused_naming_the_flag(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], named: str) -> None:
    pq.write_table(events(10, {}), tmp_path / "in.parquet")
    code = main(["score", "--config", str(config_file(tmp_path)), "--from", str(tmp_path / "in.parquet"),
                 "--engine", "ray", *flags])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("streamer:")]
    assert code == 2 and len(lines) == 1 and named in lines[0], lines


def test_a_source_the_models_inputs_cannot_read_is_refused_before_ray_is_reached(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pq.write_table(events(10, {}).drop_columns(["features"]), tmp_path / "in.parquet")
    code = main(["score", "--config", str(config_file(tmp_path)), "--from", str(tmp_path / "in.parquet"),
                 "--engine", "ray", "--address", "127.0.0.1:1", "--to-parquet", str(tmp_path / "out")])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("streamer:")]
    assert code == 2 and len(lines) == 1 and "features" in lines[0], lines
    assert not (tmp_path / "out").exists()


def test_the_ray_flags_are_refused_on_the_local_engine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["score", "--config", str(EXAMPLE), "--from", str(tmp_path), "--to-parquet", str(tmp_path / "o"),
                 "--address", "127.0.0.1:1"])
    assert code == 2 and "--address" in capsys.readouterr().err


@pytest.mark.timeout(180)
def test_score_dataset_maps_a_datasets_batches_to_predictions_and_rejects(ray_cluster: RayCluster, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    for name, value in ENV.items():  # a driver of the test cluster, as its nodes are: no usage stats poller left behind
        monkeypatch.setenv(name, value)

    from streamer.engines.ray import score_dataset

    cfg = config(tmp_path)
    table = events(2000, {5: {"features": [1.0] * 3}, 1500: {"features": None}})
    n = table.num_rows
    placed = (table.append_column(POSITION[0], pa.array(["events"] * n))
              .append_column(POSITION[1], pa.array(np.zeros(n, np.int64)))
              .append_column(POSITION[2], pa.array(np.arange(n, dtype=np.int64))))
    want = ArrowScorer(cfg, "d1").score(placed)
    ray.init(address=ray_cluster.address, logging_level="ERROR", log_to_driver=False)
    try:
        ds = ray.data.from_arrow(placed).repartition(4)
        predictions, rejects = score_dataset(ds, cfg, "d1", concurrency=2, batch_size=300)
        got = pa.concat_tables(ray.get(predictions.to_arrow_refs()))
        got_rejects = pa.concat_tables(ray.get(rejects.to_arrow_refs()))
    finally:
        ray.shutdown()
    assert got.num_rows == 1998 and got_rejects.column("source_offset").to_pylist() == [5, 1500]
    assert unstamped(got).equals(unstamped(want.predictions))
    assert unstamped(got_rejects).equals(unstamped(want.rejects))
