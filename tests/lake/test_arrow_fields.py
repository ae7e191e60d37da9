"""The Arrow fast path of `streamer score` agrees with the per-row reference, or steps aside.

Property tests over the JSON fast path's generated contracts (tests/formats/columnar/test_json_fields.py)
and generated tables: Arrow infers each column's type from the generated values (doubles, int64,
bools, strings, lists, structs, nulls), and every row the fast path takes equals
``EventValidator.to_record`` of the same row read back as a dict, bit for bit.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from streamer.errors import RecordError
from streamer.lake.arrow_fields import ArrowFields
from streamer.model.contract import FEATURES, Contract
from streamer.model.signature import Signature, TensorSpec
from streamer.pipeline.validate import EventValidator
from tests.formats.columnar.agreement import assert_row_agrees
from tests.formats.columnar.test_json_fields import ODD, OUT, PLAIN, PROPERTY, ROLES, _put, config, layout


@st.composite
def rows(draw: st.DrawFn, paths: dict[str, str]) -> dict[str, Any]:
    row: dict[str, Any] = {"event_id": draw(st.text(max_size=5)), "event_time": draw(st.integers(0, 2**62)),
                           "entity_id": draw(st.text(max_size=5))}
    for path, element in paths.items():
        if path.startswith("a"):
            value: Any = draw(st.one_of(st.lists(PLAIN[element], min_size=3, max_size=3),
                                        st.lists(PLAIN[element], min_size=2, max_size=4), st.none()))
        else:
            value = draw(PLAIN[element]) if draw(st.integers(0, 3)) else draw(ODD)
        _put(row, path, value)
    for role in ROLES:
        if draw(st.integers(0, 9)) == 0:
            row[role] = None
    return row


def table_of(items: list[dict[str, Any]]) -> pa.RecordBatch:
    try:
        table = pa.Table.from_pylist(items)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        assume(False)
    return table.combine_chunks().to_batches()[0]


def agree(contract: Contract, batch: pa.RecordBatch) -> Any:
    cfg = config()
    decoder = ArrowFields.compile(cfg, contract)
    assert decoder is not None
    cols = decoder.decode(batch)
    assert sorted(cols.rows.tolist() + cols.fallback.tolist()) == list(range(batch.num_rows))
    validator = EventValidator(cfg, contract)
    payloads = batch.to_pylist()
    for j, i in enumerate(cols.rows.tolist()):
        try:
            ref: Any = validator.to_record(payloads[i], "t", 0, i, None, 0)
        except RecordError as exc:
            ref = exc
        assert_row_agrees(cols, j, ref, contract, f"{i} {payloads[i]!r}", entity=True)
    return cols


@PROPERTY
@given(layout().flatmap(lambda lay: st.tuples(st.just(lay[0]), st.lists(rows(lay[1]), min_size=1, max_size=8))))
def test_a_table_decodes_as_the_reference_or_steps_aside(drawn: Any) -> None:
    contract, items = drawn
    agree(contract, table_of(items))


def feature_rows(values: list[Any]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([{"event_id": f"e{i}", "entity_id": "a", "event_time": i, "features": v}
                                       for i, v in enumerate(values)])


@pytest.mark.parametrize("values, taken", [
    ([[1.0, 2.0, 3.0], [0.5, -0.0, 1e30]], [0, 1]),
    ([[1.0, 2.0, float("nan")], [1.0, 2.0, 3.0]], [1]),  # NaN: the reference refuses it
    ([[1.0, 2.0], [1.0, 2.0, 3.0]], [1]),  # a row of the wrong width
    ([[1.0, 2.0, 1e39], [1.0, 2.0, 3.0]], [1]),  # past float32's range
    ([[1, 2, 2**24 + 1], [1, 2, 2**24]], [1]),  # an integer float32 does not hold exactly
    ([None, [1.0, 2.0, 3.0]], [1]),
])
def test_the_feature_array_takes_plain_rows_whole_and_leaves_the_rest(values: list[Any], taken: list[int]) -> None:
    contract = Contract.of(Signature((TensorSpec("x", "float32", (None, 3), ""),), OUT), None)
    assert contract.feature_column is not None
    cols = agree(contract, feature_rows(values))
    assert cols.rows.tolist() == taken
    assert cols.features.arrays[FEATURES].dtype == np.float32
