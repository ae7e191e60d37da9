"""Writing features into the kv: store for kind ``redis``: a hash per entity and the fields' kinds, as ``streamer features load`` does.

Each row of an Arrow batch becomes the hash ``<prefix>:<entity id>`` (stores/keys.py), the entity
id read from the entity column; every other column is a field, written by stores/values.py (a
string as is, anything else as JSON), a null one deleted from the hash instead (absent, as a
reader sees a missing feature). Timestamps are written as milliseconds since the epoch, as an
event's times are. The kinds of the fields (``str`` or ``json``, by the column's Arrow type) go
into the hash ``<prefix>`` itself before the first row that has them, so a reader
(stores/features.py's RedisFeatures) reads ``"07"`` as a string and ``7`` as a number.

Rows are written in pipelines of ``kv.pipeline_rows`` (one round trip each, no transaction: a
Redis Cluster spreads the keys over its nodes). A row without an entity id (null or empty) is
skipped, counted, and its place (file and row) kept for the summary. Loading again overwrites
each entity's fields of the columns loaded; fields of other columns are left as they were.

Worked example, prefix ``f``, entity column ``entity_id``, a row ``{entity_id: "u1", country:
"07", amount: null, visits: 3}``: ``HSET f country str amount json visits json``, then
``HSET f:u1 country 07 visits 3`` and ``HDEL f:u1 amount``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from streamer.config import KvConfig
from streamer.errors import ConfigError, StoreError
from streamer.stores.arrow_kinds import holds_bytes, kind_of_column
from streamer.stores.client import connect, describe_error
from streamer.stores.keys import feature_key
from streamer.stores.values import Kind, encode

SKIPPED_NAMED = 10  # the places of skipped rows a summary names; the rest are counted


@dataclass(slots=True)
class LoadCounts:
    """What a load wrote: rows loaded, rows skipped (no entity id) and the first skipped rows' places."""

    rows: int = 0
    skipped: int = 0
    skipped_at: list[str] = field(default_factory=list)


def writable(batch: pa.RecordBatch, source: str) -> pa.RecordBatch:
    """``batch`` with timestamps as integers of milliseconds and decimals as floats; a binary column
    is refused (ConfigError naming it): a feature is a number, a string or a list of them."""
    cols = []
    for name, col in zip(batch.schema.names, batch.columns, strict=True):
        if pa.types.is_timestamp(col.type):
            col = col.cast(pa.timestamp("ms", tz=col.type.tz), safe=False).cast(pa.int64())  # truncated to ms
        elif pa.types.is_decimal(col.type):
            col = col.cast(pa.float64())
        elif holds_bytes(col.type):
            raise ConfigError("--from", f"column {name!r} of {source} holds bytes ({col.type}): a feature is a number, "
                                   "a string, a boolean or a list of them")
        cols.append(col)
    return pa.RecordBatch.from_arrays(cols, names=batch.schema.names)


class FeatureLoader:
    """Writes batches of rows as feature hashes under ``prefix`` of ``kv``; ``entity_field`` is the
    entity id's column."""

    def __init__(self, kv: KvConfig, prefix: str, entity_field: str, client: Any = None) -> None:
        self.kv, self.prefix, self.entity_field = kv, prefix, entity_field
        self._client = client if client is not None else connect(kv)
        self._kinds: dict[str, Kind] = {}  # the kinds written to <prefix> by this load
        self.counts = LoadCounts()

    def write(self, batch: pa.RecordBatch, source: str, first_row: int) -> None:
        """Write ``batch``, whose first row is row ``first_row`` of ``source`` (a skipped row's place)."""
        if self.entity_field not in batch.schema.names:
            raise ConfigError("input.entity_field", f"{source} has no column {self.entity_field!r} (the entity id); "
                                                    f"its columns: {', '.join(batch.schema.names)}")
        batch = writable(batch, source)
        names = [n for n in batch.schema.names if n != self.entity_field]
        kinds = {n: kind_of_column(batch.schema.field(n).type) for n in names}
        new = {n: k for n, k in kinds.items() if self._kinds.get(n) != k}
        columns = {n: batch.column(n).to_pylist() for n in names}
        entities = batch.column(self.entity_field).to_pylist()
        step = self.kv.pipeline_rows
        for start in range(0, batch.num_rows, step):
            pipe = self._client.pipeline(transaction=False)
            if new:  # the kinds before the first row that has them: a reader never meets a field of no kind
                pipe.hset(self.prefix, mapping=dict(new))
            loaded = 0
            for j in range(start, min(start + step, batch.num_rows)):
                entity = entities[j]
                if entity is None or entity == "":
                    self._skip(source, first_row + j)
                    continue
                key = feature_key(self.prefix, str(entity))
                values = {n: encode(columns[n][j]) for n in names if columns[n][j] is not None}
                nulls = [n for n in names if columns[n][j] is None]
                if values:
                    pipe.hset(key, mapping=values)
                if nulls:
                    pipe.hdel(key, *nulls)
                loaded += 1
            self._execute(pipe)
            if new:
                self._kinds.update(new)
                new = {}
            self.counts.rows += loaded

    def _skip(self, source: str, row: int) -> None:
        self.counts.skipped += 1
        if len(self.counts.skipped_at) < SKIPPED_NAMED:
            self.counts.skipped_at.append(f"{source} row {row}")

    def _execute(self, pipe: Any) -> None:
        try:
            pipe.execute()
        except Exception as exc:  # redis' errors (timeouts, connection, auth, a key of another type) and the OS's
            raise StoreError(describe_error(self.kv, exc)) from None

    def close(self) -> None:
        self._client.close()
