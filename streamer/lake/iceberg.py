"""An Apache Iceberg table as a run's sink: Parquet files per day, added as one snapshot per commit.

The table is made on first use from the prediction schema, partitioned by day of ``event_time``.
A table that exists is checked before anything is read: a column it has that the predictions
lack, or has with another type, refuses the run naming the column; a column the predictions add
(a new model output) is added, an Iceberg schema evolution. Rejected rows go to
``<table>_rejects``: each commit adds a snapshot there (its rejects, or none) just before the
predictions' snapshot of the same range.

Each snapshot's summary carries ``streamer.run-id``, ``streamer.shard``, ``streamer.seq``,
``streamer.offsets`` (the ``[from, to)`` it covers per partition), ``streamer.written`` (the predictions and rejects its commits
hold so far), ``streamer.reached`` (the positions the run reached so far, so that its latest snapshot alone says where to resume, older
ones expired or not), ``streamer.attempt`` and ``streamer.commit`` (the ids of the run's plan and
of the commit), and what the run's source adds (``streamer.source-table`` and
``streamer.source-snapshot`` for the rows one snapshot of a table appended). Progress is read from
the ancestry of the current snapshot (ancestry.py): a range that a rollback took out of the table
is scored again. The run's bounds and attempt are a table
property (``streamer.run.<run id>.<shard>``); ``--force`` deletes the shard's rows and starts a new
attempt.

Files are written first, under names of their own writer (run, shard, commit number, a count and
the writer's id), then added in one commit. A shard has one writer: a commit is refused
(StaleCommitError) unless the shard's latest commit in each table is the one this writer continued
from, checked on the table as it is when the commit is tried. A commit that loses a race with
another shard's writer (``--workers``, a Kubernetes Job's pods) is tried again on the table as it
is then, up to :data:`COMMIT_TRIES` times, checked again each time. A crash before a commit leaves
files no snapshot names: invisible to readers, orphans for Iceberg's orphan-file cleanup.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import random
import time
import uuid
import warnings
from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING

import pyarrow as pa

from streamer.config import LakeConfig
from streamer.errors import ConfigError, ReplayFinishedError, StaleCommitError
from streamer.kafka.ranges import Ranges
from streamer.lake.ancestry import ATTEMPT, COMMIT, RUN, SEQ, SHARD, holds, latest, one_try, plan_key, seq_of
from streamer.lake.columns import REJECTS, describe
from streamer.lake.files import DayFiles
from streamer.lake.places import filesystem, identifier, open_catalog
from streamer.lake.sink import FilesSink, Resume, Shard, ranges_of, ranges_text
from streamer.pipeline.records import Partition

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Summary
    from pyiceberg.types import IcebergType

log = logging.getLogger(__name__)
COMMIT_TRIES = 20
WRITTEN = "streamer.written"  # "<predictions>,<rejects>": what the shard's commits hold, this one's included


class IcebergSink(FilesSink):
    """Writes a run's predictions into an Iceberg table of the configured catalog."""

    def __init__(self, lake: LakeConfig, table: str, schema: pa.Schema,
                 summary: Mapping[str, str] | None = None) -> None:
        super().__init__()
        self.summary = dict(summary or {})  # in every commit's snapshot summary
        self.lake, self.ident = lake, identifier(lake, table)
        self.name = f"table {self.ident}"
        catalog = open_catalog(lake)
        self.table = ensure_table(catalog, self.ident, schema, "event_time")
        self.rejects = ensure_table(catalog, f"{self.ident}_rejects", REJECTS, "rejected_at")
        self.schema = schema
        self._attempt, self._reached = "", dict[Partition, int]()
        self._key, self._writer = "", ""
        # the shard's latest commit in each table as this writer last saw or made it: a commit on anything else is stale
        self._last: str | None = None
        self._last_rejects: str | None = None
        self._drop: str | None = None  # the rejects past the resumed positions: the next commit deletes them

    # ---- the plan -------------------------------------------------------------------------

    def resume(self, run_id: str, shard: Shard, plan: Ranges | None, force: bool) -> Resume:
        self._run, self._shard = run_id, shard
        self._key = key = plan_key(run_id, str(shard))
        self._same_shards(run_id, shard)
        saved = self.table.properties.get(key)
        if saved is not None and force:
            self._forget_run(key, ranges_of(json.loads(saved)["bounds"]))
            saved = None
        if saved is None:
            if plan is None:
                raise ConfigError("--run-id", f"run {run_id!r} has no saved plan in {self.name}")
            # a new attempt: what an earlier one of the same run id committed (--force) is not its progress
            saved = json.dumps({"bounds": ranges_text(plan), "attempt": uuid.uuid4().hex[:12]})
            self._retry(lambda: self.table.transaction().set_properties({key: saved}).commit_transaction())
            fresh = True
        else:
            fresh = False
        self._attempt = json.loads(saved)["attempt"]
        head = latest(self.table, self._attempt, str(shard))
        reached, seq = _position(head)
        resume = Resume(ranges_of(json.loads(saved)["bounds"]), reached, seq)
        if not fresh and resume.done:
            raise ReplayFinishedError(f"run {run_id!r} (shard {shard}) already finished into {self.name}; "
                                      "pass --force to run it again", self.name, (*_written(head), _rows(resume)),
                                      self.rejects_at)
        self.rejects.refresh()
        rejected = latest(self.rejects, self._attempt, str(shard))
        self._last = None if head is None else head.get(COMMIT)
        self._last_rejects = None if rejected is None else rejected.get(COMMIT)
        self._drop = self._rejects_past(resume)
        self._seq, self._reached = seq, dict(reached)
        self.committed_rows = _written(head)
        self._writer = uuid.uuid4().hex[:8]
        self._open()
        return resume

    def _same_shards(self, run_id: str, shard: Shard) -> None:
        """A run resumes in the shards it was planned in: other counts would score partitions twice."""
        counts = {k.rsplit("-of-", 1)[-1] for k in self.table.properties if k.startswith(f"streamer.run.{run_id}.")}
        if counts - {str(shard.count)}:
            raise ConfigError("--shard" if shard.count > 1 else "--workers",
                              f"run {run_id!r} was planned in {' and '.join(sorted(counts))} shards in {self.name}, "
                              f"not {shard.count}: resume it with the same count")

    def _rejects_past(self, resume: Resume) -> str | None:
        """The rejects committed for a range whose predictions never were (a crash between the two
        commits, or a range a rollback took out of the table), as a filter. The first commit deletes
        them, once it knows that no other writer of the shard committed that range since."""
        if self.rejects.current_snapshot() is None or not resume.bounds:
            return None
        past = " OR ".join(f"(source_topic == {_quoted(t)} AND source_partition == {p} AND "
                           f"source_offset >= {resume.reached.get((t, p), s)})"
                           for (t, p), (s, _) in sorted(resume.bounds.items()))
        return f"run_id == {_quoted(self._run)} AND ({past})"

    def _forget_run(self, key: str, bounds: Ranges) -> None:
        """``--force``: this shard's rows of the run (and rejects) and its plan go; it starts again."""
        mine = " OR ".join(f"(source_topic == {_quoted(t)} AND source_partition == {p})" for t, p in sorted(bounds))
        for table in (self.table, self.rejects):
            if mine:
                self._retry(partial(table.delete, f"run_id == {_quoted(self._run)} AND ({mine})"), table)
        self._retry(lambda: self.table.transaction().remove_properties(key).commit_transaction())
        self.table.refresh()

    # ---- writing --------------------------------------------------------------------------

    def _name(self) -> str:
        """Names of this writer's own: a second writer of the shard never writes over the first's files."""
        return f"{super()._name()}-{self._writer}"

    def _open(self) -> None:
        target = self.lake.target_file_mb * 1024 * 1024

        def files(table: Table, schema: pa.Schema, day_of: str) -> DayFiles:
            fs, folder = filesystem(self.lake, table.location())
            return DayFiles(fs, f"{folder}/data", schema, target, f"{day_of}_day", self._name, day_of)

        self._files = files(self.table, self.schema, "event_time")
        self._rejected = files(self.rejects, REJECTS, "rejected_at")

    def commit(self, covered: Ranges) -> None:
        """The rejects' snapshot (perhaps of no file), then the predictions': each refused when stale."""
        assert self._files is not None and self._rejected is not None
        self._reached.update({tp: to for tp, (_, to) in covered.items()})
        props = {**self.summary, RUN: self._run, SHARD: str(self._shard), SEQ: str(self._seq),
                 "streamer.offsets": ranges_text(covered), ATTEMPT: self._attempt,
                 "streamer.reached": ranges_text({tp: (to, to) for tp, to in self._reached.items()}),
                 COMMIT: uuid.uuid4().hex}
        totals = self._totals()
        props[WRITTEN] = f"{totals[0]},{totals[1]}"
        rejected, files = self._rejected.close(), self._files.close()
        # every commit has a rejects snapshot: of two writers of a shard, the second to reach it is refused there
        self._add(self.rejects, rejected, props, (self._last, self._last_rejects), self._drop)
        self._last_rejects, self._drop = props[COMMIT], None
        self._add(self.table, files, props, (self._last, props[COMMIT]))
        self._last = props[COMMIT]
        self._committed(totals)
        self._seq += 1
        self._n = 0

    def finish(self) -> None:
        pass

    def _add(self, table: Table, files: list[str], props: dict[str, str], last: tuple[str | None, str | None],
             drop: str | None = None) -> None:
        """``files`` as one snapshot of ``table`` (after deleting the rows ``drop`` matches), tried
        once per pass on the tables as they are then: ``last`` are the commits the shard's latest
        must be in the predictions and the rejects table."""
        scheme = "s3://" if table.location().startswith("s3://") else "file://"
        uris = [scheme + f for f in files]

        def add() -> None:
            for each in (self.table, self.rejects):
                each.refresh()
            if holds(table, props[COMMIT]):  # a try whose answer was lost did commit
                return
            self._fresh(self.table, last[0])
            self._fresh(self.rejects, last[1])
            tx = one_try(table).transaction()
            if drop is not None:
                tx.delete(drop, snapshot_properties=props)
            tx.add_files(uris, snapshot_properties=props, check_duplicate_files=False)
            done = tx.commit_transaction()
            table.metadata, table.metadata_location = done.metadata, done.metadata_location  # as its own commit would

        self._retry(add, table)

    def _fresh(self, table: Table, last: str | None) -> None:
        """Refuses a stale commit: the shard's latest commit in ``table``, of the attempt the plan
        holds, is not ``last``."""
        attempt: str | None = self._attempt
        if table is self.table:
            saved = table.properties.get(self._key)
            attempt = json.loads(saved)["attempt"] if saved is not None else None
        head = latest(table, attempt, str(self._shard)) if attempt is not None else None
        if attempt != self._attempt or (None if head is None else head.get(COMMIT)) != last:
            where = self.name if table is self.table else f"table {self.ident}_rejects"
            raise StaleCommitError(self._run, str(self._shard), self._seq - 1 if self._seq else None,
                                   seq_of(head), where)

    def _retry(self, act: Callable[[], object], table: Table | None = None) -> None:
        """``act``, tried again on the refreshed table while another writer wins the commit race, or
        when the catalog's answer was lost (``act`` finds out whether its commit landed)."""
        from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException

        table = table if table is not None else self.table
        for attempt in range(COMMIT_TRIES):
            try:
                with warnings.catch_warnings():  # a delete of rows that are not there is fine here
                    warnings.filterwarnings("ignore", "Delete operation did not match any records")
                    act()
                return
            except (CommitFailedException, CommitStateUnknownException) as exc:
                if attempt == COMMIT_TRIES - 1:
                    raise
                log.info("%s: another writer committed first, or the answer was lost (%s); trying again",
                         self.name, exc)
                time.sleep(random.uniform(0.05, 0.2) * (attempt + 1))  # apart from the other writers
                table.refresh()


def _position(head: Summary | None) -> tuple[dict[Partition, int], int]:
    """The position in each partition and the next commit's number after the shard's latest commit."""
    if head is None:
        return {}, 0
    reached = {tp: to for tp, (_, to) in ranges_of(head.get("streamer.reached", "{}")).items()}
    return reached, int(head.get(SEQ, "0")) + 1


def _rows(resume: Resume) -> int:
    """The source positions a run's bounds span."""
    return sum(e - s for s, e in resume.bounds.values())


def _written(head: Summary | None) -> tuple[int, int]:
    """(predictions, rejects) the shard's commits hold, as its latest commit says."""
    text = "" if head is None else head.get(WRITTEN) or ""
    p, _, r = text.partition(",")
    return (int(p), int(r)) if p.isdigit() and r.isdigit() else (0, 0)


def ensure_table(catalog: Catalog, ident: str, schema: pa.Schema, day_of: str) -> Table:
    """The table ``ident``: made from ``schema``, partitioned by day of ``day_of``; or the one
    there, refused when it cannot take these rows, evolved when the rows add columns."""
    from pyiceberg.exceptions import CommitFailedException, NoSuchTableError, TableAlreadyExistsError
    from pyiceberg.transforms import DayTransform

    try:
        table = catalog.load_table(ident)
    except NoSuchTableError:
        _ensure_namespace(catalog, ident)
        try:
            table = catalog.create_table(ident, schema=schema, properties={"format-version": "2"})
        except TableAlreadyExistsError:  # another worker made it first
            table = catalog.load_table(ident)
    _check(table, ident, schema)
    spec = table.spec()
    if spec.fields and [(str(f.transform), table.schema().find_field(f.source_id).name) for f in spec.fields] != [
            ("day", day_of)]:
        raise ConfigError("--to-table", f"table {ident} is partitioned by {spec}, not by day({day_of}): "
                                        "its files could not be added; name another table")
    if not spec.fields:
        try:
            with table.update_spec() as update:
                update.add_field(day_of, DayTransform(), f"{day_of}_day")
        except CommitFailedException:  # another worker partitioned it first: load what it made
            table = catalog.load_table(ident)
    return table


def _ensure_namespace(catalog: Catalog, ident: str) -> None:
    """The namespace of ``ident``, created when missing (the embedded catalog always can); a
    catalog that refuses (a REST catalog without the right) is a ConfigError naming the table."""
    namespace = ident.rpartition(".")[0]
    try:
        catalog.create_namespace_if_not_exists(namespace)
        return
    except Exception as exc:  # noqa: BLE001 - each catalog refuses in its own words
        refused = exc
    with contextlib.suppress(Exception):
        if catalog.namespace_exists(namespace):  # there, only not ours to create; or made meanwhile by another worker
            return
    raise ConfigError("--to-table", f"table {ident}: the catalog has no namespace {namespace!r} and refused to "
                                    f"create it ({type(refused).__name__}: {refused}); create it, or name a table "
                                    "in a namespace that exists")


def _check(table: Table, ident: str, schema: pa.Schema) -> None:
    have = {f.name: f for f in table.schema().fields}
    want = {f.name: f for f in as_iceberg(schema).fields}
    for name, field in have.items():
        if name not in want:
            raise ConfigError("--to-table", f"table {ident} has a column {name!r} ({field.field_type}) that these "
                                            f"predictions do not write; they write {describe(schema)}")
        if _type_text(field.field_type) != _type_text(want[name].field_type):
            raise ConfigError("--to-table", f"table {ident} has column {name!r} as {_type_text(field.field_type)}, "
                                            f"these predictions write it as {_type_text(want[name].field_type)}")
    added = [n for n in want if n not in have]
    if added:
        log.info("table %s: adding the columns %s (a schema evolution)", ident, added)
        with table.update_schema() as update:
            for name in added:  # optional: the rows already in the table have no value (Iceberg v2 refuses required)
                update.add_column(name, want[name].field_type, doc=want[name].doc)


def as_iceberg(schema: pa.Schema) -> Schema:
    """``schema`` in Iceberg's types, by pyiceberg's public conversion. It converts fields that carry
    ids (Parquet's ``PARQUET:field_id``), so each field gets one here, in order: only the types are
    read, and a column added to a table is given ids of the table's."""
    from pyiceberg.io.pyarrow import pyarrow_to_schema

    ids = itertools.count(1)

    def field(f: pa.Field) -> pa.Field:
        inner = nested(f.type)
        return f.with_type(inner).with_metadata({**(f.metadata or {}), b"PARQUET:field_id": str(next(ids)).encode()})

    def nested(kind: pa.DataType) -> pa.DataType:
        if pa.types.is_struct(kind):
            return pa.struct([field(kind.field(i)) for i in range(kind.num_fields)])
        if pa.types.is_map(kind):
            return pa.map_(field(kind.key_field), field(kind.item_field))
        if pa.types.is_large_list(kind):
            return pa.large_list(field(kind.value_field))
        if pa.types.is_fixed_size_list(kind):
            return pa.list_(field(kind.value_field), kind.list_size)
        if pa.types.is_list(kind):
            return pa.list_(field(kind.value_field))
        return kind

    return pyarrow_to_schema(pa.schema([field(f) for f in schema]))


def _type_text(kind: IcebergType) -> str:
    """A type as Iceberg prints it, less the field ids a struct prints: a table's are its own."""
    from pyiceberg.types import ListType, MapType, StructType

    if isinstance(kind, StructType):
        return "struct<" + ", ".join(f"{f.name}: {'required' if f.required else 'optional'} "
                                     f"{_type_text(f.field_type)}" for f in kind.fields) + ">"
    if isinstance(kind, ListType):
        return f"list<{_type_text(kind.element_type)}>"
    if isinstance(kind, MapType):
        return f"map<{_type_text(kind.key_type)}, {_type_text(kind.value_type)}>"
    return str(kind)


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
