"""The route stage: a consumed chunk split into one part per model, by the value of ``route.field``.

The value is looked up as text in ``route.map`` (a string as it is, a boolean as ``true`` or
``false``, any other value as Python's ``str`` writes it: ``7`` for the number 7). A value the map
does not name, or no value (the field missing or null), goes to the default model, or with
``route.unknown: dead_letter`` is a :class:`~streamer.errors.RouteError` whose reason names the
field and the value. An event that cannot be decoded is the ``deserialize`` dead letter the decode
stage would make of it. Each part keeps the chunk's order; the models' own decode stages read
their parts (pipeline/stages.py).

Reading the field: JSON (``input.format: json``) through msgspec with a type that holds only the
field, so the rest of the event is stepped over, not built; every other format (and a JSON event
msgspec refuses: NaN, a non-object above the field) through the input codec, as the reference.

Worked example (``route: {field: tenant, map: {acme: a, "7": b}, unknown: dead_letter}``)::

    >>> parts, rejects = Router(route, "a", ("a", "b"), JsonCodec()).split(chunk)
    >>> {name: len(part) for name, part in parts.items()}  # {"tenant":"acme"} x2, {"tenant":7}
    {'a': 2, 'b': 1}
    >>> rejects[0][0]  # {"tenant":"zeta"}
    RouteError("route.field 'tenant' is 'zeta': route.map names no model for it")
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
import numpy as np

from streamer.config import Config, RouteConfig, default_model
from streamer.errors import DeserializeError, RecordError, RouteError, detach
from streamer.formats.codec import Codec
from streamer.formats.json_events import JsonCodec
from streamer.pipeline.records import Messages, Origin

Reject = tuple[RecordError, Origin]
_FAILED = -2  # the event did not decode: its reject is made
_UNKNOWN = -1  # no model for its value


def as_text(value: Any) -> str | None:
    """A field's value as ``route.map`` names it (None: no value)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def field_of(payload: Mapping[str, Any], path: Sequence[str]) -> Any:
    """The value at a dotted ``path`` of a decoded event (None: a part of it is missing)."""
    value: Any = payload
    for name in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(name)
    return value


def _json_type(path: Sequence[str]) -> Any:
    """A msgspec type holding only the field at ``path`` (nested structs for a dotted path)."""
    inner: Any = Any
    for depth, name in reversed(list(enumerate(path))):
        struct = msgspec.defstruct(f"Route{depth}", [(name, inner | None, None)])
        inner = struct
    return inner


class Router:
    """The route of one processor: which of ``lanes`` (the models it scores with) each event goes to."""

    def __init__(self, route: RouteConfig, default: str, lanes: Sequence[str], decoder: Codec) -> None:
        assert route.field is not None, "a route has a field"
        self.lanes = tuple(lanes)
        self._field, self._path, self._decoder = route.field, route.field.split("."), decoder
        at = {name: i for i, name in enumerate(self.lanes)}
        self._map = {value: at[name] for value, name in route.map.items()}
        self._unknown = _UNKNOWN if route.unknown == "dead_letter" else at[default]
        self._json = msgspec.json.Decoder(_json_type(self._path)) if type(decoder) is JsonCodec else None

    @classmethod
    def of(cls, cfg: Config, lanes: Sequence[str], decoder: Codec) -> Router | None:
        """``cfg``'s route over ``lanes`` (the models it scores with, config.route_models); None without one."""
        return None if cfg.route.field is None else cls(cfg.route, default_model(cfg), lanes, decoder)

    def split(self, chunk: Messages) -> tuple[dict[str, Messages], list[Reject]]:
        """The chunk's part for each model that has rows (in lane order, each in the chunk's
        order), and the rejects: undecodable events, and unknown values when they are dead letters."""
        rejects: list[Reject] = []
        lane = np.fromiter((self._lane(m, rejects) for m in chunk.items), np.int64, len(chunk))
        if len(lane) and (lane == lane[0]).all() and lane[0] >= 0:  # one model: the chunk as it is
            return {self.lanes[int(lane[0])]: chunk}, rejects
        parts = {}
        for i, name in enumerate(self.lanes):
            idx = np.flatnonzero(lane == i)
            if len(idx):
                parts[name] = chunk.take(idx)
        return parts, rejects

    def _lane(self, message: Origin, rejects: list[Reject]) -> int:
        value = message.value()
        try:
            text = self._read(value)
        except RecordError as exc:
            rejects.append((detach(exc), message))
            return _FAILED
        at = self._map.get(text) if text is not None else None
        if at is not None:
            return at
        if self._unknown == _UNKNOWN:
            reason = (f"route.field {self._field!r} is {text!r}: route.map names no model for it" if text is not None
                      else f"route.field {self._field!r} is missing or null: no model for it")
            rejects.append((RouteError(reason), message))
            return _FAILED
        return self._unknown

    def _read(self, value: bytes | None) -> str | None:
        """The route field's text in one event's bytes (raises the decode stage's error)."""
        if value is None:
            raise DeserializeError("tombstone (null value): nothing to score")
        if self._json is not None:
            try:
                got: Any = self._json.decode(value)
                for name in self._path:
                    got = getattr(got, name) if got is not None else None
                return as_text(got)
            except (msgspec.DecodeError, msgspec.ValidationError):
                pass  # the reference decides: a dead letter, or a value msgspec does not read
        return as_text(field_of(self._decoder.decode(value), self._path))
