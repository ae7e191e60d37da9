"""A job worker's metrics: what each call the worker makes leaves on the registry."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from streamer.observe.jobs import FINAL_STATES, JobMetrics
from streamer.observe.metrics import GroupRegistry

G = "streamer-jobs"


def meters() -> tuple[CollectorRegistry, JobMetrics]:
    registry = CollectorRegistry()
    return registry, JobMetrics(registry, G)


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, {"group": G, **labels})


def test_states_follow_the_status_topic_and_a_state_left_empty_reads_zero() -> None:
    registry, m = meters()
    m.states({"queued": 3, "running": 1, "failed": 2})
    assert sample(registry, "streamer_jobs", state="queued") == 3
    assert sample(registry, "streamer_jobs", state="failed") == 2
    m.states({"queued": 1, "completed": 3})  # the running one completed, the failed ones retried
    assert sample(registry, "streamer_jobs", state="queued") == 1
    assert sample(registry, "streamer_jobs", state="completed") == 3
    assert sample(registry, "streamer_jobs", state="running") == 0
    assert sample(registry, "streamer_jobs", state="failed") == 0


def test_started_and_finished_observe_time_queued_and_duration_by_final_state() -> None:
    registry, m = meters()
    for state in FINAL_STATES:  # present before the first job ends, for dashboards and alerts
        assert sample(registry, "streamer_job_duration_seconds_count", state=state) == 0
    assert sample(registry, "streamer_job_queued_seconds_count") == 0
    m.started(queued_s=0.3)
    m.started(queued_s=4.0)
    m.finished("completed", duration_s=42.0)
    m.finished("failed", duration_s=2.0)
    assert sample(registry, "streamer_job_queued_seconds_count") == 2
    assert sample(registry, "streamer_job_queued_seconds_sum") == pytest.approx(4.3)
    assert sample(registry, "streamer_job_queued_seconds_bucket", le="0.5") == 1
    assert sample(registry, "streamer_job_duration_seconds_sum", state="completed") == 42.0
    assert sample(registry, "streamer_job_duration_seconds_bucket", state="completed", le="30.0") == 0
    assert sample(registry, "streamer_job_duration_seconds_bucket", state="completed", le="60.0") == 1
    assert sample(registry, "streamer_job_duration_seconds_count", state="failed") == 1
    assert sample(registry, "streamer_job_duration_seconds_count", state="expired") == 0


def test_progress_counts_rows_and_sets_the_running_jobs_gauges() -> None:
    registry, m = meters()
    m.progress(1000, rows_per_s=500.0, eta_s=60.0, deadline_s=1_800_000_000.0)
    m.progress(1500, rows_per_s=750.0, eta_s=40.0, deadline_s=1_800_000_000.0)
    assert sample(registry, "streamer_job_rows_total") == 2500
    assert sample(registry, "streamer_job_rows_per_second") == 750.0
    assert sample(registry, "streamer_job_eta_seconds") == 40.0
    assert sample(registry, "streamer_job_deadline_timestamp_seconds") == 1_800_000_000.0


def test_an_unknown_total_or_no_window_leaves_no_eta_or_deadline_series() -> None:
    registry, m = meters()
    m.progress(10, rows_per_s=5.0, eta_s=30.0, deadline_s=1_800_000_000.0)
    m.progress(10, rows_per_s=5.0, eta_s=None, deadline_s=None)  # the next job: a topic range, no within
    assert sample(registry, "streamer_job_eta_seconds") is None
    assert sample(registry, "streamer_job_deadline_timestamp_seconds") is None
    assert sample(registry, "streamer_job_rows_per_second") == 5.0


def test_idle_clears_the_running_jobs_gauges_so_an_ended_job_never_looks_late() -> None:
    registry, m = meters()
    m.idle()  # idle before any job: nothing to clear, and no error
    m.progress(10, rows_per_s=5.0, eta_s=3600.0, deadline_s=1.0)  # late: the alert's condition
    m.finished("expired", duration_s=10.0)
    m.idle()
    for name in ("streamer_job_rows_per_second", "streamer_job_eta_seconds",
                 "streamer_job_deadline_timestamp_seconds"):
        assert sample(registry, name) is None, name
    assert sample(registry, "streamer_job_rows_total") == 10  # a counter stays


def test_on_a_group_registry_every_series_carries_the_group_once() -> None:
    registry = GroupRegistry(G)
    m = JobMetrics(registry, G)
    m.states({"queued": 1})
    m.progress(1, rows_per_s=1.0, eta_s=1.0, deadline_s=2.0)
    for family in registry.collect():
        for s in family.samples:
            assert s.labels["group"] == G, s
