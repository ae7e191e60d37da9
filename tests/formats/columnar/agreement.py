"""The one check every columnar decoder's tests make: a row the fast path took equals the reference's."""

from __future__ import annotations

from typing import Any

from streamer.model.contract import Contract
from streamer.pipeline.records import SourceRecord


def assert_row_agrees(cols: Any, j: int, ref: Any, contract: Contract, shown: str, entity: bool = False) -> None:
    """Fast row ``j`` of ``cols`` against the reference's result ``ref`` for it: the reference
    accepted it, and the ids, time and every model input column are the same, bit for bit."""
    assert isinstance(ref, SourceRecord), f"row {shown} accepted, reference says {ref!r}"
    assert (cols.event_ids[j], int(cols.event_times[j])) == (ref.event_id, ref.event_time_ms)
    if entity:
        assert cols.entity_ids[j] == ref.entity_id
    want = contract.stack([ref.features])
    for name, column in want.arrays.items():
        got = cols.features.arrays[name][j:j + 1]
        assert got.dtype == column.dtype and got.shape == column.shape, (name, got, column)
        if column.dtype == object:
            assert got.tolist() == column.tolist()
        else:
            assert got.tobytes() == column.tobytes(), (name, got, column)  # -0.0 and every bit
