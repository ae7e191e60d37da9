"""A shard's commits as an Iceberg table's current snapshot descends from them: its latest, one by its id.

A run's progress and its commit ids are read from the ancestry of the table's current snapshot
(the ``main`` branch), never from every snapshot the metadata lists: a snapshot that a rollback
left behind is no part of the table's history, and the range it covered is scored again. Iceberg's
Flink and Kafka Connect sinks read their last checkpoint the same way.

Worked example: a shard commits 0, 1 and 2, then the table is rolled back to commit 0
(``manage_snapshots().rollback_to_snapshot(...)``). The metadata still lists all three snapshots;
the ancestry of the current one holds commit 0 alone, so the shard's latest commit is 0 and a
resumed run continues from where commit 0 ended.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING

from streamer.lake.sink import Resume, ranges_of

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot, Summary

# A commit's snapshot summary (iceberg.py writes them)
RUN = "streamer.run-id"
SHARD = "streamer.shard"
SEQ = "streamer.seq"  # the shard's commit number: 0, 1, 2...
ATTEMPT = "streamer.attempt"  # a run id's plan: a new one after --force
COMMIT = "streamer.commit"  # one commit's own id
REACHED = "streamer.reached"  # the positions the shard reached so far
# A run scored from one snapshot's appended rows (a job's ``source: {table, snapshot}``) says which
SOURCE_TABLE = "streamer.source-table"
SOURCE_SNAPSHOT = "streamer.source-snapshot"


def plan_key(run_id: str, shard: str) -> str:
    """The table property that holds a shard's plan: its bounds and attempt."""
    return f"streamer.run.{run_id}.{shard}"


def history(table: Table) -> Iterator[Snapshot]:
    """The table's current snapshot and its ancestors, newest first (none for an empty table)."""
    from pyiceberg.table.snapshots import ancestors_of

    yield from ancestors_of(table.current_snapshot(), table.metadata)


def latest(table: Table, attempt: str, shard: str) -> Summary | None:
    """The summary of the newest commit of ``attempt`` and ``shard`` in the table's history."""
    for snapshot in history(table):
        summary = snapshot.summary
        if summary is not None and summary.get(ATTEMPT) == attempt and summary.get(SHARD) == shard:
            return summary
    return None


def holds(table: Table, commit: str) -> bool:
    """Commit ``commit`` is in the table's history (a try whose answer was lost did land)."""
    return any(s.summary is not None and s.summary.get(COMMIT) == commit for s in history(table))


def scored_sources(table: Table) -> set[int]:
    """The source snapshots (``streamer.source-snapshot``) whose runs in the table's history covered
    their whole plan: a run stopped or failed midway has not scored its snapshot yet.

    A run's plan is the table property ``streamer.run.<run id>.<shard>`` (its bounds and attempt);
    its progress is the newest commit of that attempt in the history, whose ``streamer.reached``
    says where each partition got to.
    """
    newest: dict[tuple[str | None, str | None, str | None], Summary] = {}
    for snapshot in history(table):
        summary = snapshot.summary
        if summary is not None and summary.get(SOURCE_SNAPSHOT) is not None:
            newest.setdefault((summary.get(RUN), summary.get(SHARD), summary.get(ATTEMPT)), summary)
    scored = set()
    for (run, shard, attempt), summary in newest.items():
        saved = table.properties.get(plan_key(str(run), str(shard)))
        if saved is None or json.loads(saved)["attempt"] != attempt:
            continue  # a plan run again with --force: its newest attempt is the one that counts
        reached = {tp: to for tp, (_, to) in ranges_of(summary.get(REACHED, "{}")).items()}
        if Resume(ranges_of(json.loads(saved)["bounds"]), reached, 0).done:
            scored.add(int(summary.get(SOURCE_SNAPSHOT, "0")))
    return scored


def seq_of(summary: Summary | None) -> int | None:
    """The commit number of ``summary``; None for no commit."""
    return None if summary is None else int(summary.get(SEQ, "0"))


def one_try(table: Table) -> Table:
    """``table`` as a handle whose commits are tried once.

    pyiceberg tries a commit that lost a race again by itself, rebased on whatever the table holds
    then: past the check that refuses a stale commit. A handle of this one refuses instead, and the
    caller's loop refreshes, checks and tries again. The setting is in this handle's copy of the
    metadata only: a commit sends its changes to the catalog, never the properties it was built on.
    """
    from pyiceberg.table import Table as Handle
    from pyiceberg.table import TableProperties

    once = {**table.properties, TableProperties.COMMIT_NUM_RETRIES: "0"}
    return Handle(table.name(), table.metadata.model_copy(update={"properties": once}), table.metadata_location,
                  table.io, table.catalog, table.config)
