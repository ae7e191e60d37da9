"""Columnar decode of protobuf-confluent events with named fields: one upb parse per message, then
each field the contract reads gathered for all rows at once with getters compiled once per
message type, straight into the model's typed inputs.

The fast path beside the reference (``ConfluentProtobufCodec.decode``, whose ``as_mapping`` builds
every field of every message as Python values, then ``EventValidator.to_record``). Exact or step
aside: a row lands in ``DecodedColumns.rows`` only when its record is certain to equal the
reference's; any other row (bad framing, an unknown schema id, bytes that do not parse, a value
convert.py does not take) goes to ``fallback``, where the reference gives the same record or the
same dead letter.

A message type is compiled per (schema id, message indexes) the first time it is seen. It walks
when the id and time fields are singular string and integer fields (the entity a string field, or
absent: ""), and each input path names singular message fields down to a scalar (a float, an
integer, a bool, a string, or an enum feeding a string input: its symbol), or a repeated number
feeding an ``[N, k]`` input whole. Otherwise its rows go to the reference. As in ``as_mapping``,
a scalar not sent reads as proto3's default, and an absent message field on a dotted path reads
as null (the input's fill).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import numpy as np
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from streamer.config import InputConfig
from streamer.formats.columnar.convert import convert, convert_arrays
from streamer.formats.columnar.walk import DecodedColumns
from streamer.formats.protobuf import ConfluentProtobufCodec, message_indexes
from streamer.model.contract import Contract, InputPlan
from streamer.model.signature import Columns

F = FieldDescriptor
_INTS = {F.TYPE_INT32, F.TYPE_INT64, F.TYPE_SINT32, F.TYPE_SINT64, F.TYPE_SFIXED32, F.TYPE_SFIXED64,
         F.TYPE_UINT32, F.TYPE_UINT64, F.TYPE_FIXED32, F.TYPE_FIXED64}
_SCALARS = _INTS | {F.TYPE_FLOAT, F.TYPE_DOUBLE, F.TYPE_BOOL, F.TYPE_STRING}
_NUMBERS = _INTS | {F.TYPE_FLOAT, F.TYPE_DOUBLE}
_INT64_MAX = 2**63 - 1
Gather = Callable[[list[Any]], list[Any]]  # the messages -> one value per message


@dataclass(frozen=True, slots=True)
class _Layout:
    """One message type's compiled getters: the roles, and each input's values per path."""

    parse: Callable[[bytes], Any]
    event_id: Gather
    entity_id: Gather | None  # None: the type has no entity field ("")
    event_time: Gather
    inputs: tuple[tuple[InputPlan, tuple[Gather, ...]], ...]


class ProtobufColumns:
    """Decodes chunks of protobuf-confluent events for one input config and contract."""

    def __init__(self, codec: ConfluentProtobufCodec, cfg: InputConfig, contract: Contract) -> None:
        self._codec, self._cfg, self._inputs = codec, cfg, contract.inputs
        self._layouts: dict[tuple[bytes, tuple[int, ...]], _Layout | None] = {}

    @classmethod
    def compile(cls, codec: ConfluentProtobufCodec, cfg: InputConfig, contract: Contract) -> ProtobufColumns | None:
        """A decoder for ``contract``'s inputs, or None where the reference must go."""
        if len({cfg.time_field, cfg.id_field, cfg.entity_field}) < 3:
            return None
        return cls(codec, cfg, contract)

    def decode(self, values: Sequence[bytes | None]) -> DecodedColumns:
        groups: dict[tuple[bytes, tuple[int, ...]], tuple[list[int], list[int]]] = {}
        limit = self._cfg.max_message_bytes
        key: tuple[bytes, tuple[int, ...]]
        for i, v in enumerate(values):
            if v is None or len(v) < 6 or len(v) > limit or v[0] != 0:
                continue
            if v[5] == 0:  # indexes [0], as Confluent's serializers write the file's first message
                key, pos = (v[1:5], (0,)), 6
            else:
                try:
                    path, pos = message_indexes(v)
                except Exception:  # noqa: BLE001 - the reference says why
                    continue
                key = (v[1:5], path)
            rows, starts = groups.setdefault(key, ([], []))
            rows.append(i)
            starts.append(pos)
        parts = []
        for key, (rows, starts) in groups.items():
            layout = self._layout(key)
            if layout is not None:
                parts.append(self._part(layout, values, rows, starts))
        return _join(parts, len(values), self._inputs)

    def _layout(self, key: tuple[bytes, tuple[int, ...]]) -> _Layout | None:
        if key not in self._layouts:
            try:
                schema = self._codec.schema(int.from_bytes(key[0], "big"))
            except Exception:  # noqa: BLE001 - unknown id or registry away: the reference raises it per row
                return None  # not cached: a registry that comes back serves the id later
            try:
                message = schema.message_class(key[1])
            except Exception:  # noqa: BLE001 - no such message in the file: the reference says so
                message = None
            self._layouts[key] = None if message is None else _compile(message, self._cfg, self._inputs)
        return self._layouts[key]

    def _part(self, layout: _Layout, values: Sequence[bytes | None], rows: list[int],
              starts: list[int]) -> tuple[np.ndarray, Columns, list[str], list[str], np.ndarray]:
        """The rows of one message type that parse and convert: (rows, columns, ids, entities, times)."""
        took: list[int] = []
        messages: list[Any] = []
        parse = layout.parse
        for i, pos in zip(rows, starts):
            try:
                messages.append(parse(values[i][pos:]))  # type: ignore[index]
            except Exception:  # noqa: BLE001 - DecodeError and what else upb raises: the reference's to say
                continue
            took.append(i)
        n = len(messages)
        ok = np.ones(n, bool)
        times_list = layout.event_time(messages)
        try:
            times = np.array(times_list, np.int64)
        except OverflowError:  # a uint64 past int64: the reference keeps it as a Python int
            big = np.array([t > _INT64_MAX for t in times_list], bool)
            ok &= ~big
            times = np.array([0 if b else t for t, b in zip(times_list, big.tolist())], np.int64)
        columns: dict[str, np.ndarray] = {}
        for plan, gathers in layout.inputs:
            col, aside = _column(plan, [g(messages) for g in gathers])
            ok &= ~aside
            columns[plan.spec.name] = col
        keep = np.flatnonzero(ok)
        klist = keep.tolist()
        ids = layout.event_id(messages)
        entities = layout.entity_id(messages) if layout.entity_id is not None else [""] * n
        return (np.array(took, np.intp)[keep], Columns(columns)[keep], [ids[j] for j in klist],
                [entities[j] for j in klist], times[keep])


def _column(plan: InputPlan, values: list[list[Any]]) -> tuple[np.ndarray, np.ndarray]:
    """One input's tensor from its paths' values, and the mask of rows that step aside."""
    if not plan.source.stacked and plan.width != 1:
        col, aside = convert_arrays(values[0], plan.width, plan.spec.element, plan.fill)
    else:
        parts = []
        aside = np.zeros(len(values[0]), bool)
        for v in values:
            part, more = convert(v, plan.spec.element, plan.fill)
            parts.append(part)
            aside |= more
        col = parts[0][:, None] if len(parts) == 1 else np.stack(parts, axis=1)
    return (col[:, 0] if len(plan.spec.shape) == 1 else col), aside


def _join(parts: list[tuple[np.ndarray, Columns, list[str], list[str], np.ndarray]], k: int,
          inputs: tuple[InputPlan, ...]) -> DecodedColumns:
    """The message types' parts as one chunk, in the order of the values."""
    if len(parts) == 1:
        rows, cols, ids, entities, times = parts[0]
    elif parts:
        at = np.concatenate([p[0] for p in parts])
        order = np.argsort(at, kind="stable")
        rows, cols = at[order], Columns.join([p[1] for p in parts])[order]
        ids = [x for p in parts for x in p[2]]
        entities = [x for p in parts for x in p[3]]
        ids, entities = [ids[j] for j in order.tolist()], [entities[j] for j in order.tolist()]
        times = np.concatenate([p[4] for p in parts])[order]
    else:
        rows, ids, entities, times = np.empty(0, np.intp), [], [], np.empty(0, np.int64)
        cols = Columns({p.spec.name: _convert_empty(p) for p in inputs})
    rest = np.ones(k, bool)
    rest[rows] = False
    return DecodedColumns(rows, cols, ids, entities, times, np.flatnonzero(rest))  # type: ignore[arg-type]


def _convert_empty(plan: InputPlan) -> np.ndarray:
    col, _ = _column(plan, [[] for _ in plan.source.fields])
    return col


def _compile(message: Any, cfg: InputConfig, inputs: tuple[InputPlan, ...]) -> _Layout | None:
    """The getters of one message class, or None where its rows go to the reference."""
    d: Descriptor = message.DESCRIPTOR
    fields = d.fields_by_name
    event_id, event_time = fields.get(cfg.id_field), fields.get(cfg.time_field)
    entity = fields.get(cfg.entity_field)
    if event_id is None or event_time is None or not _singular(event_id, {F.TYPE_STRING}) \
            or not _singular(event_time, _INTS) or (entity is not None and not _singular(entity, {F.TYPE_STRING})):
        return None  # a role that defaults to the coordinates, or is not a string or an integer
    plans: list[tuple[InputPlan, tuple[Gather, ...]]] = []
    for plan in inputs:
        gathers = []
        for path in plan.source.fields:
            gather = _gather(d, path, plan)
            if gather is None:
                return None
            gathers.append(gather)
        plans.append((plan, tuple(gathers)))
    return _Layout(message.FromString, _plain(cfg.id_field),
                   None if entity is None else _plain(cfg.entity_field), _plain(cfg.time_field), tuple(plans))


def _singular(f: FieldDescriptor, types: set[int]) -> bool:
    return not f.is_repeated and f.type in types


def _plain(name: str) -> Gather:
    get = attrgetter(name)
    return lambda messages: list(map(get, messages))


def _gather(d: Descriptor, path: str, plan: InputPlan) -> Gather | None:
    """The values at a dotted path, as ``as_mapping`` + ``field_value`` read them; None where the
    path does not walk (the reference then decides)."""
    *above, last = path.split(".")
    node = d
    for part in above:
        f = node.fields_by_name.get(part)
        if f is None or f.is_repeated or f.type != F.TYPE_MESSAGE:
            return None
        node = f.message_type
    f = node.fields_by_name.get(last)
    array = not plan.source.stacked and plan.width != 1
    if f is None or f.type not in _SCALARS | {F.TYPE_ENUM}:
        return None
    if f.is_repeated != array or (array and f.type not in _NUMBERS):
        return None  # a list into a scalar input (or a scalar into an array input): the reference
    if f.type == F.TYPE_ENUM and plan.spec.element != "string":
        return None  # an enum's symbol or number into a number: the reference
    get = attrgetter(last)
    symbols = {v.number: v.name for v in f.enum_type.values} if f.type == F.TYPE_ENUM else None
    present = f.has_presence and not f.is_repeated

    def values(messages: list[Any]) -> list[Any]:
        objs: list[Any] = messages
        for part in above:  # an absent message is null, as as_mapping reads it
            objs = [getattr(o, part) if o is not None and o.HasField(part) else None for o in objs]
        if present:  # a proto3 optional or oneof member not sent is null, as as_mapping reads it
            got = [get(o) if o is not None and o.HasField(last) else None for o in objs]
        elif above:
            got = [get(o) if o is not None else None for o in objs]
        else:
            got = list(map(get, objs))
        if array:
            return [list(v) if v is not None else None for v in got]
        if symbols is not None:  # a number the enum does not name stays a number, as as_mapping gives it
            return [symbols.get(v, v) if v is not None else None for v in got]
        return got

    return values
