"""How a field's value is written into a Redis hash, and read back.

A string is written as it is (a website reads ``model_version`` as ``3``, not ``"3"``); anything
else (a number, a boolean, a list, null) as JSON. The kinds of a key space's fields are recorded
beside it (a run's record, a features prefix's ``_kinds`` hash), so a reader knows which fields
are strings: ``decode(b'3', 'str')`` is ``'3'``, ``decode(b'3', 'json')`` is ``3``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import orjson

Kind = Literal["str", "json"]


def encode(value: Any) -> bytes:
    if isinstance(value, str):
        return value.encode()
    return orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY)


def kind_of(value: Any) -> Kind:
    return "str" if isinstance(value, str) else "json"


def text(raw: bytes | str) -> str:
    """A reply's bytes as text (a client that decodes answers str already)."""
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def decode(raw: bytes | str, kind: Kind) -> Any:
    if kind == "str":
        return text(raw)
    return orjson.loads(raw)


def decode_hash(fields: Mapping[bytes | str, bytes | str], kinds: Mapping[str, Kind]) -> dict[str, Any]:
    """A hash read back: each field decoded by its kind (a field of no recorded kind: JSON when it
    parses as JSON, else the string)."""
    out: dict[str, Any] = {}
    for name, raw in fields.items():
        key = text(name)
        kind = kinds.get(key)
        if kind is None:
            try:
                out[key] = orjson.loads(raw)
            except orjson.JSONDecodeError:
                out[key] = decode(raw, "str")
        else:
            out[key] = decode(raw, kind)
    return out
