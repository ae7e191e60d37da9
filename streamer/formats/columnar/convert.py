"""Column conversion of decoded event values into a model input's element type, the columnar
twin of the contract's per-value ``exact`` (contract.py), reading the bounds of model/exact.py.

Exact or step aside: :func:`convert` gives a column and a mask of rows that must go to the
reference. A row steps aside whenever its value is not certain to convert as ``exact`` converts it
and be accepted (the reference then accepts it too, or dead-letters it naming the field):

    element   taken here                             steps aside
    float32   float (finite, |v| <= float32's max);  str, containers, ints past 2^24,
              int (|v| <= 2^24); bool (1 or 0)       floats beyond float32's range
    float64   float; int (|v| <= 2^53); bool         str, containers, ints past 2^53
    int64     int in range; bool                     float (whole or not), str, containers
    int32     int in range; bool                     the same
    bool      bool                                   any other type
    string    str                                    any other type

A null (None: JSON null, a missing field, an absent Protobuf message) takes the input's fill, or
steps aside when there is none. Floats are rounded to float32 by numpy's cast, as the contract's
``np.array(rows, float32)`` rounds them.

Worked example::

    >>> convert([1.5, None, 2**30, "x"], "float32", fill=0.0)
    (array([1.5, 0. , 0. , 0. ], dtype=float32), array([False, False,  True,  True]))
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from streamer.model.exact import EXACT_INT, F32_MAX, INT_RANGE
from streamer.model.signature import DTYPES

FLOAT, INT, BOOL, STR, NULL, OTHER = range(6)


class _Codes(dict[type, int]):
    """Python type -> code; a type not listed is OTHER."""

    def __missing__(self, key: type) -> int:
        return OTHER


CODES = _Codes({float: FLOAT, int: INT, bool: BOOL, str: STR, type(None): NULL})
# The codes each element takes on this path (everything else steps aside).
TAKES = {"float32": (FLOAT, INT, BOOL), "float64": (FLOAT, INT, BOOL), "int64": (INT, BOOL), "int32": (INT, BOOL),
         "bool": (BOOL,), "string": (STR,)}


def codes_of(values: Sequence[Any]) -> np.ndarray:
    """The type code of each value, int8."""
    return np.fromiter(map(CODES.__getitem__, map(type, values)), np.int8, len(values))


def convert(values: Sequence[Any], element: str, fill: Any) -> tuple[np.ndarray, np.ndarray]:
    """``values`` as a 1-D column of ``element`` and the mask of rows that step aside (see the
    module docstring); rows that step aside hold a placeholder."""
    n = len(values)
    codes = codes_of(values)
    null = codes == NULL
    taken = np.isin(codes, TAKES[element])
    aside = ~(taken | null) | (null if fill is None else False)
    dtype = DTYPES[element]
    if element == "string":
        out = np.empty(n, object)  # filled from a list of strings: numpy never reads one as a sequence
        if taken.all():
            out[:] = list(values)
        else:
            blank = fill if fill is not None else ""
            out[:] = [v if t else blank for v, t in zip(values, taken.tolist())]
        return out, aside
    if element == "bool":
        out = np.zeros(n, np.bool_)
        if taken.any():
            out[taken] = np.array(_subset(values, taken), np.bool_)
        if fill is not None:
            out[null] = fill
        return out, aside
    got = _numbers(values, codes, element)
    if got is None:  # an integer past int64: each row as it is, in Python
        return _one_by_one(values, codes, element, fill)
    numbers, bad = got
    aside |= bad
    out = numbers.astype(dtype)
    if fill is not None:
        out[null] = fill
    return out, aside


def _numbers(values: Sequence[Any], codes: np.ndarray, element: str) -> tuple[np.ndarray, np.ndarray] | None:
    """The taken values as float64 (a float element) or int64 (an int element), 0 in the other
    rows, and the mask of taken values out of bounds (0 too); None when an integer does not fit
    int64 (numpy's OverflowError). Integers are checked as integers, before any rounding."""
    n = len(values)
    floating = element in EXACT_INT
    out = np.zeros(n, np.float64 if floating else np.int64)
    bad = np.zeros(n, bool)
    ints = (codes == INT) | (codes == BOOL)  # a bool is the integer 1 or 0 (exact.py's table)
    if ints.any():
        lo, hi = (-EXACT_INT[element], EXACT_INT[element]) if floating else INT_RANGE[element]
        try:
            got = np.array(_subset(values, ints), np.int64)
        except OverflowError:
            return None
        wrong = (got < lo) | (got > hi)
        bad[ints] = wrong
        out[ints] = np.where(wrong, 0, got)
    floats = codes == FLOAT
    if floating and floats.any():
        got = np.array(_subset(values, floats), np.float64)
        wrong = ~np.isfinite(got)
        if element == "float32":
            wrong |= np.abs(got) > F32_MAX
        bad[floats] = wrong
        out[floats] = np.where(wrong, 0, got)
    return out, bad


def _subset(values: Sequence[Any], mask: np.ndarray) -> Sequence[Any]:
    """The values where ``mask`` is set (all of them without a copy when it is set everywhere)."""
    return values if mask.all() else [v for v, m in zip(values, mask.tolist()) if m]


def _one_by_one(values: Sequence[Any], codes: np.ndarray, element: str, fill: Any) -> tuple[np.ndarray, np.ndarray]:
    """:func:`convert` value by value, for a column holding an integer past int64 or a double."""
    aside = np.zeros(len(values), bool)
    fixed: list[Any] = []
    for i, (v, c) in enumerate(zip(values, codes.tolist())):
        if c == INT and not _int_fits(v, element):
            aside[i] = True
            fixed.append(None)
        else:
            fixed.append(v)
    out, more = convert(fixed, element, fill)
    aside |= more
    return out, aside


def _int_fits(v: int, element: str) -> bool:
    if element in EXACT_INT:
        return abs(v) <= EXACT_INT[element]
    lo, hi = INT_RANGE[element]
    return lo <= v <= hi


def convert_arrays(values: Sequence[Any], width: int, element: str, fill: Any) -> tuple[np.ndarray, np.ndarray]:
    """Array values feeding a ``[N, width]`` input whole: lists of ``width`` items, each converted
    as :func:`convert` does; a null array takes the fill in every column (contract.InputPlan.row)."""
    n = len(values)
    null = codes_of(values) == NULL
    whole = np.array([type(v) is list and len(v) == width for v in values], bool)
    aside = ~(whole | null) | (null if fill is None else False)
    flat: list[Any] = []
    blank = [None] * width
    for v, good in zip(values, whole.tolist()):
        flat.extend(v if good else blank)
    col, bad = convert(flat, element, fill)
    aside |= bad.reshape(n, width).any(axis=1) & whole
    return col.reshape(n, width), aside
