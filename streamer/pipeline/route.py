"""The route stage: a consumed chunk split into one part per model, by the value of ``route.field``.

The value is looked up as text in ``route.map`` (a string as it is, a boolean as ``true`` or
``false``, any other value as Python's ``str`` writes it: ``7`` for the number 7). A value the map
does not name, or no value (the field missing or null), goes to the default model, or with
``route.unknown: dead_letter`` is a :class:`~streamer.errors.RouteError` whose reason names the
field and the value. An event that cannot be decoded is the ``deserialize`` dead letter the decode
stage would make of it. Each part keeps the chunk's order; the models' own decode stages read
their parts (pipeline/stages.py).

Reading the field: Avro, avro-confluent and JSON by their fast readers
(formats/columnar/field_text.py: the field alone, not the event), every other format and every row
a fast reader leaves by the input codec's decode, the reference. A fast reader stops at the field:
an event broken after it reaches its model, whose decode stage dead-letters it.

Worked example (``route: {field: tenant, map: {acme: a, "7": b}, unknown: dead_letter}``)::

    >>> parts, rejects = Router(route, "a", ("a", "b"), JsonCodec()).split(chunk)
    >>> {name: len(part) for name, part in parts.items()}  # {"tenant":"acme"} x2, {"tenant":7}
    {'a': 2, 'b': 1}
    >>> rejects[0][0]  # {"tenant":"zeta"}
    RouteError("route.field 'tenant' is 'zeta': route.map names no model for it")
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import repeat
from typing import Any

import numpy as np

from streamer.config import Config, RouteConfig, default_model
from streamer.errors import DeserializeError, RecordError, RouteError, detach
from streamer.formats.codec import Codec
from streamer.formats.columnar.field_text import as_text, field_reader
from streamer.pipeline.records import Messages, Origin

Reject = tuple[RecordError, Origin]
_FAILED = -2  # the event did not decode: its reject is made
_UNKNOWN = -1  # no model for its value: a dead letter

__all__ = ["Router", "as_text", "field_of"]


def field_of(payload: Mapping[str, Any], path: Sequence[str]) -> Any:
    """The value at a dotted ``path`` of a decoded event (None: a part of it is missing)."""
    value: Any = payload
    for name in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(name)
    return value


class Router:
    """The route of one processor: which of ``lanes`` (the models it scores with) each event goes to."""

    def __init__(self, route: RouteConfig, default: str, lanes: Sequence[str], decoder: Codec) -> None:
        assert route.field is not None, "a route has a field"
        self.lanes = tuple(lanes)
        self._field, self._path, self._decoder = route.field, route.field.split("."), decoder
        at = {name: i for i, name in enumerate(self.lanes)}
        self._map = {value: at[name] for value, name in route.map.items()}
        self._unknown = _UNKNOWN if route.unknown == "dead_letter" else at[default]
        self._fast = field_reader(decoder, self._path)

    @classmethod
    def of(cls, cfg: Config, lanes: Sequence[str], decoder: Codec) -> Router | None:
        """``cfg``'s route over ``lanes`` (the models it scores with, config.route_models); None without one."""
        return None if cfg.route.field is None else cls(cfg.route, default_model(cfg), lanes, decoder)

    def split(self, chunk: Messages) -> tuple[dict[str, Messages], list[Reject]]:
        """The chunk's part for each model that has rows (in lane order, each in the chunk's
        order), and the rejects: undecodable events, and unknown values when they are dead letters."""
        items, n = chunk.items, len(chunk)
        values = [m.value() for m in items]
        texts: list[str | None] = [None] * n
        ok = np.zeros(n, bool)
        if self._fast is not None:
            texts, ok = self._fast.read(values)
        get, unknown = self._map.get, self._unknown
        lane = np.fromiter(map(get, texts, repeat(unknown)), np.int64, n)  # type: ignore[arg-type]
        failed: dict[int, RecordError] = {}
        for i in np.flatnonzero(~ok).tolist():  # the reference's rows
            try:
                texts[i] = self._read(values[i])
                lane[i] = get(texts[i], unknown)  # type: ignore[arg-type]
            except RecordError as exc:
                failed[i], lane[i] = detach(exc), _FAILED
        rejects: list[Reject] = [(failed.get(i) or self._unknown_error(texts[i]), items[i])
                                 for i in np.flatnonzero(lane < 0).tolist()]
        if n and lane[0] >= 0 and (lane == lane[0]).all():  # one model: the chunk as it is
            return {self.lanes[int(lane[0])]: chunk}, rejects
        parts = {}
        for i, name in enumerate(self.lanes):
            idx = np.flatnonzero(lane == i)
            if len(idx):
                parts[name] = chunk.take(idx)
        return parts, rejects

    def _unknown_error(self, text: str | None) -> RouteError:
        if text is None:
            return RouteError(f"route.field {self._field!r} is missing or null: no model for it")
        return RouteError(f"route.field {self._field!r} is {text!r}: route.map names no model for it")

    def _read(self, value: bytes | None) -> str | None:
        """The route field's text in one event's bytes, by the reference (raises the decode stage's error)."""
        if value is None:
            raise DeserializeError("tombstone (null value): nothing to score")
        return as_text(field_of(self._decoder.decode(value), self._path))
