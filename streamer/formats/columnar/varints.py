"""Avro longs (zigzag varints) read for many rows at once, as fastavro's read_long reads each.

Worked example: the 6-byte timestamp ``80 a8 d7 a1 c9 65`` (1,745,000,000,000 ms). As a word,
little-endian, its high bits say which bytes continue; the lowest clear one (byte 5) closes the
number. The 7-bit groups below it are gathered by three masked shifts (pairs of bytes into 14
bits, pairs of those into 28, then 56), with no numpy step per byte: one step per byte lane cost
a timestamp ~0.1 us an event. A varint of 9 or 10 bytes (|n| >= 2**55) is read byte by byte.
"""

from __future__ import annotations

import numpy as np

# Each byte's 7 bits, gathered pairwise into 14, 28 and 56-bit lanes: (kept in place, moved, by).
_GATHER = [(np.uint64(0x007F007F007F007F), np.uint64(0x7F007F007F007F00), np.uint64(1)),
           (np.uint64(0x00003FFF00003FFF), np.uint64(0x3FFF00003FFF0000), np.uint64(2)),
           (np.uint64(0x000000000FFFFFFF), np.uint64(0x0FFFFFFF00000000), np.uint64(4))]
_HIGH_BITS = np.uint64(0x8080808080808080)
_ONE = np.uint64(1)


def long_varints(lanes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The value (int64) and length in bytes (-1: refused) of the varint that starts each row of
    ``lanes`` (uint8, 10 bytes a row, the bytes past a message's end included).

    Refused: no closing byte within 10, or a 10th byte that overflows 64 bits (fastavro's shift
    wraps there; the reference decides). Non-minimal encodings read as fastavro reads them."""
    x = np.ascontiguousarray(lanes[:, :8]).view("<u8").ravel()
    closing = ~x & _HIGH_BITS  # a clear high bit: a byte that closes the number
    low = closing & (~closing + _ONE)  # the lowest of them, the number's last byte (0: none in 8)
    x = x & (low - _ONE)  # the bits below it: the number's bytes, the closing one's 7 included
    for keep, move, shift in _GATHER:
        x = (x & keep) | ((x & move) >> shift)
    u = x.view(np.int64)
    value = (u >> 1) ^ -(u & 1)
    length = (np.frexp(low.astype(np.float64))[1] + 7) // 8  # bit 8k+7: k+1 bytes (a power of 2: exact)
    wide = np.flatnonzero(low == 0)
    if len(wide):
        value[wide], length[wide] = _wide(lanes[wide])
    return value, length


def _wide(lanes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Varints of 9 or 10 bytes (or none closing within 10): byte by byte."""
    last = np.full(len(lanes), 10)  # index of the closing byte; 10: none in reach
    for j in range(9, -1, -1):
        last[lanes[:, j] < 0x80] = j
    u = np.zeros(len(lanes), np.uint64)
    for j in range(int(np.minimum(last, 9).max()) + 1):
        u |= np.where(last >= j, lanes[:, j] & 0x7F, 0).astype(np.uint64) << np.uint64(7 * j)
    value = (u >> _ONE).view(np.int64) ^ -(u & _ONE).view(np.int64)
    bad = (last == 10) | ((last == 9) & (lanes[:, 9] > 1))  # past 64 bits: fastavro's shift wraps
    return value, np.where(bad, -1, last + 1)
