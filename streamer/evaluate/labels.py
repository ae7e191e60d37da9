"""An evaluation's outcomes: a field of each event (``--labels FIELD``), or joined afterwards from a
labels source (``--labels-from PATH|TABLE``).

An outcome is 0/1 or true/false, as a number, a boolean or text. A null, an empty text or a
value that is neither (``2``, ``"fraud"``) leaves its event unlabeled: counted, never guessed.

A labels source is a CSV file, a Parquet file or folder (local or ``s3://``), or an Iceberg
table of the lake's catalog. It holds a key column, ``event_id`` or ``entity_id``, an outcome
column (``label`` by default) and, for an ``entity_id`` key, the outcome's time: a timestamp, a
date, or a number of milliseconds since the epoch. Rows with a null key, outcome or time say
nothing and are left out. The columns are checked on the source's schema before its rows are read
(:func:`check_columns`): a key column that is missing, or neither text nor an integer, is refused
on ``--labels-key``; an outcome column that is missing, or neither a number, a boolean nor text,
on ``--labels-column``.

- On ``event_id``: an event takes the outcome of its id (the last one, when the source repeats it).
- On ``entity_id``: an event takes the first outcome of its entity at or after the event's time
  (what happened after the event: a churn, a chargeback), within ``--labels-within`` when given.

Worked example: a churn table ``entity_id, label, label_time`` with ``acct-7, 1, 2026-11-20``
labels acct-7's events of 2026-11-01..2026-11-20 with 1; with ``--labels-within 7d``, only
those from 2026-11-13 on.

The field of ``--labels`` is read from each row's original message with the input codec (a
second decode, of the labeled runs only), because the outcome field is often named like a
prediction field (``label``) and so cannot travel as an ``output.include`` field.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from streamer.config import LakeConfig
from streamer.errors import ConfigError
from streamer.formats.codec import Codec
from streamer.lake.places import filesystem, identifier, open_catalog
from streamer.model.contract import field_value
from streamer.pipeline.records import Rows

log = logging.getLogger(__name__)
KEYS = ("event_id", "entity_id")


def outcome(value: Any) -> float:
    """An outcome as 1.0 (positive), 0.0, or NaN (unknown); ValueError for a value that is no outcome."""
    if value is None:
        return np.nan
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float) and value in (0, 1):
        return float(value)
    if isinstance(value, float) and np.isnan(value):
        return np.nan
    text = str(value).strip().lower()
    if text in ("1", "true", "1.0"):
        return 1.0
    if text in ("0", "false", "0.0"):
        return 0.0
    if text == "":
        return np.nan
    raise ValueError(f"an outcome is 0/1 or true/false, got {value!r}")


class Outcomes:
    """Each scored row's outcome from its event's field (``--labels FIELD``, a dotted path), or
    nothing (none given, or joined from a source afterwards). Values that are no outcome are
    counted in :attr:`unreadable` and leave the event unlabeled."""

    def __init__(self, codec: Codec | None = None, field: str | None = None) -> None:
        self.codec, self.field = codec, field
        self.unreadable = 0
        self._example: str | None = None

    @property
    def given(self) -> bool:
        return self.field is not None

    def of(self, rows: Rows) -> np.ndarray | None:
        if self.codec is None or self.field is None:
            return None
        out = np.empty(len(rows), np.float64)
        for i, message in enumerate(rows.source.items):
            raw = message.value()
            assert raw is not None  # a row was decoded from it
            value = field_value(self.codec.decode(raw), self.field)
            try:
                out[i] = outcome(value)
            except ValueError as exc:
                out[i] = np.nan
                self.unreadable += 1
                if self._example is None:
                    self._example = f"{message.topic()}[{message.partition()}] offset {message.offset()}: {exc}"
                    log.warning("--labels %s: %s; such events are counted as unlabeled", self.field, self._example)
        return out

    def describe(self) -> str | None:
        if self.field is None:
            return None
        bad = f"; {self.unreadable:,} values that are no outcome left unlabeled (first: {self._example})" \
            if self.unreadable else ""
        return f"the event field {self.field!r}{bad}"


@dataclass(frozen=True, slots=True)
class LabelsFrom:
    """Where the outcomes are and how they join: ``key`` None takes ``event_id`` when the source
    has it, else ``entity_id``."""

    location: str
    key: str | None = None
    column: str = "label"
    time: str | None = None  # the outcome's time; default: ``label_time`` when present
    within_ms: int | None = None

    def __post_init__(self) -> None:
        if self.key is not None and self.key not in KEYS:
            raise ConfigError("--labels-key", f"{self.key!r}: one of {', '.join(KEYS)}")


def read(lake: LakeConfig, spec: LabelsFrom) -> pa.Table:
    """The labels source as one Arrow table (ConfigError on ``--labels-from`` when unreadable)."""
    import pyarrow.csv as pacsv
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    where = spec.location
    if "/" in where or where.endswith((".csv", ".parquet")) or Path(where).exists():
        fs, path = filesystem(lake, where)
        info = fs.get_file_info(path)
        if info.type == pafs.FileType.NotFound:
            raise ConfigError("--labels-from", f"no file or folder at {where}")
        try:
            if where.endswith(".csv"):
                with fs.open_input_stream(path) as f:
                    return pacsv.read_csv(f)
            check_columns(spec, pq.ParquetDataset(path, filesystem=fs).schema)
            return pq.read_table(path, filesystem=fs)
        except (pa.ArrowInvalid, OSError) as exc:
            raise ConfigError("--labels-from", f"cannot read {where}: {exc}") from exc
    from pyiceberg.exceptions import NoSuchTableError  # the lake extra's

    try:
        table = open_catalog(lake).load_table(identifier(lake, where, "--labels-from"))
    except NoSuchTableError as exc:
        raise ConfigError("--labels-from", f"{where!r} is no file or folder here, nor a table of the "
                                           f"catalog ({exc})") from exc
    check_columns(spec, table.schema().as_arrow())
    return table.scan().to_arrow()


def check_columns(spec: LabelsFrom, schema: pa.Schema) -> str:
    """The key ``spec`` joins on in a source of ``schema``; ConfigError on ``--labels-key`` or
    ``--labels-column`` for a column that is missing or of a type that cannot join or be an outcome."""
    names = schema.names
    key = spec.key or ("event_id" if "event_id" in names else "entity_id")
    for flag, column, fits, what in (
            ("--labels-key", key, _keyish, "text or an integer (an id)"),
            ("--labels-column", spec.column, _outcomeish, "a number, a boolean or text (0/1, true/false)")):
        if column not in names:
            raise ConfigError(flag, f"{spec.location} has no column {column!r} (it has {', '.join(names)})")
        kind = schema.field(column).type
        if not fits(kind.value_type if pa.types.is_dictionary(kind) else kind):
            raise ConfigError(flag, f"the column {column!r} of {spec.location} is {kind}: {what}")
    return key


def _keyish(kind: pa.DataType) -> bool:
    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_integer(kind))


def _outcomeish(kind: pa.DataType) -> bool:
    return bool(_keyish(kind) or pa.types.is_boolean(kind) or pa.types.is_floating(kind))


@dataclass(frozen=True, slots=True)
class Known:
    """A labels source read and checked before the run: which key the events are joined on, and
    each key's outcomes (with their times, on ``entity_id``)."""

    spec: LabelsFrom
    key: str  # event_id | entity_id
    keys: list[str]
    values: np.ndarray  # float64 0/1
    times_ms: np.ndarray | None  # on entity_id: each outcome's time
    time_column: str | None
    left_out: int  # rows of the source with a null key, outcome or time, or a value that is no outcome

    @property
    def how(self) -> str:
        on = self.key if self.time_column is None else f"entity_id and {self.time_column}"
        within = "" if self.spec.within_ms is None else f" within {self.spec.within_ms / 3_600_000:g} h"
        dropped = f"; {self.left_out:,} of its rows say nothing (null or no outcome)" if self.left_out else ""
        return f"{self.spec.location}, column {self.spec.column!r}, joined on {on}{within}{dropped}"

    def join(self, ids: Sequence[str], event_times_ms: np.ndarray) -> np.ndarray:
        """Each event's outcome (NaN: none known), by its ``key``'s id and its time."""
        if self.times_ms is None:
            known = dict(zip(self.keys, self.values.tolist(), strict=True))  # the last outcome of an id wins
            return np.array([known.get(e, np.nan) for e in ids], np.float64)
        return _as_of(self.keys, self.times_ms, self.values, ids, event_times_ms, self.spec.within_ms)


def prepare(spec: LabelsFrom, table: pa.Table) -> Known:
    """The source's outcomes, checked: the key and outcome columns exist, an ``entity_id`` join
    has a time, ``--labels-within`` is for that join."""
    names = set(table.column_names)
    key = check_columns(spec, table.schema)
    keys = table.column(key).to_pylist()
    values = np.array([_outcome(v) for v in table.column(spec.column).to_pylist()], np.float64)
    said = np.array([k is not None for k in keys]) & ~np.isnan(values)
    times, time = None, None
    if key == "event_id":
        if spec.within_ms is not None:
            raise ConfigError("--labels-within", "bounds an entity_id join; this one is on event_id")
    else:
        time = spec.time or ("label_time" if "label_time" in names else None)
        if time is None or time not in names:
            raise ConfigError("--labels-time", f"joining on entity_id needs the outcome's time: {spec.location} "
                                               f"has no column {time or 'label_time'!r}")
        times, known_time = _millis(table.column(time), time)
        said &= known_time
    kept = np.flatnonzero(said)
    return Known(spec, key, [str(keys[i]) for i in kept], values[kept], None if times is None else times[kept],
                 time, int(len(keys) - len(kept)))


def _as_of(keys: list[str], times: np.ndarray, values: np.ndarray, entity_ids: Sequence[str],
           event_times_ms: np.ndarray, within_ms: int | None) -> np.ndarray:
    """Per event, the first outcome of its entity at or after its time (within ``within_ms``)."""
    by: dict[str, tuple[list[int], list[float]]] = {}
    for i in np.lexsort((times, np.array(keys, object))) if keys else ():
        ts, vs = by.setdefault(keys[i], ([], []))
        ts.append(int(times[i]))
        vs.append(float(values[i]))
    out = np.full(len(entity_ids), np.nan)
    for n, (entity, at) in enumerate(zip(entity_ids, event_times_ms.tolist(), strict=True)):
        found = by.get(entity)
        if found is None:
            continue
        j = bisect.bisect_left(found[0], at)
        if j < len(found[0]) and (within_ms is None or found[0][j] - at <= within_ms):
            out[n] = found[1][j]
    return out


def _millis(column: Any, name: str) -> tuple[np.ndarray, np.ndarray]:
    """A time column as ms since the epoch (a timestamp, a date, or a number of ms), and which rows have one."""
    kind = column.type
    if pa.types.is_timestamp(kind):
        column = column.cast(pa.timestamp("ms", tz=kind.tz))
    elif pa.types.is_date(kind):
        column = column.cast(pa.date64())
    elif not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
        raise ConfigError("--labels-time", f"the column {name!r} is {kind}: a timestamp, a date, or milliseconds "
                                           "since the epoch")
    ints = column.cast(pa.int64())
    present = np.asarray(ints.is_valid().to_numpy(zero_copy_only=False), bool)
    return np.asarray(ints.fill_null(0).to_numpy(zero_copy_only=False), np.int64), present


def _outcome(value: Any) -> float:
    try:
        return outcome(value)
    except ValueError:
        return np.nan  # counted in Known.left_out
