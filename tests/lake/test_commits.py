"""The sinks' commits as the table's history makes them (no Kafka): a rolled-back range scored again,
two writers of one shard (one wins, the other is refused and none of its rows show), a lost answer.

Two writers are two sinks resumed for one run and shard, driven in turn; a commit that lands while
another writer's commit is under way is put there by the catalog's ``commit_table``, wrapped."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from streamer.errors import StaleCommitError, StreamerError
from streamer.lake.ancestry import COMMIT, SEQ
from streamer.lake.iceberg import IcebergSink
from streamer.lake.parquet import ParquetSink
from streamer.lake.sink import Shard
from tests.lake.test_sinks import PLAN, SCHEMA, lake, preds, rejected
from tests.support import duck

WIDE = {("t", 0): (0, 30)}


def offsets(table: Any) -> list[int]:
    """The ``source_offset`` of every row of the Iceberg table, as DuckDB reads its current snapshot."""
    table.refresh()
    if table.current_snapshot() is None:
        return []
    rows = duck.connect().execute("SELECT source_offset FROM iceberg_scan(?) ORDER BY 1",
                                  [table.metadata_location]).fetchall()
    return [offset for (offset,) in rows]


def sink(tmp_path: Path, plan: Any = PLAN, force: bool = False) -> IcebergSink:
    out = IcebergSink(lake(tmp_path), "a", SCHEMA)
    out.resume("r", Shard(), plan, force)
    return out


def commits_to(out: IcebergSink, name: str, before: Callable[[], Any]) -> list[int]:
    """Runs ``before`` once, just before ``out``'s catalog commits table ``name`` (after the checks
    of that try): another writer's commit lands between this writer's check and its commit. Returns
    a list that counts the calls."""
    catalog = out.table.catalog
    original = catalog.commit_table
    calls: list[int] = []

    def commit_table(table: Any, *rest: Any) -> Any:
        if table.name()[-1] == name and not calls:
            calls.append(1)
            before()
        return original(table, *rest)

    setattr(catalog, "commit_table", commit_table)
    return calls


def test_a_range_rolled_back_out_of_the_table_is_scored_again(tmp_path: Path) -> None:
    first = sink(tmp_path, WIDE)
    first.write(preds(0, 10), None)
    first.commit({("t", 0): (0, 10)})
    kept = first.table.current_snapshot()
    first.write(preds(10, 14), rejected(14))
    first.commit({("t", 0): (10, 15)})
    assert kept is not None and offsets(first.table) == list(range(14))
    first.table.manage_snapshots().rollback_to_snapshot(kept.snapshot_id).commit()
    assert len(first.table.snapshots()) == 2  # commit 1 is still listed, out of the current snapshot's history

    again = IcebergSink(lake(tmp_path), "a", SCHEMA)
    resume = again.resume("r", Shard(), WIDE, False)
    assert (resume.reached, resume.seq) == ({("t", 0): 10}, 1)  # not 15: commit 1 is no longer the table's
    again.write(preds(10, 14), rejected(14))
    again.write(preds(15, 30), None)
    again.commit({("t", 0): (10, 30)})
    assert offsets(again.table) == [*range(14), *range(15, 30)]
    assert offsets(again.rejects) == [14]  # the rolled-back range's reject went with it, and came again


def test_two_writers_of_one_shard_the_second_to_commit_is_refused(tmp_path: Path) -> None:
    one, two = sink(tmp_path), sink(tmp_path)  # both resumed from no commit
    one.write(preds(0, 9), rejected(9))
    one.commit({("t", 0): (0, 10)})
    two.write(preds(0, 4), rejected(4))  # files of its own, whatever it read: none over the winner's
    with pytest.raises(StaleCommitError) as refused:
        two.commit({("t", 0): (0, 5)})
    message = str(refused.value)
    assert ("run 'r' (shard 0-of-1): this writer continued from no commit of the shard, and table "
            "streamer.a holds commit 0 as the shard's latest") in message
    assert "Run one writer per shard; run the shard again to resume" in message
    assert (refused.value.resumed, refused.value.found) == (None, 0)
    assert isinstance(refused.value, StreamerError) and not isinstance(refused.value, ValueError)
    assert offsets(one.table) == list(range(9)) and offsets(one.rejects) == [9]

    one.write(preds(10, 20), None)  # the winner goes on
    one.commit({("t", 0): (10, 20)})
    assert offsets(one.table) == list(range(9)) + list(range(10, 20)) and offsets(one.rejects) == [9]


def test_a_commit_landing_between_the_check_and_the_commit_is_seen_on_the_next_try(tmp_path: Path) -> None:
    one, two = sink(tmp_path), sink(tmp_path)
    one.write(preds(0, 9), rejected(9))
    two.write(preds(0, 9), rejected(9))
    calls = commits_to(two, "a_rejects", lambda: one.commit({("t", 0): (0, 10)}))
    with pytest.raises(StaleCommitError, match="holds commit 0 as the shard's latest"):
        two.commit({("t", 0): (0, 10)})
    assert calls == [1]  # the winner's commit came after this writer's check, before its commit
    assert offsets(one.table) == list(range(9)) and offsets(one.rejects) == [9]  # no rebased second copy


def test_the_first_writer_to_commit_its_rejects_snapshot_wins_the_range(tmp_path: Path) -> None:
    one, two = sink(tmp_path), sink(tmp_path)
    one.write(preds(0, 9), None)
    two.write(preds(0, 9), rejected(9))
    lost: list[StaleCommitError] = []

    def other_writer() -> None:
        with pytest.raises(StaleCommitError) as caught:
            one.commit({("t", 0): (0, 10)})
        lost.append(caught.value)

    calls = commits_to(two, "a", other_writer)  # between this writer's rejects and its predictions
    two.commit({("t", 0): (0, 10)})
    assert calls == [1] and "table streamer.a_rejects holds commit 0" in str(lost[0])
    assert offsets(two.table) == list(range(9)) and offsets(two.rejects) == [9]


def test_a_writer_whose_rejects_snapshot_another_writer_took_over_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    one = sink(tmp_path)
    one.write(preds(0, 9), rejected(9))
    add = IcebergSink._add

    def dies_before_the_predictions(self: IcebergSink, table: Any, *rest: Any) -> None:
        if table is self.table:
            raise RuntimeError("killed")
        add(self, table, *rest)

    def meanwhile() -> None:  # one is between its rejects and its predictions: to a resumed writer, a crash
        two = sink(tmp_path)
        two.write(preds(0, 9), rejected(9))
        with monkeypatch.context() as patched:
            patched.setattr(IcebergSink, "_add", dies_before_the_predictions)
            with pytest.raises(RuntimeError):
                two.commit({("t", 0): (0, 10)})  # its rejects' snapshot replaced one's, then it died
        stranger = IcebergSink(lake(tmp_path), "a", SCHEMA).table
        stranger.add_files([])  # another snapshot: one's try fails, and is checked again

    calls = commits_to(one, "a", meanwhile)
    with pytest.raises(StaleCommitError, match="table streamer.a_rejects holds commit 0"):
        one.commit({("t", 0): (0, 10)})
    assert calls == [1] and offsets(one.table) == [] and offsets(one.rejects) == [9]
    three = sink(tmp_path)
    three.write(preds(0, 9), rejected(9))
    three.commit({("t", 0): (0, 10)})
    assert offsets(three.table) == list(range(9)) and offsets(three.rejects) == [9]


def test_a_run_started_again_with_force_refuses_the_writer_of_the_attempt_before(tmp_path: Path) -> None:
    old = sink(tmp_path)
    sink(tmp_path, force=True)  # a new attempt of the run, while the first writer is still going
    old.write(preds(0, 10), None)
    with pytest.raises(StaleCommitError, match="continued from no commit"):
        old.commit({("t", 0): (0, 10)})
    assert offsets(old.table) == []


def test_a_commit_whose_answer_was_lost_is_found_in_the_history(tmp_path: Path) -> None:
    from pyiceberg.exceptions import CommitStateUnknownException

    out = sink(tmp_path)
    catalog = out.table.catalog
    original = catalog.commit_table
    answered: list[str] = []

    def loses_the_answer(table: Any, *rest: Any) -> Any:
        done = original(table, *rest)
        if table.name()[-1] == "a" and not answered:
            answered.append("lost")
            raise CommitStateUnknownException("the answer was lost")
        return done

    setattr(catalog, "commit_table", loses_the_answer)
    out.write(preds(0, 10), None)
    out.commit({("t", 0): (0, 10)})
    out.table.refresh()
    mine = [s.summary for s in out.table.snapshots() if s.summary is not None and s.summary.get(SEQ) == "0"]
    assert answered == ["lost"] and len(mine) == 1 and mine[0].get(COMMIT)
    assert offsets(out.table) == list(range(10))


def parquet_offsets(root: Path) -> list[int]:
    rows = duck.connect().execute(f"SELECT source_offset FROM read_parquet('{root}/**/*.parquet') ORDER BY 1")
    return [offset for (offset,) in rows.fetchall()]


def test_two_parquet_writers_of_one_shard_the_second_to_commit_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    one, two = ParquetSink(lake(tmp_path), str(out), SCHEMA), ParquetSink(lake(tmp_path), str(out), SCHEMA)
    one.resume("r", Shard(), PLAN, False)
    two.resume("r", Shard(), PLAN, False)
    one.write(preds(0, 10), None)
    two.write(preds(0, 4), None)  # its files are its own while they are written
    one.commit({("t", 0): (0, 10)})
    with pytest.raises(StaleCommitError, match=f"parquet {out} holds commit 0 as the shard's latest"):
        two.commit({("t", 0): (0, 5)})
    assert parquet_offsets(out) == list(range(10))
    staged = [p for p in out.rglob("*") if p.is_file() and p.name.endswith(".inprogress")]
    assert len(staged) == 1  # the refused writer's file, never renamed into the dataset
    third = ParquetSink(lake(tmp_path), str(out), SCHEMA)
    assert third.resume("r", Shard(), PLAN, False).reached == {("t", 0): 10}
    assert not [p for p in out.rglob("*") if p.name.endswith(".inprogress")]  # a resume deletes what no commit names
