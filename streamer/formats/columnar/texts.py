"""A column of strings kept as UTF-8 bytes, from the columnar decoder to the columnar encoder.

An event's ids are read from its Avro bytes and written into its prediction's Avro bytes; as
Python strings each one cost a decode, a ``str`` object and an encode. :class:`Texts` holds them
as one byte buffer (the column's bytes, gathered once from the chunk), a start and a size per
string: taking rows, joining batches and handing the encoder its bytes are numpy operations, and
a string is decoded only where a per-row path asks for one (``texts[i]``, iteration). Only ASCII spans are held so:
every one is valid UTF-8 on its own, as fastavro's strict decoding requires; the decoder gives a
list of ``str`` otherwise.

Worked example: a buffer ``b"..e1..acct-9.."`` with starts ``[2, 6]`` and sizes ``[2, 6]`` is the
column ``["e1", "acct-9"]``; ``texts[[1]]`` is ``Texts`` of ``["acct-9"]`` over the same buffer,
and ``texts.blob()`` is ``(b"e1acct-9", [2, 6])``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np


class Texts(Sequence[str]):
    """Strings as spans of one uint8 buffer; behaves as a read-only sequence of ``str``."""

    __slots__ = ("buf", "sizes", "starts")

    def __init__(self, buf: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> None:
        self.buf, self.starts, self.sizes = buf, starts.astype(np.int64, copy=False), sizes.astype(np.int64, copy=False)

    def __len__(self) -> int:
        return len(self.starts)

    @overload
    def __getitem__(self, idx: int) -> str: ...

    @overload
    def __getitem__(self, idx: slice | np.ndarray | list[int]) -> Texts: ...

    def __getitem__(self, idx: Any) -> Any:
        if isinstance(idx, (int, np.integer)):
            start = int(self.starts[idx])
            return self.buf[start:start + int(self.sizes[idx])].tobytes().decode("ascii")
        return Texts(self.buf, self.starts[idx], self.sizes[idx])

    def __iter__(self) -> Iterator[str]:
        raw = self.buf.tobytes() if len(self.starts) > 64 else None
        for start, size in zip(self.starts.tolist(), self.sizes.tolist()):
            yield (raw[start:start + size] if raw is not None
                   else self.buf[start:start + size].tobytes()).decode("ascii")

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, (str, bytes)):
            return len(other) == len(self) and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Texts({list(self)!r})"

    def blob(self) -> tuple[bytes, np.ndarray]:
        """The strings' bytes back to back, and each one's size: one gather for the column."""
        total = int(self.sizes.sum())
        if total == 0:
            return b"", self.sizes
        begin = np.cumsum(self.sizes) - self.sizes  # where each string starts in the blob
        first = int(self.starts[0])
        if (self.starts - begin == first).all():  # back to back already (a column as decoded)
            return self.buf[first:first + total].tobytes(), self.sizes
        where = np.arange(total, dtype=np.int64) + np.repeat(self.starts - begin, self.sizes)
        return self.buf[where].tobytes(), self.sizes

    @staticmethod
    def join(parts: Sequence[Sequence[str]]) -> Sequence[str]:
        """The columns one after the other: a Texts when every part is one, else a list."""
        texts = [p for p in parts if isinstance(p, Texts)]
        if len(texts) == len(parts):
            blobs = [p.blob() for p in texts]
            sizes = np.concatenate([s for _, s in blobs]) if blobs else np.empty(0, np.int64)
            return Texts(np.frombuffer(b"".join(b for b, _ in blobs), np.uint8), np.cumsum(sizes) - sizes, sizes)
        return [t for p in parts for t in p]


def ascii_texts(buf: np.ndarray, starts: np.ndarray, stops: np.ndarray) -> Texts | None:
    """The spans ``[starts, stops)`` of ``buf`` as Texts over a buffer of their own (the chunk's
    is not kept alive by its ids), or None when one holds a non-ASCII byte."""
    blob, sizes = Texts(buf, starts, stops - starts).blob()
    if not blob.isascii():
        return None
    return Texts(np.frombuffer(blob, np.uint8), np.cumsum(sizes) - sizes, sizes)
