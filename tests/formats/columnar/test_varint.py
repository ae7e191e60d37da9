"""The columnar varint reader: every row read as fastavro reads an Avro long, or refused."""

from __future__ import annotations

import io

import fastavro
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from streamer.formats.columnar.walk import PAD, Walk, varint
from streamer.formats.varint import zigzag

LONGS = st.one_of(st.integers(-2**63, 2**63 - 1),
                  st.integers(0, 64).flatmap(lambda bits: st.integers(-2**bits, 2**bits - 1)))


def spelled(n: int, extra: int) -> bytes:
    """``n`` as fastavro writes it, or with ``extra`` continuation bytes of zero bits (non-minimal)."""
    b = zigzag(n)
    if extra:
        b = b[:-1] + bytes([b[-1] | 0x80]) + b"\x80" * (extra - 1) + b"\x00"
    return b


MESSAGES = st.one_of(
    st.builds(spelled, LONGS, st.integers(0, 3)),
    st.builds(lambda n, cut: zigzag(n)[:cut], LONGS, st.integers(0, 10)),  # cut short
    st.binary(min_size=1, max_size=12),  # anything: an 11-byte run, a 10th byte past 64 bits
)


def fastavro_long(message: bytes) -> tuple[int, int] | None:
    """fastavro's value and the bytes it read, or None where it refuses the message."""
    if len(message) >= 10 and all(b >= 0x80 for b in message[:10]):
        return None  # no closing byte in 10: fastavro's reader would run on; the walk refuses it
    stream = io.BytesIO(message)
    try:
        value = fastavro.schemaless_reader(stream, "long", None)
    except (EOFError, ValueError, OverflowError, IndexError):
        return None
    assert isinstance(value, int)
    return value, stream.tell()


def walked(messages: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The varint of each message, each row's ok and the bytes it read."""
    sizes = np.array([len(m) for m in messages], np.int64)
    ends = np.cumsum(sizes)
    w = Walk(b"".join(messages) + PAD, ends - sizes, ends, np.ones(len(messages), bool))
    got = varint(w, np.arange(len(messages)))
    return got, w.ok, w.pos - (ends - sizes)


@settings(max_examples=300)
@given(st.lists(MESSAGES, min_size=1, max_size=40))
def test_a_row_read_is_what_fastavro_reads_and_what_it_refuses_is_refused(messages: list[bytes]) -> None:
    """A row the walk refuses goes to the reference (fastavro), so refusing is always safe."""
    got, ok, read = walked(messages)
    for i, m in enumerate(messages):
        want = fastavro_long(m)
        if want is None:
            assert not ok[i], m
        elif ok[i]:
            assert (int(got[i]), int(read[i])) == want, m


@given(st.lists(st.builds(spelled, LONGS, st.integers(0, 3)), min_size=1, max_size=40))
def test_every_long_fastavro_writes_is_read_on_the_fast_path(messages: list[bytes]) -> None:
    got, ok, read = walked(messages)
    assert [(int(g), int(r)) for g, r, m in zip(got, read, messages) if len(m) <= 10] == [
        fastavro_long(m) for m in messages if len(m) <= 10]
    assert all(ok[i] for i, m in enumerate(messages) if len(m) <= 10)
