"""A run's predictions precomputed into the key-value store (Redis): the lake's :class:`Sink` on stores/keys.py's layout.

Each prediction is a hash ``P:run:<run>:<entity id>`` of the prediction fields (stores/values.py:
a string as is, anything else as JSON; timestamps as epoch milliseconds; a null field is left
out), ``kv.pipeline_rows`` rows to a round trip (stores/bulk.py); ``kv.ttl_s`` > 0 sets its expiry. A run writes
under its own key space, which no reader resolves until the run is complete, so what it writes
needs no other hiding. Rows without an entity id, and the rows the run could not score, are
entries of the stream ``P:rejects:<run>``.

The run's record ``P:run:<run>`` is its checkpoint: a commit (every ``kv.commit_rows`` rows)
records the shard's progress there, after the rows' pipelines returned, and only when the record
still holds the progress this writer continued from (one writer per shard: else
:class:`StaleCommitError`). A run started again with its id resumes after its last commit; the
rows written past it are written again, the same keys, and its rejects past it are deleted first.

When the last shard of a run finishes, the run is complete: ``SET P:current <run>`` (one command)
switches the readers to it, the record gets ``finished_at`` and ``P:runs`` the run; every run it
replaced (its keys and record) expires ``kv.keep_previous_s`` later. Any Redis failure is a
:class:`StoreError` naming the address, never the password; the run resumes from its last commit.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from streamer.config import KvConfig
from streamer.errors import (
    ConfigError,
    RecordError,
    ReplayFinishedError,
    StaleCommitError,
    StoreError,
    StreamerError,
)
from streamer.kafka.ranges import Ranges
from streamer.lake.columns import as_json
from streamer.lake.sink import Resume, Shard, ranges_of, ranges_text
from streamer.pipeline.records import Partition
from streamer.stores.arrow_kinds import holds_bytes, kind_of_column
from streamer.stores.bulk import hsets, send
from streamer.stores.client import connect, describe_error
from streamer.stores.keys import KeySpace
from streamer.stores.precomputed import KINDS
from streamer.stores.values import Kind, text

FINISHED = "finished_at"
STARTED = "started_at"
NO_REJECT = "0-0"  # a stream id before any entry
# Compare-and-set of a hash field: the shard's progress moves on only from what its writer read.
_SWAP = """
local found = redis.call('HGET', KEYS[1], ARGV[1]) or ''
if found ~= ARGV[2] then return found end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return false
"""


def kinds_of(schema: pa.Schema) -> dict[str, Kind]:
    """How each prediction field is written: a string column as it is, anything else as JSON."""
    return {f.name: kind_of_column(f.type) for f in schema}


class KvSink:
    """Writes a run's predictions under ``prefix`` of the store ``kv``; ``entity_field``: the
    event field whose value the entity ids are (what a reject of a row without one names)."""

    def __init__(self, kv: KvConfig, prefix: str, schema: pa.Schema, entity_field: str = "entity_id",
                 client: Any = None) -> None:
        self.kv = replace(kv, prefix=prefix)  # checked as kv.prefix is
        binary = [f.name for f in schema if holds_bytes(f.type)]
        if binary:
            raise ConfigError("--to-kv", f"the prediction field {binary[0]!r} holds bytes, which a hash of "
                                         "text fields cannot keep: leave it out of output.include, or write to a table")
        self.keys, self.schema, self.entity_field = KeySpace(prefix), schema, entity_field
        self.name = f"kv {kv.address} {prefix}"
        self._client = client if client is not None else connect(self.kv)
        self._swap = self._client.register_script(_SWAP)
        self._run, self._shard, self._seq = "", Shard(), 0
        self._bounds: Ranges = {}
        self._reached: dict[Partition, int] = {}
        self._progress = ""  # the shard's progress as this writer read or last recorded it
        self._last_reject = NO_REJECT
        self._force, self._modelled, self._since = False, False, 0
        self.committed_rows = (0, 0)
        self._pending = (0, 0)

    @property
    def rejects_at(self) -> str:
        return f"{self.name} stream {self.keys.rejects(self._run)}"

    # ---- the plan -------------------------------------------------------------------------

    def resume(self, run_id: str, shard: Shard, plan: Ranges | None, force: bool) -> Resume:
        self._run, self._shard, self._force = run_id, shard, force
        with self._calls():
            record = self._record()
            if force:
                self._forget()
                record = self._record()
            self._same_shards(record)
            saved, fresh = record.get(self._field), False
            if saved is None:
                if plan is None:
                    raise ConfigError("--run-id", f"run {run_id!r} has no saved plan in {self.name}")
                saved, fresh = self._plan(plan), True
            self._progress = saved
            progress = json.loads(saved)
            self._bounds = ranges_of(json.dumps(progress["bounds"]))
            self._reached = {tp: to for tp, (_, to) in ranges_of(json.dumps(progress["reached"])).items()}
            self._seq, self._last_reject = int(progress["seq"]), str(progress["rejects"])
            self.committed_rows = (int(progress["written"][0]), int(progress["written"][1]))
            resume = Resume(self._bounds, dict(self._reached), self._seq)
            if not fresh and resume.done:
                if FINISHED not in record:  # a crash between the last commit and the switch
                    self.finish()
                raise ReplayFinishedError(f"run {run_id!r} (shard {shard}) already finished into {self.name}; "
                                          "pass --force to run it again", self.name,
                                          (*self.committed_rows, sum(e - s for s, e in self._bounds.values())),
                                          self.rejects_at)
            self._drop_rejects(self._last_reject)  # those written after the last commit: written again
        return resume

    @property
    def _field(self) -> str:
        return f"shard:{self._shard}"

    def _plan(self, plan: Ranges) -> str:
        """The shard's first progress (its bounds, nothing reached), and the run's record."""
        progress = _progress_text(plan, {}, 0, (0, 0), NO_REJECT)
        record = self.keys.run(self._run)
        # before the plan: a kill after it would leave a run that resumes without them
        self._client.hsetnx(record, STARTED, _now_ms())
        self._client.hsetnx(record, KINDS, orjson.dumps(kinds_of(self.schema)))
        self._cas("", progress)
        return progress

    def _same_shards(self, record: Mapping[str, str]) -> None:
        """A run resumes in the shards it was planned in: other counts would score partitions twice."""
        counts = {k.rsplit("-of-", 1)[-1] for k in record if k.startswith("shard:")}
        if counts - {str(self._shard.count)}:
            raise ConfigError("--shard" if self._shard.count > 1 else "--workers",
                              f"run {self._run!r} was planned in {' and '.join(sorted(counts))} shards in "
                              f"{self.name}, not {self._shard.count}: resume it with the same count")

    def _forget(self) -> None:
        """``--force``: the shard's progress and rejects go, the run is incomplete again, and
        nothing of it expires (a run replaced earlier had its expiry set)."""
        current = self._client.get(self.keys.current)
        if current is not None and text(current) == self._run:
            raise ConfigError("--force", f"run {self._run!r} is the current run of {self.name}, which readers use: "
                                         "run it again under a new --run-id (the switch replaces it)")
        run, rejects = self.keys.run(self._run), self.keys.rejects(self._run)
        self._client.hdel(run, self._field, FINISHED)
        self._client.zrem(self.keys.runs, self._run)
        self._client.persist(run)
        self._client.persist(rejects)
        self._drop_rejects(NO_REJECT)

    def _drop_rejects(self, after: str) -> None:
        """This shard's reject entries after stream id ``after`` (never committed)."""
        stream = self.keys.rejects(self._run)
        mine = str(self._shard).encode()
        gone = [entry for entry, fields in self._client.xrange(stream, f"({after}" if after != NO_REJECT else "-")
                if fields.get(b"shard") == mine]
        if gone:
            self._client.xdel(stream, *gone)

    # ---- writing --------------------------------------------------------------------------

    def write(self, predictions: pa.Table | None, rejects: pa.Table | None) -> int:
        """Pipelines ``predictions``' hashes and ``rejects``' entries (readers never resolve the run
        before it completes); the predictions without an entity id, written as rejects."""
        unkept = 0
        with self._calls():
            if predictions is not None and predictions.num_rows:
                unkept = self._write_rows(predictions)
            if rejects is not None and rejects.num_rows:
                self._write_rejects([{**r, "stage": _stage(r["error"])} for r in rejects.to_pylist()])
        return unkept

    def _write_rows(self, table: pa.Table) -> int:
        if not self._modelled:  # the run's record names its model once
            first = table.slice(0, 1).to_pylist()[0]
            self._client.hset(self.keys.run(self._run), mapping={
                k: str(first[k]) for k in ("model_name", "model_version") if first.get(k) is not None})
            self._modelled = True
        entities = table.column("entity_id").to_pylist()
        missing = [i for i, entity in enumerate(entities) if not entity]
        if missing:  # a row without an entity id cannot be kept by it
            self._unkept(table.take(missing).to_pylist())
            table = table.filter(pa.array([bool(entity) for entity in entities]))
        keys = [self.keys.entity(self._run, entity).encode() for entity in entities if entity]
        columns = [(name.encode(), _encoded(table.column(name))) for name in table.column_names]
        after = [b"EXPIRE", str(self.kv.ttl_s).encode()] if self.kv.ttl_s else [b"PERSIST"] if self._force else []
        commands = hsets(self._client, keys, columns, after)  # PERSIST: a forced run's rows may have an expiry
        step = self.kv.pipeline_rows * (3 if after else 2)  # DEL, HSET and the after of each row
        for start in range(0, len(commands), step):
            send(self._client, commands[start:start + step])
        self._add(len(keys), 0)
        return len(missing)

    def _unkept(self, rows: list[dict[str, Any]]) -> None:
        """Rows without an entity id, as rejects naming the entity field."""
        self._write_rejects([{
            "source_topic": r.get("source_topic"), "source_partition": r.get("source_partition"),
            "source_offset": r.get("source_offset"), "error": "ValidationError", "stage": "validate",
            "reason": f"no entity id: the event's {self.entity_field!r} is missing or empty, and a "
                      "precomputed prediction is kept by it",
            "original": as_json(r)} for r in rows])

    def _write_rejects(self, items: list[dict[str, Any]]) -> None:
        pipe = self._client.pipeline(transaction=False)
        stream, now = self.keys.rejects(self._run), _now_ms()
        for r in items:
            pipe.xadd(stream, {"reason": r["reason"], "error": r["error"], "stage": r["stage"],
                               "original": r.get("original") or b"", "source": str(r.get("source_topic") or ""),
                               "partition": str(r.get("source_partition")), "offset": str(r.get("source_offset")),
                               "shard": str(self._shard), "rejected_at": now})
        ids = pipe.execute()
        self._last_reject = text(ids[-1])
        self._add(0, len(items))

    def _add(self, predictions: int, rejects: int) -> None:
        self._pending = (self._pending[0] + predictions, self._pending[1] + rejects)
        self._since += predictions + rejects

    def due(self) -> bool:
        return self._since >= self.kv.commit_rows

    def commit(self, covered: Ranges) -> None:
        """Records the shard's progress (its rows' pipelines have returned)."""
        reached = {**self._reached, **{tp: to for tp, (_, to) in covered.items()}}
        totals = (self.committed_rows[0] + self._pending[0], self.committed_rows[1] + self._pending[1])
        progress = _progress_text(self._bounds, reached, self._seq + 1, totals, self._last_reject)
        with self._calls():
            self._cas(self._progress, progress)
        self._progress, self._reached, self._seq = progress, reached, self._seq + 1
        self.committed_rows, self._pending, self._since = totals, (0, 0), 0

    def _cas(self, expected: str, progress: str) -> None:
        found = self._swap(keys=[self.keys.run(self._run)], args=[self._field, expected, progress])
        if found is not None:
            def seq(progress: str) -> int | None:
                n = int(json.loads(progress)["seq"]) if progress else 0
                return n - 1 if n else None

            raise StaleCommitError(self._run, str(self._shard), seq(expected), seq(text(found)), self.name)

    # ---- the switch -----------------------------------------------------------------------

    def finish(self) -> None:
        """When every shard of the run covered its plan: readers switch to it, and the runs it
        replaced expire (the last shard to finish does it; a run complete already is left as it is)."""
        with self._calls():
            record = self._record()
            if FINISHED in record or not _complete(record):
                return
            started = int(record.get(STARTED) or _now_ms())
            self._client.zadd(self.keys.runs, {self._run: started})  # first: a run that a later finish expires
            current = self._client.get(self.keys.current)
            later = None if current is None or text(current) == self._run else \
                self._client.hget(self.keys.run(text(current)), STARTED)
            self._client.hsetnx(self.keys.run(self._run), FINISHED, _now_ms())
            if later is not None and int(later) > started:  # a run started after this one is current already
                self._expire_run(self._run)
                return
            self._client.set(self.keys.current, self._run)  # the switch: one command
            self._expire_replaced()

    def _expire_replaced(self) -> None:
        """Every complete run but this one whose keys have no expiry yet: they expire in
        ``kv.keep_previous_s`` (a reader that resolved one a moment ago still finds it)."""
        for raw in self._client.zrange(self.keys.runs, 0, -1):
            run = text(raw)
            if run == self._run:
                continue
            ttl = self._client.ttl(self.keys.run(run))
            if ttl == -2:  # expired: gone from the runs
                self._client.zrem(self.keys.runs, run)
                continue
            if ttl != -1:
                continue  # expiring already
            self._expire_run(run)

    def _expire_run(self, run: str) -> None:
        """Every key of ``run`` expires in ``kv.keep_previous_s``, its record last."""
        keep = self.kv.keep_previous_s
        pipe, queued = self._client.pipeline(transaction=False), 0
        for key in self._client.scan_iter(match=self.keys.entities(run), count=10_000):
            pipe.expire(key, keep, lt=True)  # a key of a shorter ttl_s keeps its own
            queued += 1
            if queued == self.kv.pipeline_rows:
                pipe.execute()
                queued = 0
        pipe.execute()
        self._client.expire(self.keys.rejects(run), keep)
        self._client.expire(self.keys.run(run), keep)  # last: the mark that its keys expire

    # ---- the store ------------------------------------------------------------------------

    def _record(self) -> dict[str, str]:
        return {text(k): text(v) for k, v in self._client.hgetall(self.keys.run(self._run)).items()}

    @contextlib.contextmanager
    def _calls(self) -> Iterator[None]:
        """Redis' errors (timeouts, connection, auth) and the OS's as StoreError naming the store."""
        try:
            yield
        except StreamerError:
            raise
        except Exception as exc:  # noqa: BLE001 - the client's errors have no common base with the OS's
            raise StoreError(describe_error(self.kv, exc)) from None


def _complete(record: Mapping[str, str]) -> bool:
    """Every shard of the run (known by its ``I-of-N`` name) recorded, and each covered its plan."""
    shards = {k[len("shard:"):]: v for k, v in record.items() if k.startswith("shard:")}
    counts = {int(name.rpartition("-of-")[2]) for name in shards}
    if len(counts) != 1:
        return False
    n = counts.pop()
    for i in range(n):
        text = shards.get(f"{i}-of-{n}")
        if text is None:
            return False
        progress = json.loads(text)
        reached = {tp: to for tp, (_, to) in ranges_of(json.dumps(progress["reached"])).items()}
        if not Resume(ranges_of(json.dumps(progress["bounds"])), reached, 0).done:
            return False
    return True


def _progress_text(bounds: Ranges, reached: Mapping[Partition, int], seq: int, written: tuple[int, int],
                   last_reject: str) -> str:
    return json.dumps({"bounds": json.loads(ranges_text(bounds)),
                       "reached": json.loads(ranges_text({tp: (to, to) for tp, to in reached.items()})),
                       "seq": seq, "written": list(written), "rejects": last_reject}, separators=(",", ":"))


def _encoded(column: pa.ChunkedArray) -> list[bytes | None]:
    """A column's values as a hash holds them (None: null, left out)."""
    kind = column.type
    if len(column) > 1 and not column.null_count and not pa.types.is_nested(kind) and \
            pc.count_distinct(column).as_py() == 1:  # the model's name, the run: one value for every row
        return _encoded(column.slice(0, 1)) * len(column)
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return column.cast(pa.binary()).to_pylist()
    if pa.types.is_timestamp(kind):  # epoch milliseconds, as a prediction record's
        ms = column.cast(pa.timestamp("ms", kind.tz), safe=False).cast(pa.int64()).to_pylist()
        return [None if v is None else str(v).encode() for v in ms]
    if pa.types.is_map(kind):
        return [None if v is None else orjson.dumps(dict(v)) for v in column.to_pylist()]
    return [None if v is None else orjson.dumps(v) for v in column.to_pylist()]


def _stage(error: str) -> str:
    """The pipeline stage a reject's error class names (RecordError's subclasses), else 'infer'."""
    found: list[type[RecordError]] = [RecordError]
    while found:
        cls = found.pop()
        if cls.__name__ == error:
            return cls.stage
        found.extend(cls.__subclasses__())
    return "infer"


def _now_ms() -> int:
    return int(time.time() * 1000)
