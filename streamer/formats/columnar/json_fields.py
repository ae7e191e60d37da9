"""Columnar decode of named-field JSON events: a chunk read straight into the model's typed inputs.

The fast path beside the reference (``JsonCodec.decode`` then ``EventValidator.to_record`` with
the contract's per-row conversion). Exact or step aside: a row lands in ``DecodedColumns.rows``
only when its record is certain to equal the reference's; any other row goes to ``fallback``,
where the reference gives the same record or the same dead letter.

msgspec decodes each message into a struct of only the fields the contract and the roles read
(the other fields are parsed and skipped, never built as Python objects); the values are then
gathered and converted column by column (convert.py). msgspec reads numbers as ``json`` does
(integers of any size as int, floats correctly rounded); it refuses NaN, infinities, numbers
past a double's range and lone surrogates, which ``json`` takes (those rows step aside). It does
not check the UTF-8 of the strings it skips, so a message that is not ASCII is checked by Python's
own decoder first. A message nested deeper than :data:`_DEPTH` brackets steps aside too
(``json`` has a recursion limit; msgspec another).

Steps aside besides (the reference fills these in from the message's coordinates, or refuses
them): no event id, no event time, an id or entity that is not a string, a time that is not an
int64 integer, and each value convert.py does not take.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter
from typing import Any

import msgspec
import numpy as np

from streamer.config import InputConfig
from streamer.formats.columnar.convert import STR, convert, convert_arrays
from streamer.formats.columnar.convert import codes_of as codes
from streamer.formats.columnar.walk import DecodedColumns
from streamer.model.contract import Contract, InputPlan
from streamer.model.signature import Columns

_INT64 = (-(2**63), 2**63 - 1)
_DEPTH = 400  # '[' and '{' in a message beyond which it steps aside, far below json's recursion limit
_SHORT = 2 * _DEPTH  # a message shorter than this cannot nest so deep: not counted


class JsonFields:
    """Decodes chunks of named-field JSON events for one input config and contract."""

    def __init__(self, cfg: InputConfig, inputs: tuple[InputPlan, ...]) -> None:
        self._cfg, self._inputs = cfg, inputs
        roles = (cfg.time_field, cfg.id_field, cfg.entity_field)
        keys = list(dict.fromkeys([*roles, *(p.split(".")[0] for plan in inputs for p in plan.source.fields)]))
        # A role's absence differs from its null (the reference's defaults): UNSET. A model
        # input's field reads a missing field as null: None.
        struct = msgspec.defstruct("Event", [(f"f{i}", Any, msgspec.UNSET if k in roles else None)
                                             for i, k in enumerate(keys)],
                                   rename={f"f{i}": k for i, k in enumerate(keys)})
        self._decoder = msgspec.json.Decoder(struct)
        self._get = {k: attrgetter(f"f{i}") for i, k in enumerate(keys)}

    @classmethod
    def compile(cls, cfg: InputConfig, contract: Contract) -> JsonFields | None:
        """A decoder for ``contract``'s inputs, or None where the reference must go."""
        if len({cfg.time_field, cfg.id_field, cfg.entity_field}) < 3:
            return None
        return cls(cfg, contract.inputs)

    def decode(self, values: Sequence[bytes | None]) -> DecodedColumns:
        cfg = self._cfg
        take: list[int] = []
        events: list[Any] = []
        decode = self._decoder.decode
        for i, value in enumerate(values):
            if value is None or len(value) > cfg.max_message_bytes:
                continue
            if not value.isascii():
                try:
                    value.decode("utf-8")
                except UnicodeDecodeError:
                    continue
            if len(value) >= _SHORT and value.count(b"[") + value.count(b"{") > _DEPTH:
                continue
            try:
                events.append(decode(value))
            except msgspec.DecodeError:  # ValidationError too: not an object
                continue
            take.append(i)
        n = len(take)
        ok = np.ones(n, bool)
        ids = list(map(self._get[cfg.id_field], events))
        ok &= codes(ids) == STR
        entity_col = list(map(self._get[cfg.entity_field], events))
        entity_codes = codes(entity_col)
        ok &= (entity_codes == STR) | np.array([e is msgspec.UNSET for e in entity_col], bool)
        times = list(map(self._get[cfg.time_field], events))
        time_ok = np.array([type(t) is int and _INT64[0] <= t <= _INT64[1] for t in times], bool)
        ok &= time_ok
        columns: dict[str, np.ndarray] = {}
        for plan in self._inputs:
            col, aside = self._column(plan, events)
            ok &= ~aside
            columns[plan.spec.name] = col
        keep = np.flatnonzero(ok)
        rows = np.array(take, np.intp)[keep]
        klist = keep.tolist()
        event_times = np.zeros(n, np.int64)
        if time_ok.any():
            event_times[time_ok] = [t for t, good in zip(times, time_ok.tolist()) if good]
        rest = np.ones(len(values), bool)
        rest[rows] = False
        return DecodedColumns(rows, Columns(columns)[keep],  # type: ignore[arg-type]
                              [ids[j] for j in klist],
                              [e if type(e) is str else "" for e in (entity_col[j] for j in klist)],
                              event_times[keep], np.flatnonzero(rest))

    def _column(self, plan: InputPlan, events: list[Any]) -> tuple[np.ndarray, np.ndarray]:
        """One input's tensor for the decoded events, and the mask of rows that step aside."""
        n = len(events)
        if not plan.source.stacked and plan.width != 1:
            (path,) = plan.source.fields
            col, aside = convert_arrays(self._values(path, events), plan.width, plan.spec.element, plan.fill)
        else:
            parts = []
            aside = np.zeros(n, bool)
            for path in plan.source.fields:
                part, more = convert(self._values(path, events), plan.spec.element, plan.fill)
                parts.append(part)
                aside |= more
            col = parts[0][:, None] if len(parts) == 1 else np.stack(parts, axis=1)
        return (col[:, 0] if len(plan.spec.shape) == 1 else col), aside

    def _values(self, path: str, events: list[Any]) -> list[Any]:
        """The value at a dotted path per event, None where it or a record above it is null or
        missing (contract.field_value)."""
        top, *rest = path.split(".")
        values = list(map(self._get[top], events))
        if msgspec.UNSET in values:  # (a field that is also a role)
            values = [None if v is msgspec.UNSET else v for v in values]
        for part in rest:
            values = [v.get(part) if type(v) is dict else None for v in values]
        return values
