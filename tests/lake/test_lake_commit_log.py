"""What a lake run's commits promise a reader: a resumed Parquet run leaves no file its log does not
name, ``_SUCCESS`` comes after every shard's last commit, and the ranges the commits record cover
the source once, each from where the one before ended."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streamer.commands.lake import Target, run_score
from streamer.kafka.ranges import Ranges
from streamer.lake.parquet import ParquetSink
from streamer.lake.places import open_catalog
from streamer.lake.sink import FilesSink, Shard, ranges_of
from tests.lake.test_score import config, many
from tests.lake.test_sinks import lake, preds
from tests.support.duck import connect

DAY_US = 86_400_000_000


def over_days(a: int, b: int, days: int) -> pa.Table:
    """``preds(a, b)`` with row i on day ``i % days``: a commit of ``days`` files."""
    table = preds(a, b)
    times = table.column("event_time").cast(pa.int64()).to_numpy() + (pa.array(range(a, b)).to_numpy() % days) * DAY_US
    return table.set_column(table.schema.get_field_index("event_time"), "event_time",
                            pa.array(times, pa.int64()).cast(table.schema.field("event_time").type))


def dataset_files(out: Path) -> set[str]:
    return {str(p) for p in out.rglob("*.parquet")}


def logged_files(out: Path) -> set[str]:
    return {f for entry in (out / "_streamer").rglob("0*.json") for f in json.loads(entry.read_text())["files"]}


def test_a_resumed_parquet_run_that_writes_fewer_files_than_its_crashed_commit_leaves_none_unnamed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out, plan = tmp_path / "out", {("t", 0): (0, 30)}
    sink = ParquetSink(lake(tmp_path), str(out), preds(0, 1).schema)
    sink.resume("r", Shard(), plan, False)
    sink.write(over_days(0, 30, 3), None)
    write = ParquetSink._write

    def dies_before_the_entry(self: ParquetSink, path: str, data: bytes) -> None:
        if path.endswith("000000.json"):
            raise RuntimeError("killed after the files were renamed in, before the log entry")
        write(self, path, data)

    monkeypatch.setattr(ParquetSink, "_write", dies_before_the_entry)
    with pytest.raises(RuntimeError):
        sink.commit({("t", 0): (0, 30)})
    monkeypatch.setattr(ParquetSink, "_write", write)
    assert len(dataset_files(out)) == 3 and logged_files(out) == set()  # the crash's files, in the dataset

    again = ParquetSink(lake(tmp_path), str(out), preds(0, 1).schema)
    assert again.resume("r", Shard(), plan, False).reached == {}
    again.write(over_days(0, 30, 1), None)  # the same rows in one file this time
    again.commit({("t", 0): (0, 30)})
    again.finish()
    assert dataset_files(out) == logged_files(out) and len(logged_files(out)) == 1
    got = connect().sql(f"SELECT count(*), count(DISTINCT source_offset), min(source_offset), max(source_offset) "
                        f"FROM read_parquet('{out}/**/*.parquet')").fetchall()
    assert got == [(30, 30, 0, 29)]


@pytest.mark.parametrize("started", [True, False], ids=["other-shard-writing", "other-shard-not-started"])
def test_success_appears_only_once_every_shards_last_commit_is_in(tmp_path: Path, started: bool) -> None:
    out = tmp_path / "out"
    plans: list[Ranges] = [{("t", 0): (0, 10)}, {("t", 1): (0, 10)}]
    sinks = [ParquetSink(lake(tmp_path), str(out), preds(0, 1).schema) for _ in plans]
    if started:
        sinks[1].resume("r", Shard(1, 2), plans[1], False)
    for index, last in ((0, False), (1, True)):
        sink = sinks[index]
        if index == 0 or not started:
            sink.resume("r", Shard(index, 2), plans[index], False)
        sink.write(preds(0, 10), None)
        sink.commit(plans[index])
        sink.finish()
        assert (out / "_SUCCESS").exists() is last, f"after shard {index}/2"
    listed = {str(out / f) for f in json.loads((out / "_SUCCESS").read_text())["files"]}
    assert listed == dataset_files(out) == logged_files(out) and len(listed) == 2


def recorded(cfg_lake: object, target: Target, out: Path) -> list[Ranges]:
    """The range each commit recorded, in commit order, read back from the sink."""
    if target.parquet is not None:
        entries = sorted((out / "_streamer").rglob("0*.json"))
        return [ranges_of(json.dumps(json.loads(e.read_text())["offsets"])) for e in entries]
    table = open_catalog(cfg_lake).load_table("streamer.scored")
    summaries = [s.summary for s in table.snapshots() if s.summary is not None and s.summary.get("streamer.offsets")]
    return [ranges_of(s.get("streamer.offsets")) for s in sorted(summaries, key=lambda s: int(s.get("streamer.seq")))]


@pytest.mark.parametrize("to", ["parquet", "table"])
def test_the_ranges_of_a_runs_commits_cover_the_source_once_each_from_where_the_last_ended(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, to: str) -> None:
    cfg = config(tmp_path)
    cfg = replace(cfg, lake=replace(cfg.lake, target_file_mb=1))
    pq.write_table(many(5000), tmp_path / "a.parquet", row_group_size=1000)
    pq.write_table(many(2000), tmp_path / "b.parquet", row_group_size=1000)
    (tmp_path / "in").mkdir()
    for name in ("a", "b"):
        (tmp_path / f"{name}.parquet").rename(tmp_path / "in" / f"{name}.parquet")
    monkeypatch.setattr(FilesSink, "due", lambda self: True)  # a commit after every chunk read
    target = Target(parquet=str(tmp_path / "out")) if to == "parquet" else Target(table="scored")
    summary = run_score(cfg, str(tmp_path / "in"), target, run_id="s", batch_size=1000, progress=io.StringIO())
    ranges = recorded(cfg.lake, target, tmp_path / "out")
    assert summary.counts.commits == len(ranges) == 7
    ends: dict[object, int] = {}
    for commit in ranges:
        for part, (start, end) in commit.items():
            assert start == ends.get(part, 0) and end > start, (part, ranges)  # contiguous, no overlap
            ends[part] = end
    assert sorted(ends.values()) == [2000, 5000]  # each file's rows, once
