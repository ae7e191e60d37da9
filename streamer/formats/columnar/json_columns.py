"""Columnar decode + validate of a chunk of JSON feature events: the fast path beside ``decode_batch``.

Exact or step aside, like the Avro fast path: a row lands in ``DecodedColumns.rows`` only when its
result is certain to equal ``JsonCodec.decode`` followed by ``EventValidator.to_record``; any other
row goes to ``fallback``, where the reference gives the same record or the same dead-letter error.
orjson parses (it refuses what it cannot represent exactly as ``json`` would: NaN literals, numbers
past 64 bits or past a double's range, lone surrogates; those rows fall back), the features of all
rows become one float32 matrix in one numpy call, and width, finiteness and bounds are tested over
the matrix. Rows without an event id or an event time fall back too (their defaults come from the
message's coordinates, which the reference fills in), and so do ids that are not strings.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import orjson

from streamer.config import InputConfig
from streamer.formats.columnar.walk import DecodedColumns
from streamer.model.exact import EXACT_INT

_INT64 = (-(2**63), 2**63)
_NUMBERS = {int, float}
_EXACT = EXACT_INT["float32"]
_PAST_INT64 = np.float32(2.0**63)  # not finite either, beyond it: the non-finite test is this one too


class JsonColumns:
    """Decodes chunks of JSON events for one input config and model width."""

    def __init__(self, cfg: InputConfig, n_features: int) -> None:
        self._cfg, self._n = cfg, n_features

    def decode(self, values: Sequence[bytes | None]) -> DecodedColumns:
        cfg, n = self._cfg, self._n
        take: list[int] = []
        feats: list[Any] = []
        ids: list[str] = []
        entities: list[str] = []
        times: list[int] = []
        for i, value in enumerate(values):
            if value is None or len(value) > cfg.max_message_bytes:
                continue
            try:
                d = orjson.loads(value)
            except orjson.JSONDecodeError:
                continue
            if type(d) is not dict:
                continue
            f, t = d.get(cfg.features_field), d.get(cfg.time_field)
            e, entity = d.get(cfg.id_field), d.get(cfg.entity_field, "")
            # Ids that are not strings fall back: orjson reads an integer past 64 bits as a float,
            # json as an int, and str() of the two differ.
            if type(f) is not list or len(f) != n or type(t) is not int or not _INT64[0] <= t < _INT64[1] \
                    or type(e) is not str or type(entity) is not str or not set(map(type, f)) <= _NUMBERS:
                continue  # (a string among the features: the reference refuses it; a bool: it takes it)
            if int in set(map(type, f)) and any(type(v) is int and not -_EXACT <= v <= _EXACT for v in f):
                continue  # an integer float32 cannot hold: the reference dead-letters it
            take.append(i)
            feats.append(f)
            ids.append(e)
            entities.append(entity)
            times.append(t)
        rows = np.array(take, np.intp)
        if not take:
            return _columns(len(values), rows, np.empty((0, n), np.float32), [], [], [])
        try:
            matrix = np.array(feats, np.float32)
        except (TypeError, ValueError):  # an item that is not a number: find the rows, one by one
            matrix = None
        if matrix is None or matrix.shape != (len(take), n):  # nested lists too: (rows, n, 1)
            matrix, shaped = _one_by_one(feats, n)
        else:
            shaped = np.ones(len(take), bool)
        # orjson reads an integer past 64 bits as a float, json as an int (which the reference refuses
        # past 2^24): a value that large steps aside whichever it was.
        good = shaped & (np.abs(matrix) < _PAST_INT64).all(axis=1)
        if cfg.feature_min is not None:
            good &= matrix.min(axis=1, initial=np.inf) >= cfg.feature_min
        if cfg.feature_max is not None:
            good &= matrix.max(axis=1, initial=-np.inf) <= cfg.feature_max
        if not good.all():
            keep = np.flatnonzero(good)
            return _columns(len(values), rows[keep], matrix[keep], [ids[j] for j in keep.tolist()],
                            [entities[j] for j in keep.tolist()], [times[j] for j in keep.tolist()])
        return _columns(len(values), rows, matrix, ids, entities, times)


def _one_by_one(feats: list[Any], n: int) -> tuple[np.ndarray, np.ndarray]:
    """The matrix row by row, as the validator converts each; rows it refuses are marked False."""
    matrix = np.zeros((len(feats), n), np.float32)
    ok = np.zeros(len(feats), bool)
    for j, f in enumerate(feats):
        try:
            row = np.asarray(f, np.float32)
        except (TypeError, ValueError):
            continue
        if row.shape == (n,):
            matrix[j], ok[j] = row, True
    return matrix, ok


def _columns(k: int, rows: np.ndarray, features: np.ndarray, ids: list[str], entities: list[str],
             times: list[int]) -> DecodedColumns:
    fallback = np.ones(k, bool)
    fallback[rows] = False
    return DecodedColumns(rows=rows, features=features, event_ids=ids, entity_ids=entities,
                          event_times=np.array(times, np.int64), fallback=np.flatnonzero(fallback))
