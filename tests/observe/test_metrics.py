"""The metrics object and its no-op twin."""

from __future__ import annotations

from typing import get_args

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

from streamer.errors import STAGES
from streamer.observe.metrics import Metrics, NullMetrics, observe_many
from streamer.pipeline.batcher import FlushReason

# Each recording call a metric may take, with arguments it accepts.
CALLS = {"inc": (1,), "dec": (1,), "set": (3.0,), "observe": (0.5,)}


def test_the_twin_has_every_attribute_of_metrics_and_takes_every_call_their_metrics_take() -> None:
    real, twin = Metrics(CollectorRegistry()), NullMetrics()
    assert set(vars(twin)) == set(vars(real))
    metrics = {name: m for name, m in vars(real).items() if isinstance(m, MetricWrapperBase)}
    assert len(metrics) > 20
    for name, metric in metrics.items():
        labels = [f"v{i}" for i in range(len(metric._labelnames))]
        target, null = (metric.labels(*labels), getattr(twin, name).labels(*labels)) if labels \
            else (metric, getattr(twin, name))
        assert null is getattr(twin, name)  # labels() returns the no-op itself, for chaining
        calls = [call for call in CALLS if hasattr(target, call)]
        assert calls, name
        for call in calls:
            getattr(target, call)(*CALLS[call])  # the call is valid on the real metric...
            getattr(null, call)(*CALLS[call])  # ...and taken by the twin
        getattr(twin, name).labels(labels=labels)  # by keyword too, as prometheus_client allows


def test_the_twin_records_nothing_and_knows_no_other_names() -> None:
    twin = NullMetrics()
    twin.dead_letters.labels("infer").inc()
    twin.end_to_end.observe(0.2)
    assert list(twin.registry.collect()) == []
    with pytest.raises(AttributeError):
        twin.no_such_metric  # noqa: B018 - a typo fails as it would on Metrics


def test_every_stage_and_flush_reason_has_a_series_from_the_start() -> None:
    registry = CollectorRegistry()
    Metrics(registry, prefix="t").of_model("m")
    stages = {s.labels["stage"] for m in registry.collect() if m.name == "t_dead_letters"
              for s in m.samples if s.name == "t_dead_letters_total"}
    reasons = {s.labels["reason"] for m in registry.collect() if m.name == "t_batch_flushes"
               for s in m.samples if s.name == "t_batch_flushes_total"}
    assert stages == set(STAGES)
    assert reasons == set(get_args(FlushReason)) == {"full", "timeout", "revoke", "shutdown"}


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(min_value=-1.0, max_value=1000.0, allow_nan=False), max_size=50))
def test_observe_many_counts_exactly_as_observe_one_by_one(values: list[float]) -> None:
    """Values on a bucket's bound, below the first and above the last included."""
    bounds = Metrics(CollectorRegistry()).end_to_end._upper_bounds
    values = values + [b for b in bounds if b != float("inf")][:3]
    one, many = Metrics(CollectorRegistry()), Metrics(CollectorRegistry())
    for v in values:
        one.end_to_end.observe(v)
    observe_many(many.end_to_end, np.array(values))
    observe_many(NullMetrics().end_to_end, np.array(values))  # the twin takes it too

    def samples(m: Metrics) -> list[tuple[str, dict[str, str], float]]:
        return [(s.name, s.labels, s.value) for f in m.registry.collect() if f.name.endswith("end_to_end_latency_seconds")
                for s in f.samples if not s.name.endswith("_created")]

    got, want = samples(many), samples(one)
    assert [(n, lab) for n, lab, _ in got] == [(n, lab) for n, lab, _ in want]
    assert all(g == pytest.approx(w) for (_, _, g), (_, _, w) in zip(got, want))
