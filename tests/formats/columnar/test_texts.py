"""Texts: string columns kept as the decoded chunk's bytes, equal to the strings they stand for."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from streamer.formats.columnar.texts import Texts, ascii_texts

ASCII = st.text(st.characters(min_codepoint=0, max_codepoint=127), max_size=12)


def column(strings: list[str], gap: bytes = b"..") -> Texts:
    """``strings`` laid out in one buffer with bytes between them, as a chunk's ids are."""
    raw, starts = b"", []
    for s in strings:
        raw += gap
        starts.append(len(raw))
        raw += s.encode()
    buf = np.frombuffer(raw + gap, np.uint8)
    start = np.array(starts, np.int64)
    got = ascii_texts(buf, start, start + np.array([len(s) for s in strings], np.int64))
    assert got is not None
    return got


@given(st.lists(ASCII, max_size=30), st.lists(ASCII, max_size=30), st.data())
def test_a_texts_column_is_its_strings_taken_joined_and_as_one_blob(a: list[str], b: list[str],
                                                                     data: st.DataObject) -> None:
    ta, tb = column(a), column(b, gap=b"x")
    assert ta == a and list(tb) == b and len(ta) == len(a)
    assert all(ta[i] == s for i, s in enumerate(a))
    idx = data.draw(st.lists(st.integers(0, max(0, len(a) - 1)), max_size=10)) if a else []
    assert ta[np.array(idx, np.intp)] == [a[i] for i in idx]
    assert ta[1:4] == a[1:4]
    joined = Texts.join([ta, tb])
    assert isinstance(joined, Texts) and joined == a + b
    blob, sizes = joined.blob()
    assert blob == "".join(a + b).encode() and sizes.tolist() == [len(s) for s in a + b]
    assert Texts.join([ta, list(b)]) == a + b  # a list among them: a list


def test_a_non_ascii_span_is_not_held_as_bytes() -> None:
    raw = np.frombuffer("ab\u00e9cd".encode(), np.uint8)
    assert ascii_texts(raw, np.array([0]), np.array([2])) is not None
    assert ascii_texts(raw, np.array([0, 2]), np.array([2, 4])) is None
