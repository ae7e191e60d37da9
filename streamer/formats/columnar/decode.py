"""Columnar decode + validate of a chunk of Avro feature events: the fast path beside ``decode_batch``.

Exact or step aside: a row lands in ``DecodedColumns.rows`` only when its bytes take a shape whose
result is certain to equal ``AvroCodec.decode`` followed by ``EventValidator.to_record`` (fastavro
1.13's reader: varints as read_long reads them, strict UTF-8, floats as their little-endian bits).
Anything else, valid or not, goes to ``fallback`` for the reference path, which gives the same
record or the same dead-letter error as before. Every field is walked for all rows at once: the
messages are joined into one buffer, and each step moves a vector of positions along it.

Worked example (the shipped FeatureEvent, 2 features)::

    >>> dec = ColumnarDecoder.compile(schema, input_cfg, n_features=2)
    >>> cols = dec.decode([ok_bytes, None, ok_bytes[:-1]])
    >>> cols.rows.tolist(), cols.fallback.tolist()
    ([0], [1, 2])
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from streamer.config import InputConfig
from streamer.formats.columnar.walk import (
    DecodedColumns,
    Node,
    branches,
    floats,
    long,
    pick,
    record_fields,
    roles_readable,
    skip,
    text,
    walk_chunk,
)

_F32_MAX = 0x7F7FFFFF  # bits of the largest finite float32


def _bound(pred: Callable[[Any], Any], lowest_first: bool) -> np.float32:
    """The float32 threshold at which ``pred`` (the validator's own comparison) flips.

    ``pred(x)`` is monotone over finite float32 x (false above / below some point), so a binary
    search over the ordered bit patterns finds the first x where it is false: exact, whatever
    NumPy's promotion rule for a float32 against a Python number is.
    """
    def at(k: int) -> np.float32:  # k orders the finite float32 values: -max .. -0 .. +max
        bits = k if k >= 0 else 0x80000000 | -k
        return np.array([bits], np.uint32).view(np.float32)[0]

    lo, hi = -_F32_MAX, _F32_MAX
    if lowest_first:  # pred true low, false high: the first false
        if bool(pred(at(hi))):
            return np.float32(math.inf)
        while lo < hi:
            mid = (lo + hi) // 2
            lo, hi = (mid + 1, hi) if bool(pred(at(mid))) else (lo, mid)
    else:  # pred false low, true high: the last false
        if bool(pred(at(lo))):
            return np.float32(-math.inf)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (lo, mid - 1) if bool(pred(at(mid))) else (mid, hi)
    return at(lo)


class ColumnarDecoder:
    """Decodes and validates a chunk of messages of one writer schema, as columns."""

    def __init__(self, fields: list[tuple[str, Node]], cfg: InputConfig, n_features: int,
                 low: np.float32, high: np.float32) -> None:
        self._fields, self._cfg, self._n = fields, cfg, n_features
        self._low, self._high = low, high
        self._entity = cfg.entity_field in dict(fields)

    @classmethod
    def compile(cls, writer_schema: dict[str, Any], input_cfg: InputConfig,
                n_features: int) -> ColumnarDecoder | None:
        """A decoder for ``writer_schema``, or None when its layout is not one this walks.

        Walked: a record of strings, int/long, float, double, boolean, null, bytes, enum, fixed,
        arrays, maps, nested records and unions of these (a recursive record is not walked). The features field is an array of float
        or double (or a union holding one); the time field int/long (or a union holding one); the
        id and entity fields string, int/long, or unions of these with null; the entity field may
        be absent (it defaults to ""), the others may not (their defaults need the message).
        """
        cfg = input_cfg
        try:
            low = _bound(lambda x: cfg.feature_min is not None and x < cfg.feature_min, True)
            high = _bound(lambda x: cfg.feature_max is not None and x > cfg.feature_max, False)
        except Exception:  # noqa: BLE001 - a bound NumPy cannot compare
            return None
        fields = record_fields(writer_schema)
        if fields is None or n_features < 1:
            return None
        types = dict(fields)
        names = (cfg.features_field, cfg.time_field, cfg.id_field)
        if len(set(names)) < 3 or cfg.entity_field in names[:2] or not set(names) <= types.keys():
            return None  # a field in two roles, or an id or time that defaults to the message's coordinates
        if (not roles_readable(types, cfg)
                or not any(b.kind == "array" and b.item for b in branches(types[cfg.features_field]))):
            return None
        return cls(fields, cfg, n_features, low, high)

    def decode(self, values: Sequence[bytes | None], offset_of_payload: int = 0) -> DecodedColumns:
        """Decode and validate ``values``; the Avro body of each starts ``offset_of_payload`` bytes in.

        The caller checks any framing before that offset (the Confluent magic byte and schema id).
        """
        if offset_of_payload < 0:
            raise ValueError(f"offset_of_payload must be >= 0, got {offset_of_payload}")
        cfg, k = self._cfg, len(values)
        w, sel = walk_chunk(values, offset_of_payload, cfg.max_message_bytes)
        got: dict[str, tuple[np.ndarray, Any]] = {}
        for name, t in self._fields:
            sel = sel[w.ok[sel]]
            if name == cfg.features_field:
                got[name] = sel, floats(t, w, sel, self._n)
            elif name == cfg.time_field:
                got[name] = sel, long(t, w, sel)
            elif name in (cfg.id_field, cfg.entity_field):  # a null entity is '', as the reference has it
                got[name] = sel, text(t, w, sel, "" if name == cfg.entity_field else "None")
            else:
                skip(t, w, sel)
        at, feats = got[cfg.features_field]
        # NaN propagates through min and max, and -inf / +inf are below / above any bound (the bounds
        # are finite or refuse all), so these two tests are the validator's finite test too. The
        # whole chunk's first (a contiguous reduction, ~16x faster than one per row): row by row
        # only when some value is out.
        inside = (feats.min(initial=np.inf) >= self._low and feats.max(initial=-np.inf) <= self._high)
        good = (w.ok & (w.pos == w.end))[at]  # trailing bytes: the codec refuses them
        if not inside:
            good &= ((feats.min(axis=1, initial=np.inf) >= self._low)
                     & (feats.max(axis=1, initial=-np.inf) <= self._high))
        keep = np.flatnonzero(good)
        if len(keep) < len(at):
            feats = feats[keep]
        rows = at[keep]
        entities = pick(got[cfg.entity_field], rows) if self._entity else [""] * len(rows)
        rest = np.ones(k, bool)
        rest[rows] = False
        return DecodedColumns(rows, feats, pick(got[cfg.id_field], rows), entities,
                              pick(got[cfg.time_field], rows), np.flatnonzero(rest))
