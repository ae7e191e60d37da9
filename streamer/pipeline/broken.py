"""Whether a decoded chunk is wholly broken: every row refused at ``validate`` for one reason class.

A *reason class* is a dead letter's message with the row's own values masked, so that rows which
fail the same way share it: the field names the message quotes (``field 'amount'``) are kept,
every other quoted literal becomes ``…``, every number ``#``, and the Python words a value
prints as (``True``, ``False``, ``None``, ``nan``, ``inf``) become ``…``. Two rows share a class
when the same field fails the same check, whatever the value in it. Examples::

    field 'amount' is null or missing and model.inputs.amount has no fill value
        -> (unchanged: nothing in it belongs to the row)
    field 'is_online' is bool True, not an integer; model input 'is_online' takes int64
        -> field 'is_online' is bool …, not an integer; model input … takes int64
    field 'features' has 31 values, the model takes 32
        -> field 'features' has # values, the model takes #

A message whose row-specific part cannot be masked (a literal cut short without its closing
quote) keeps it, and so differs from row to row: such rows never look alike, and are
dead-lettered as usual rather than held by mistake.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from streamer.errors import RecordError, ValidationError

_FIELD = re.compile(r"field '[^']*'")
_QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?(?![\w.])")
_WORD = re.compile(r"\b(?:True|False|None|nan|inf)\b")


def reason_class(message: str) -> str:
    """``message`` with the row's own values masked (the module docstring says how)."""
    parts = _FIELD.split(message)
    fields = _FIELD.findall(message)
    masked = [_WORD.sub("…", _NUMBER.sub("#", _QUOTED.sub("…", part))) for part in parts]
    out = masked[0]
    for field, part in zip(fields, masked[1:], strict=True):
        out += field + part
    return out


@dataclass(frozen=True, slots=True)
class Broken:
    """A chunk whose every row failed validation the same way: the reason class and one row's message."""

    reason_class: str
    example: str


def wholly_broken(passed: int, rejects: Sequence[tuple[RecordError, Any]]) -> Broken | None:
    """The chunk's verdict: :class:`Broken` when no row passed (``passed`` == 0) and every reject is
    a ``validate`` failure of one reason class; None otherwise (a row passed, nothing was read, or
    the rows failed at other stages or in different ways)."""
    if passed or not rejects or not all(isinstance(error, ValidationError) for error, _ in rejects):
        return None
    messages = {str(error) for error, _ in rejects}  # rows that fail alike often say the very same
    first = str(rejects[0][0])
    cls = reason_class(first)
    if any(reason_class(message) != cls for message in messages):
        return None
    return Broken(cls, first)
