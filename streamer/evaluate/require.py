"""The promotion gate of ``evaluate --require``: conditions on the metrics, parsed before anything is
scored, and a verdict for each once the summary exists.

>>> [str(c) for c in parse_require("auc_delta>=-0.005, agreement >= 0.99")]
['auc_delta >= -0.005', 'agreement >= 0.99']
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from dataclasses import dataclass

from streamer.errors import ConfigError
from streamer.evaluate.figures import METRICS, Summary

OPERATORS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt}
_TERM = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*(>=|<=|>|<)\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*")


@dataclass(frozen=True, slots=True)
class Condition:
    """``metric OP bound``; ``bound_text`` is the bound as written, so messages repeat it."""

    metric: str
    op: str
    bound: float
    bound_text: str

    def __str__(self) -> str:
        return f"{self.metric} {self.op} {self.bound_text}"

    def holds(self, value: float) -> bool:
        return OPERATORS[self.op](value, self.bound)


@dataclass(frozen=True, slots=True)
class Verdict:
    """One condition checked: the metric's value (None when it cannot be computed) and the message."""

    condition: Condition
    value: float | None
    passed: bool
    message: str


def parse_require(text: str) -> tuple[Condition, ...]:
    """Comma-separated ``metric OP number`` terms, OP one of >=, <=, >, <, spaces allowed.

    Raises ConfigError("--require", ...) naming the bad term and the known metrics.
    """
    known = "known metrics: " + ", ".join(METRICS)
    conditions = []
    for term in text.split(","):
        found = _TERM.fullmatch(term)
        if found is None:
            raise ConfigError("--require", f"'{term.strip()}' is not 'metric OP number' (OP one of >=, <=, >, <); "
                                           f"{known}")
        metric, op, bound = found.groups()
        if metric not in METRICS:
            raise ConfigError("--require", f"'{term.strip()}' names an unknown metric '{metric}'; {known}")
        conditions.append(Condition(metric, op, float(bound), bound))
    return tuple(conditions)


def check(conditions: tuple[Condition, ...] | list[Condition], summary: Summary) -> list[Verdict]:
    """Each condition against the summary; a metric that cannot be computed fails with its reason."""
    verdicts = []
    for c in conditions:
        value = summary.metrics.get(c.metric)
        if value is None:
            why = summary.missing.get(c.metric, "not computed")
            verdicts.append(Verdict(c, None, False, f"{c.metric} cannot be computed: {why}"))
            continue
        passed = c.holds(value)
        verdicts.append(Verdict(c, value, passed, f"{c.metric} = {shown(value, c.bound)} "
                                                  f"{'passes' if passed else 'fails'} {c}"))
    return verdicts


def shown(value: float, bound: float) -> str:
    """The value in four significant digits, more where four would print it equal to the bound
    (0.98996 against 0.99 reads 0.98996, never a failing 0.99)."""
    for digits in (4, 6, 10, 17):
        text = f"{value:.{digits}g}"
        if value == bound or float(text) != bound:
            return text
    return repr(value)
