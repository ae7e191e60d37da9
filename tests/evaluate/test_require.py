"""The --require gate: its parse errors (exit 2, key --require) and its verdicts' messages."""

from __future__ import annotations

import pytest

from streamer.errors import EXIT_CONFIG, EXIT_GATE, ConfigError
from streamer.evaluate.figures import Confusion, Summary
from streamer.evaluate.require import Condition, check, parse_require, shown

NO_OUTCOMES = "no outcomes: give --labels FIELD or --labels-from PATH"


def summary(metrics: dict[str, float], missing: dict[str, str] | None = None) -> Summary:
    return Summary(metrics, missing or {}, Confusion((), ()), (), "hour")


def test_terms_parse_with_or_without_spaces() -> None:
    conditions = parse_require("auc_delta>=-0.005, agreement >= 0.99 ,p99_abs_delta<2e-2,psi > 0")
    assert [(c.metric, c.op, c.bound) for c in conditions] == [
        ("auc_delta", ">=", -0.005), ("agreement", ">=", 0.99), ("p99_abs_delta", "<", 0.02), ("psi", ">", 0.0)]
    assert [str(c) for c in conditions][:3] == ["auc_delta >= -0.005", "agreement >= 0.99", "p99_abs_delta < 2e-2"]


@pytest.mark.parametrize(("text", "named"), [
    ("auc_dleta>=-0.005", "'auc_dleta>=-0.005' names an unknown metric 'auc_dleta'"),
    ("agreement=>0.99", "'agreement=>0.99' is not 'metric OP number'"),
    ("agreement>=high", "'agreement>=high' is not 'metric OP number'"),
    ("agreement>=0.99,", "'' is not 'metric OP number'"),
    ("agreement 0.99", "'agreement 0.99' is not 'metric OP number'"),
])
def test_a_bad_term_is_refused_naming_it_and_the_known_metrics(text: str, named: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_require(text)
    assert caught.value.key == "--require"
    assert caught.value.reason.startswith(named)
    assert "known metrics: events, agreement, " in caught.value.reason and "auc_delta" in caught.value.reason


def test_a_failing_condition_names_the_metric_its_value_and_its_bound() -> None:
    verdicts = check(parse_require("auc_delta >= -0.005, agreement>=0.99"),
                     summary({"auc_delta": -0.03121, "agreement": 0.995}))
    assert [(v.passed, v.value, v.message) for v in verdicts] == [
        (False, -0.03121, "auc_delta = -0.03121 fails auc_delta >= -0.005"),
        (True, 0.995, "agreement = 0.995 passes agreement >= 0.99"),
    ]


def test_a_metric_that_cannot_be_computed_fails_with_its_reason() -> None:
    [verdict] = check(parse_require("auc_delta>=-0.005"), summary({"events": 500.0}, {"auc_delta": NO_OUTCOMES}))
    assert (verdict.passed, verdict.value) == (False, None)
    assert verdict.message == f"auc_delta cannot be computed: {NO_OUTCOMES}"


@pytest.mark.parametrize(("op", "value", "passed"), [
    (">=", 0.99, True), (">", 0.99, False), ("<=", 0.99, True), ("<", 0.99, False), ("<", 0.98, True)])
def test_each_operator_compares_as_written(op: str, value: float, passed: bool) -> None:
    [verdict] = check([Condition("agreement", op, 0.99, "0.99")], summary({"agreement": value}))
    assert verdict.passed is passed


def test_a_value_near_its_bound_is_never_printed_equal_to_it() -> None:
    assert shown(0.98996, 0.99) == "0.98996"
    assert shown(-0.0312, -0.005) == "-0.0312"
    assert shown(0.99, 0.99) == "0.99"


def test_the_gate_has_its_own_exit_code() -> None:
    assert EXIT_GATE == 5 and EXIT_GATE != EXIT_CONFIG
