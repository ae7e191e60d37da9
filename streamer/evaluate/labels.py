"""Outcomes known after the events, joined to the evaluated rows: ``--labels-from PATH|TABLE``.

A labels source is a CSV file, a Parquet file or folder (local or ``s3://``), or an Iceberg
table of the lake's catalog. It holds a key column, ``event_id`` or ``entity_id``, an outcome
column (``label`` by default: 0/1 or true/false) and, for an ``entity_id`` key, the outcome's time.

- On ``event_id``: an event takes the outcome of its id (the last one, when the source repeats it).
- On ``entity_id``: an event takes the first outcome of its entity at or after the event's time
  (what happened after the event: a churn, a chargeback), within ``--labels-within`` when given.

An event with no outcome keeps NaN: it is counted as unlabeled, never guessed.

Worked example: a churn table ``entity_id, label, label_time`` with ``acct-7, 1, 2026-11-20``
labels acct-7's events of 2026-11-01..2026-11-20 with 1; with ``--labels-within 7d``, only
those of 2026-11-13 on.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from streamer.config import LakeConfig
from streamer.errors import ConfigError
from streamer.evaluate.pair import outcome

KEYS = ("event_id", "entity_id")


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

    def describe(self, key: str) -> str:
        return f"{self.location}, column {self.column!r}, joined on {key}"


def read(lake: LakeConfig, spec: LabelsFrom) -> pa.Table:
    """The labels source as one Arrow table (ConfigError on ``--labels-from`` when unreadable)."""
    import pyarrow.csv as pacsv
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    from streamer.lake.places import filesystem

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
            return pq.read_table(path, filesystem=fs)
        except (pa.ArrowInvalid, OSError) as exc:
            raise ConfigError("--labels-from", f"cannot read {where}: {exc}") from exc
    from pyiceberg.exceptions import NoSuchTableError

    from streamer.lake.places import identifier, open_catalog

    try:
        return open_catalog(lake).load_table(identifier(lake, where, "--labels-from")).scan().to_arrow()
    except NoSuchTableError as exc:
        raise ConfigError("--labels-from", f"{where!r} is no file or folder here, nor a table of the "
                                           f"catalog ({exc})") from exc


@dataclass(frozen=True, slots=True)
class Known:
    """A labels source read and checked before the run: which key the events are joined on, and
    each key's outcomes (with their times, on ``entity_id``)."""

    spec: LabelsFrom
    key: str  # event_id | entity_id
    keys: list[str | None]
    values: np.ndarray  # float64 0/1
    times_ms: np.ndarray | None  # on entity_id: each outcome's time
    time_column: str | None

    @property
    def how(self) -> str:
        return self.spec.describe(self.key if self.time_column is None else f"entity_id and {self.time_column}")

    def join(self, ids: Sequence[str], event_times_ms: np.ndarray) -> np.ndarray:
        """Each event's outcome (NaN: none known), by its ``key``'s id and its time."""
        if self.times_ms is None:
            known = dict(zip(self.keys, self.values, strict=True))  # the last outcome of an id wins
            return np.array([known.get(e, np.nan) for e in ids], np.float64)
        return _as_of(self.keys, self.times_ms, self.values, ids, event_times_ms, self.spec.within_ms)


def prepare(spec: LabelsFrom, table: pa.Table) -> Known:
    """The source's outcomes, checked: the key and outcome columns exist, the values are outcomes,
    an ``entity_id`` join has a time."""
    names = set(table.column_names)
    key = spec.key or ("event_id" if "event_id" in names else "entity_id")
    missing = [c for c in (key, spec.column) if c not in names]
    if missing:
        raise ConfigError("--labels-from", f"{spec.location} has no column {missing[0]!r} (it has "
                                           f"{', '.join(table.column_names)})")
    keys = [None if k is None else str(k) for k in table.column(key).to_pylist()]
    values = np.array([_outcome(v) for v in table.column(spec.column).to_pylist()], np.float64)
    if key == "event_id":
        return Known(spec, key, keys, values, None, None)
    time = spec.time or ("label_time" if "label_time" in names else None)
    if time is None or time not in names:
        raise ConfigError("--labels-time", f"joining on entity_id needs the outcome's time: {spec.location} "
                                           f"has no column {time or 'label_time'!r}")
    return Known(spec, key, keys, values, _millis(table.column(time)), time)


def join(spec: LabelsFrom, table: pa.Table, event_ids: Sequence[str], entity_ids: Sequence[str],
         event_times_ms: np.ndarray) -> tuple[np.ndarray, str]:
    """Each event's outcome (NaN: none known) and how the join was made, in words."""
    known = prepare(spec, table)
    return known.join(event_ids if known.key == "event_id" else entity_ids, event_times_ms), known.how


def _as_of(keys: list[str | None], times: np.ndarray, values: np.ndarray, entity_ids: Sequence[str],
           event_times_ms: np.ndarray, within_ms: int | None) -> np.ndarray:
    """Per event, the first outcome of its entity at or after its time (within ``within_ms``)."""
    by: dict[str, tuple[list[int], list[float]]] = {}
    for i in np.lexsort((times, np.array([k or "" for k in keys], object))):
        k = keys[i]
        if k is not None:
            ts, vs = by.setdefault(k, ([], []))
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


def _millis(column: Any) -> np.ndarray:
    """A time column as ms since the epoch: a timestamp, or a number of ms."""
    if pa.types.is_timestamp(column.type):
        return np.asarray(column.cast(pa.timestamp("ms", tz=column.type.tz)).cast(pa.int64()).to_numpy(
            zero_copy_only=False), np.int64)
    return np.asarray(column.to_numpy(zero_copy_only=False), np.int64)


def _outcome(value: Any) -> float:
    try:
        return outcome(value)
    except ValueError as exc:
        raise ConfigError("--labels-from", str(exc)) from exc
