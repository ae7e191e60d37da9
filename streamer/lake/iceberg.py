"""An Apache Iceberg table as a run's sink: Parquet files per day, added as one snapshot per commit.

The table is made on first use from the prediction schema, partitioned by day of ``event_time``.
A table that exists is checked before anything is read: a column it has that the predictions
lack, or has with another type, refuses the run naming the column; a column the predictions add
(a new model output) is added, an Iceberg schema evolution. Rejected rows go to
``<table>_rejects``, committed just before the predictions of the same range.

Each snapshot's summary carries ``streamer.run-id``, ``streamer.shard``, ``streamer.seq``,
``streamer.offsets`` (the ``[from, to)`` it covers per partition), ``streamer.reached`` (the
positions the run reached so far, so that its latest snapshot alone says where to resume, older
ones expired or not), ``streamer.attempt`` and ``streamer.commit`` (the ids of the run's plan and
of the commit). The run's bounds and attempt are a table property (``streamer.run.<run id>.<shard>``);
``--force`` deletes the shard's rows and starts a new attempt. Files are written first, under names fixed by run,
shard and commit number, then added in one commit; a commit that loses a race with another
writer (``--workers``, a Kubernetes Job's pods) is tried again on the table as it is then, up to
:data:`COMMIT_TRIES` times. A crash before a commit leaves files no snapshot names: invisible
to readers, and written again under the same names when the run resumes.
"""

from __future__ import annotations

import json
import logging
import random
import time
import uuid
import warnings
from typing import Any

import pyarrow as pa

from streamer.config import LakeConfig
from streamer.errors import ConfigError, ReplayFinishedError
from streamer.kafka.ranges import Ranges
from streamer.lake.columns import REJECTS, describe
from streamer.lake.files import DayFiles
from streamer.lake.places import identifier, open_catalog
from streamer.lake.sink import FilesSink, Resume, Shard, ranges_of, ranges_text
from streamer.pipeline.records import Partition

log = logging.getLogger(__name__)
COMMIT_TRIES = 20
RUN = "streamer.run-id"
ATTEMPT = "streamer.attempt"  # a run id's plan: a new one after --force
COMMIT = "streamer.commit"  # one commit's own id


class IcebergSink(FilesSink):
    """Writes a run's predictions into an Iceberg table of the configured catalog."""

    def __init__(self, lake: LakeConfig, table: str, schema: pa.Schema) -> None:
        super().__init__()
        self.lake, self.ident = lake, identifier(lake, table)
        self.name = f"table {self.ident}"
        catalog = open_catalog(lake)
        self.table = ensure_table(catalog, self.ident, schema, "event_time")
        self.rejects = ensure_table(catalog, f"{self.ident}_rejects", REJECTS, "rejected_at")
        self.schema = schema
        self._attempt, self._reached = "", dict[Partition, int]()

    # ---- the plan -------------------------------------------------------------------------

    def resume(self, run_id: str, shard: Shard, plan: Ranges | None, force: bool) -> Resume:
        self._run, self._shard = run_id, shard
        key = f"streamer.run.{run_id}.{shard}"
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
        planned = json.loads(saved)
        self._attempt = planned["attempt"]
        reached, seq = self._progress()
        resume = Resume(ranges_of(planned["bounds"]), reached, seq)
        if not fresh and resume.done:
            raise ReplayFinishedError(f"run {run_id!r} (shard {shard}) already finished into {self.name}; "
                                      "pass --force to run it again")
        self._drop_rejects_past(resume)
        self._seq, self._reached = seq, dict(reached)
        self._open()
        return resume

    def _same_shards(self, run_id: str, shard: Shard) -> None:
        """A run resumes in the shards it was planned in: other counts would score partitions twice."""
        counts = {k.rsplit("-of-", 1)[-1] for k in self.table.properties if k.startswith(f"streamer.run.{run_id}.")}
        if counts - {str(shard.count)}:
            raise ConfigError("--shard" if shard.count > 1 else "--workers",
                              f"run {run_id!r} was planned in {' and '.join(sorted(counts))} shards in {self.name}, "
                              f"not {shard.count}: resume it with the same count")

    def _progress(self) -> tuple[dict[Partition, int], int]:
        """The attempt's position in each partition and its next commit's number, from its latest
        snapshot (each carries the positions reached so far: older ones may be expired)."""
        latest = None
        for snap in self.table.metadata.snapshots:
            s = snap.summary
            if s is not None and s.get(ATTEMPT) == self._attempt and s.get("streamer.shard") == str(self._shard):
                if latest is None or int(s.get("streamer.seq", "0")) > int(latest.get("streamer.seq", "0")):
                    latest = s
        if latest is None:
            return {}, 0
        reached = {tp: to for tp, (_, to) in ranges_of(latest.get("streamer.reached", "{}")).items()}
        return reached, int(latest.get("streamer.seq", "0")) + 1

    def _drop_rejects_past(self, resume: Resume) -> None:
        """Rejects committed for a range whose predictions never were (a crash between the two commits)."""
        self.rejects.refresh()
        if self.rejects.current_snapshot() is None or not resume.bounds:
            return
        past = " OR ".join(f"(source_topic == {_quoted(t)} AND source_partition == {p} AND "
                           f"source_offset >= {resume.reached.get((t, p), s)})"
                           for (t, p), (s, _) in sorted(resume.bounds.items()))
        self._retry(lambda: self.rejects.delete(f"run_id == {_quoted(self._run)} AND ({past})"), self.rejects)

    def _forget_run(self, key: str, bounds: Ranges) -> None:
        """``--force``: this shard's rows of the run (and rejects) and its plan go; it starts again."""
        mine = " OR ".join(f"(source_topic == {_quoted(t)} AND source_partition == {p})" for t, p in sorted(bounds))
        for table in (self.table, self.rejects):
            if mine:
                self._retry(lambda t=table: t.delete(f"run_id == {_quoted(self._run)} AND ({mine})"), table)
        self._retry(lambda: self.table.transaction().remove_properties(key).commit_transaction())
        self.table.refresh()

    # ---- writing --------------------------------------------------------------------------

    def _open(self) -> None:
        target = self.lake.target_file_mb * 1024 * 1024
        from streamer.lake.places import filesystem

        def files(table: Any, schema: pa.Schema, day_of: str) -> DayFiles:
            fs, folder = filesystem(self.lake, table.location())
            return DayFiles(fs, f"{folder}/data", schema, target, f"{day_of}_day", self._name, day_of)

        self._files = files(self.table, self.schema, "event_time")
        self._rejected = files(self.rejects, REJECTS, "rejected_at")

    def commit(self, covered: Ranges) -> None:
        assert self._files is not None and self._rejected is not None
        self._reached.update({tp: to for tp, (_, to) in covered.items()})
        props = {RUN: self._run, "streamer.shard": str(self._shard), "streamer.seq": str(self._seq),
                 "streamer.offsets": ranges_text(covered), ATTEMPT: self._attempt,
                 "streamer.reached": ranges_text({tp: (to, to) for tp, to in self._reached.items()}),
                 COMMIT: uuid.uuid4().hex}
        rejected = self._rejected.close()
        if rejected:
            self._add(self.rejects, rejected, props)
        self._add(self.table, self._files.close(), props)
        self._seq += 1
        self._n = 0

    def finish(self) -> None:
        pass

    def _add(self, table: Any, files: list[str], props: dict[str, str]) -> None:
        scheme = "s3://" if table.location().startswith("s3://") else "file://"
        uris = [scheme + f for f in files]

        def add() -> None:
            if self._committed(table, props):  # a try whose answer was lost did commit
                return
            table.add_files(uris, snapshot_properties=props, check_duplicate_files=False)

        self._retry(add, table)

    @staticmethod
    def _committed(table: Any, props: dict[str, str]) -> bool:
        """This very commit is in the table (its id: a try whose answer was lost)."""
        return any(s.summary is not None and s.summary.get(COMMIT) == props[COMMIT] for s in table.metadata.snapshots)

    def _retry(self, act: Any, table: Any = None) -> None:
        """``act``, tried again on the refreshed table while another writer wins the commit race."""
        from pyiceberg.exceptions import CommitFailedException

        table = table if table is not None else self.table
        for attempt in range(COMMIT_TRIES):
            try:
                with warnings.catch_warnings():  # a delete of rows that are not there is fine here
                    warnings.filterwarnings("ignore", "Delete operation did not match any records")
                    act()
                return
            except CommitFailedException as exc:
                if attempt == COMMIT_TRIES - 1:
                    raise
                log.info("%s: another writer committed first (%s); trying again", self.name, exc)
                time.sleep(random.uniform(0.05, 0.2) * (attempt + 1))  # apart from the other writers
                table.refresh()


def ensure_table(catalog: Any, ident: str, schema: pa.Schema, day_of: str) -> Any:
    """The table ``ident``: made from ``schema``, partitioned by day of ``day_of``; or the one
    there, refused when it cannot take these rows, evolved when the rows add columns."""
    from pyiceberg.exceptions import CommitFailedException, NoSuchTableError, TableAlreadyExistsError
    from pyiceberg.transforms import DayTransform

    try:
        table = catalog.load_table(ident)
    except NoSuchTableError:
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
            with table.update_spec() as spec:
                spec.add_field(day_of, DayTransform(), f"{day_of}_day")
        except CommitFailedException:  # another worker partitioned it first: load what it made
            table = catalog.load_table(ident)
    return table


def _check(table: Any, ident: str, schema: pa.Schema) -> None:
    from pyiceberg.catalog import Catalog

    have = {f.name: f for f in table.schema().fields}
    want = {f.name: f for f in Catalog._convert_schema_if_needed(schema).fields}
    for name, field in have.items():
        if name not in want:
            raise ConfigError("--to-table", f"table {ident} has a column {name!r} ({field.field_type}) that these "
                                            f"predictions do not write; they write {describe(schema)}")
        if str(field.field_type) != str(want[name].field_type):
            raise ConfigError("--to-table", f"table {ident} has column {name!r} as {field.field_type}, these "
                                            f"predictions write it as {want[name].field_type}")
    added = [n for n in want if n not in have]
    if added:
        log.info("table %s: adding the columns %s (a schema evolution)", ident, added)
        with table.update_schema() as update:
            for name in added:  # optional: the rows already in the table have no value (Iceberg v2 refuses required)
                update.add_column(name, want[name].field_type, doc=want[name].doc)


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
