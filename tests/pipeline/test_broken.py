"""Reason classes and the wholly-broken verdict of a chunk (pipeline/broken.py)."""

from __future__ import annotations

import pytest

from streamer.errors import DeserializeError, ValidationError
from streamer.pipeline.broken import Broken, reason_class, wholly_broken


@pytest.mark.parametrize(("one", "other"), [
    ("field 'is_online' is bool True, not an integer; model input 'is_online' takes int64",
     "field 'is_online' is bool False, not an integer; model input 'is_online' takes int64"),
    ("field 'features' has 31 values, the model takes 32", "field 'features' has 7 values, the model takes 32"),
    ("field 'amount' is str 'abc', not a number", "field 'amount' is str \"it's\", not a number"),
    ("field 'f' holds -3.5, below input.feature_min 0", "field 'f' holds -1e-05, below input.feature_min 0"),
    ("field 'x' is None, not a finite float32", "field 'x' is nan, not a finite float32"),
    ("JSON Schema: $.items[3]: 'abc' is not of type 'number'", "JSON Schema: $.items[0]: 'd' is not of type 'number'"),
])
def test_rows_that_fail_the_same_check_on_the_same_field_share_a_class(one: str, other: str) -> None:
    assert one != other and reason_class(one) == reason_class(other)


@pytest.mark.parametrize(("one", "other"), [
    ("field 'a' is null or missing and model.inputs.a has no fill value",
     "field 'b' is null or missing and model.inputs.b has no fill value"),  # another field
    ("field 'a' is str 'x', not a number", "field 'a' is 3.5, not a whole number"),  # another check
    ("field 'f' holds 5, above input.feature_max 1", "field 'f' holds -5, below input.feature_min 0"),
    ("field 'a' is str 'abcdefgh", "field 'a' is str 'abcdxyz"),  # cut short: the value stays, never alike
])
def test_another_field_or_another_check_is_another_class(one: str, other: str) -> None:
    assert reason_class(one) != reason_class(other)


def test_a_message_without_row_values_is_its_own_class() -> None:
    message = "field 'amount' is null or missing and model.inputs.amount has no fill value"
    assert reason_class(message) == message


def not_ints(n: int) -> list[tuple[ValidationError, None]]:
    """``n`` rejects of one class, their values differing from row to row."""
    return [(ValidationError(f"field 'is_online' is bool {i % 2 == 0}, not an integer"), None) for i in range(n)]


def test_a_chunk_is_wholly_broken_only_when_no_row_passed_and_every_reject_failed_validation_alike() -> None:
    assert wholly_broken(0, not_ints(4)) == Broken("field 'is_online' is bool …, not an integer",
                                                  "field 'is_online' is bool True, not an integer")
    assert wholly_broken(1, not_ints(4)) is None  # a row passed
    assert wholly_broken(0, []) is None  # nothing read
    assert wholly_broken(0, [*not_ints(2), (DeserializeError("truncated"), None)]) is None  # another stage
    assert wholly_broken(0, [*not_ints(2), (ValidationError("field 'y' holds NaN or infinity"), None)]) is None
