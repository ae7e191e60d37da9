"""The sinks as checkpoints, driven directly (no Kafka): crashes between commits, --force, shard counts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from streamer.config import LakeConfig
from streamer.config_check import Location
from streamer.errors import ConfigError, ReplayFinishedError
from streamer.lake.columns import TIMESTAMP, rejects_table
from streamer.lake.iceberg import IcebergSink
from streamer.lake.parquet import ParquetSink
from streamer.lake.sink import Shard

SCHEMA = pa.schema([("event_id", pa.string()), ("run_id", pa.string()), ("source_topic", pa.string()),
                    ("source_partition", pa.int32()), ("source_offset", pa.int64()), ("event_time", TIMESTAMP)])
PLAN = {("t", 0): (0, 20)}


def preds(a: int, b: int) -> pa.Table:
    n = b - a
    return pa.table({"event_id": [str(i) for i in range(a, b)], "run_id": ["r"] * n, "source_topic": ["t"] * n,
                     "source_partition": pa.array([0] * n, pa.int32()), "source_offset": pa.array(range(a, b), pa.int64()),
                     "event_time": pa.array([1_700_000_000_000_000] * n, pa.int64()).cast(TIMESTAMP)}, schema=SCHEMA)


class Letter:
    def __init__(self, offset: int) -> None:
        self.at = offset

    def topic(self) -> str:
        return "t"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self.at

    def value(self) -> bytes:
        return b"x"


def rejected(offset: int) -> pa.Table:
    return rejects_table("r", [(ValueError("bad"), Letter(offset))])


def rows(sink: IcebergSink) -> tuple[list[int], list[int]]:
    sink.table.refresh()
    sink.rejects.refresh()
    return (sorted(sink.table.scan().to_arrow().column("source_offset").to_pylist()),
            sorted(sink.rejects.scan().to_arrow().column("source_offset").to_pylist()))


def lake(tmp_path: Path) -> LakeConfig:
    return LakeConfig(warehouse=Location(str(tmp_path / "lake")))


def test_a_crash_between_the_rejects_and_the_predictions_commit_keeps_each_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sink = IcebergSink(lake(tmp_path), "a", SCHEMA)
    sink.resume("r", Shard(), PLAN, False)
    sink.write(preds(0, 9), rejected(9))
    sink.commit({("t", 0): (0, 10)})
    sink.write(preds(10, 19), rejected(19))
    add = IcebergSink._add

    def dies_after_the_rejects(self: IcebergSink, table: Any, *rest: Any) -> None:
        if table is self.table:
            raise RuntimeError("killed")
        add(self, table, *rest)

    monkeypatch.setattr(IcebergSink, "_add", dies_after_the_rejects)
    with pytest.raises(RuntimeError):
        sink.commit({("t", 0): (10, 20)})
    monkeypatch.setattr(IcebergSink, "_add", add)
    again = IcebergSink(lake(tmp_path), "a", SCHEMA)
    resume = again.resume("r", Shard(), PLAN, False)
    assert (resume.reached, resume.seq) == ({("t", 0): 10}, 1)
    again.write(preds(10, 19), rejected(19))
    again.commit({("t", 0): (10, 20)})
    assert rows(again) == ([*range(9), *range(10, 19)], [9, 19])


def test_force_replaces_the_run_finished_or_not(tmp_path: Path) -> None:
    for finished in (True, False):
        name = f"f{int(finished)}"
        sink = IcebergSink(lake(tmp_path), name, SCHEMA)
        sink.resume("r", Shard(), PLAN, False)
        sink.write(preds(0, 10), None)
        sink.commit({("t", 0): (0, 10)})
        if finished:
            sink.write(preds(10, 20), None)
            sink.commit({("t", 0): (10, 20)})
            with pytest.raises(ReplayFinishedError):
                IcebergSink(lake(tmp_path), name, SCHEMA).resume("r", Shard(), PLAN, False)
        again = IcebergSink(lake(tmp_path), name, SCHEMA)
        resume = again.resume("r", Shard(), PLAN, True)
        assert (resume.reached, resume.seq) == ({}, 0)  # a new attempt: nothing of the old one counts
        again.write(preds(0, 20), None)
        again.commit({("t", 0): (0, 20)})
        assert rows(again) == (list(range(20)), [])


def test_force_on_one_shard_leaves_the_other_shards_rows(tmp_path: Path) -> None:
    plans = {0: {("t", 0): (0, 5)}, 1: {("t", 1): (0, 5)}}
    for index, plan in plans.items():
        sink = IcebergSink(lake(tmp_path), "s", SCHEMA)
        sink.resume("r", Shard(index, 2), plan, False)
        table = preds(0, 5).set_column(3, "source_partition", pa.array([index] * 5, pa.int32()))
        sink.write(table, None)
        sink.commit({("t", index): (0, 5)})
    again = IcebergSink(lake(tmp_path), "s", SCHEMA)
    again.resume("r", Shard(0, 2), plans[0], True)
    left = again.table.scan().to_arrow()
    assert set(left.column("source_partition").to_pylist()) == {1}


def test_a_run_resumes_in_the_shard_count_it_was_planned_in(tmp_path: Path) -> None:
    IcebergSink(lake(tmp_path), "c", SCHEMA).resume("r", Shard(0, 2), {("t", 0): (0, 5)}, False)
    with pytest.raises(ConfigError, match="planned in 2 shards"):
        IcebergSink(lake(tmp_path), "c", SCHEMA).resume("r", Shard(), PLAN, False)


def test_parquet_force_forgets_the_log_before_the_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = str(tmp_path / "out")
    sink = ParquetSink(lake(tmp_path), out, SCHEMA)
    sink.resume("r", Shard(), PLAN, False)
    sink.write(preds(0, 20), None)
    sink.commit({("t", 0): (0, 20)})
    deleted: list[str] = []
    delete_file = type(sink.fs).delete_file

    def dies_at_the_first_file(fs: Any, path: str) -> None:
        deleted.append(path)
        raise RuntimeError("killed")

    again = ParquetSink(lake(tmp_path), out, SCHEMA)
    monkeypatch.setattr(again, "fs", type("Fs", (), {"__getattr__": lambda s, n: getattr(sink.fs, n),
                                                     "delete_file": dies_at_the_first_file})())
    with pytest.raises(RuntimeError):
        again.resume("r", Shard(), PLAN, True)
    assert deleted and delete_file  # the log went first: the run is not "finished" with its files gone
    third = ParquetSink(lake(tmp_path), out, SCHEMA)
    resume = third.resume("r", Shard(), PLAN, False)
    assert resume.reached == {} and not resume.done


def test_a_catalog_that_cannot_be_opened_names_the_key_and_never_its_password(tmp_path: Path) -> None:
    from streamer.config import Secret
    from streamer.lake.places import open_catalog

    bad = LakeConfig(warehouse=Location(str(tmp_path)), catalog_uri=Secret("sqlite:///" + str(tmp_path / "hunter2" / "no" / "c.db")))
    with pytest.raises(ConfigError, match="lake.catalog_uri") as caught:
        open_catalog(bad)
    assert "hunter2" not in str(caught.value) and caught.value.__cause__ is None
    assert "hunter2" not in repr(bad)


def test_a_table_partitioned_another_way_is_refused_before_anything_is_read(tmp_path: Path) -> None:
    from pyiceberg.transforms import IdentityTransform

    from streamer.lake.places import open_catalog

    table = open_catalog(lake(tmp_path)).create_table("streamer.by_run", schema=SCHEMA)
    with table.update_spec() as spec:
        spec.add_field("run_id", IdentityTransform(), "run")
    with pytest.raises(ConfigError, match="table streamer.by_run is partitioned by"):
        IcebergSink(lake(tmp_path), "by_run", SCHEMA)
