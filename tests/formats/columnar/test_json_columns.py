"""The JSON fast path agrees with JsonCodec + EventValidator, record for record, or steps aside."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from streamer.config import InputConfig
from streamer.errors import DeserializeError, RecordError
from streamer.formats.columnar.json_columns import JsonColumns
from streamer.formats.json_events import JsonCodec
from streamer.model.contract import Contract
from streamer.pipeline.records import SourceRecord
from streamer.pipeline.validate import EventValidator
from streamer.testing import matrix_signature

N = 4


def config(**kw: Any) -> InputConfig:
    return InputConfig(topics=("t",), group_id="g", format="json", **kw)


def reference(value: bytes | None, cfg: InputConfig, at: int) -> SourceRecord | RecordError:
    try:
        if value is None:
            raise DeserializeError("tombstone")
        payload = JsonCodec(cfg.max_message_bytes).decode(value)
        return EventValidator(cfg, Contract.of(matrix_signature(N))).to_record(payload, "t", 0, at, None, 1234)
    except RecordError as exc:
        return exc


def check(values: Sequence[bytes | None], cfg: InputConfig) -> list[int]:
    cols = JsonColumns(cfg, N).decode(values)
    assert sorted(cols.rows.tolist() + cols.fallback.tolist()) == list(range(len(values)))
    assert cols.features.dtype == np.float32 and cols.features.shape == (len(cols.rows), N)
    for j, i in enumerate(cols.rows.tolist()):
        ref = reference(values[i], cfg, i)
        assert isinstance(ref, SourceRecord), f"row {i} {values[i]!r} accepted, reference says {ref!r}"
        assert (cols.event_ids[j], cols.entity_ids[j], int(cols.event_times[j])) == (
            ref.event_id, ref.entity_id, ref.event_time_ms)
        assert cols.features[j].tobytes() == ref.features.tobytes()
    return cols.rows.tolist()


def event(**over: Any) -> dict[str, Any]:
    return {"event_id": "e1", "entity_id": "a1", "event_time": 1_764_417_600_000,
            "features": [0.5, -1.25, 2.0, -0.0], **over}


def dumps(d: Any) -> bytes:
    return json.dumps(d).encode()


def test_plain_events_take_the_fast_path_and_traps_fall_back() -> None:
    cases: list[tuple[bytes | None, bool]] = [
        (dumps(event()), True),
        (dumps(event(entity_id=None) | {"entity_id": "x"}), True),
        (dumps({k: v for k, v in event().items() if k != "entity_id"}), True),  # entity defaults to ""
        (None, False),
        (b"", False),
        (b"[1, 2]", False),
        (b"\xef\xbb\xbf" + dumps(event()), False),  # a BOM: json refuses it
        (dumps(event(features=[1, 2, 3])), False),  # width
        (dumps(event(features=[[1], [2], [3], [4]])), False),  # nested: (4, 1), not (4,)
        (dumps(event(features=[1, 2, "x", 4])), False),
        (dumps(event(features=[1, 2, True, 4])), False),  # numpy would take a bool as 1.0: the reference refuses it
        (dumps(event(features=[1, 2, "3.5", 4])), False),  # and a numeric string as 3.5
        (b'{"event_id":"e","event_time":1,"features":[NaN,1,2,3]}', False),
        (b'{"event_id":"e","event_time":1,"features":[1e400,1,2,3]}', False),
        (dumps(event(event_time=True)), False),
        (dumps(event(event_time=1.0)), False),
        (dumps(event(event_time=2**63)), False),
        (dumps({k: v for k, v in event().items() if k != "event_time"}), False),  # defaults to the timestamp
        (dumps({k: v for k, v in event().items() if k != "event_id"}), False),  # defaults to coordinates
        (dumps(event(event_id=-(2**63) - 1)), False),  # orjson reads it as a float
        (dumps(event(event_id="\ud800")), False),
        (dumps(event(features=[2**70, 1, 2, 3])), False),  # json: an int past 2^24, refused
        (dumps(event()) + b" x", False),
    ]
    fast = check([v for v, _ in cases], config())
    assert fast == [i for i, (_, want) in enumerate(cases) if want]


def test_bounds_and_size_limit_fall_back() -> None:
    values = [dumps(event(features=[0.5, 0.1, 0.2, 0.3])), dumps(event(features=[5.0, 0.1, 0.2, 0.3])),
              dumps(event(features=[-5.0, 0.1, 0.2, 0.3])), dumps(event(features=[0.5] * 4, pad="x" * 500))]
    assert check(values, config(feature_min=-1.0, feature_max=1.0, max_message_bytes=400)) == [0]


def test_a_bad_item_never_gives_a_wrong_answer() -> None:
    """None reads as NaN in both paths, so that row falls back; so does a row with a string."""
    assert check([dumps(event()), dumps(event(features=[1, None, 2, 3]))], config()) == [0]
    assert check([dumps(event()), dumps(event(features=[1, "x", 2, 3])), dumps(event())], config()) == [0, 2]


json_values = st.recursive(st.none() | st.booleans() | st.integers(-(2**70), 2**70)
                           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=5),
                           lambda inner: st.lists(inner, max_size=3), max_leaves=6)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.fixed_dictionaries(
    {"features": st.one_of(st.lists(st.floats(width=32) | st.integers(-(2**40), 2**40), min_size=N, max_size=N),
                           json_values)},
    optional={"event_id": st.text(max_size=4) | json_values, "entity_id": st.text(max_size=4) | json_values,
              "event_time": st.integers(-(2**64), 2**64) | json_values, "extra": json_values}), max_size=8),
    st.sampled_from([None, -1e30, 0.0]))
def test_random_events_agree_with_the_reference(events: list[dict[str, Any]], low: float | None) -> None:
    values = [json.dumps(e, allow_nan=True).encode() for e in events]
    check(values, config(feature_min=low))
