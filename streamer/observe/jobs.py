"""A job worker's Prometheus metrics: jobs per state, each job's time queued and duration, and the
running job's rows, rate, time still needed and window's end.

Every series carries ``group`` (the workers' consumer group, ``jobs.group_id``), as the
processors' and the lag exporter's do, so the dashboard's group variable selects workers too. No
label value comes from a job's spec or payload: a job's id is never a label, and the running job's
gauges are one series per worker, cleared when it goes idle.

Example, what a worker records over one job::

    meters = JobMetrics(registry, "streamer-jobs")
    meters.states({"queued": 3, "running": 1})   # from the status topic
    meters.started(queued_s=4.2)
    meters.progress(50_000, rows_per_s=25_000.0, eta_s=38.0, deadline_s=1_796_518_800.0)
    meters.finished("completed", duration_s=41.5)
    meters.idle()
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# A job runs for seconds to a day; it waits for a worker from well under a second (an idle
# worker) to hours (a queue drained off-peak, a not_before).
DURATION_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0,
                    14400.0, 28800.0, 86400.0)
QUEUED_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
                  14400.0, 86400.0)
# The states a job ends in: their duration series exist at zero before the first such job.
FINAL_STATES = ("completed", "failed", "expired", "cancelled")


class JobMetrics:
    """Every metric of a job worker, registered on ``registry`` under ``prefix``, each labelled
    with ``group``."""

    def __init__(self, registry: CollectorRegistry, group: str, prefix: str = "streamer") -> None:
        p, g = prefix, ["group"]
        self.registry, self.group = registry, group
        self.jobs = Gauge(f"{p}_jobs", "Jobs in each state, as the status topic holds them (every worker of "
                          "the group reads the same topic)", ["group", "state"], registry=registry)
        self.rows = Counter(f"{p}_job_rows", "Rows this worker's jobs have scored", g, registry=registry)
        self.duration = Histogram(f"{p}_job_duration_seconds", "From a job's start on this worker to its end, "
                                  "by the state it ended in", ["group", "state"], buckets=DURATION_BUCKETS,
                                  registry=registry)
        self.queued = Histogram(f"{p}_job_queued_seconds", "From a job's submission to its start on this "
                                "worker", g, buckets=QUEUED_BUCKETS, registry=registry)
        self.rows_per_second = Gauge(f"{p}_job_rows_per_second", "The running job's rows per second "
                                     "(absent while the worker is idle)", g, registry=registry)
        self.eta = Gauge(f"{p}_job_eta_seconds", "Seconds the running job needs still at its rate (absent "
                         "while idle or while its total is unknown)", g, registry=registry)
        self.deadline = Gauge(f"{p}_job_deadline_timestamp_seconds", "End of the running job's completion "
                              "window, unix seconds (absent while idle or without a window)", g,
                              registry=registry)
        self._states: set[str] = set()
        self.rows.labels(group)
        self.queued.labels(group)
        for state in FINAL_STATES:
            self.duration.labels(group, state)

    def states(self, counts: Mapping[str, int]) -> None:
        """Jobs per state; a state counted before and missing from ``counts`` has none now."""
        for state in self._states - set(counts):
            self.jobs.labels(self.group, state).set(0)
        for state, count in counts.items():
            self.jobs.labels(self.group, state).set(count)
        self._states |= set(counts)

    def started(self, queued_s: float) -> None:
        """A job went running after ``queued_s`` seconds since its submission."""
        self.queued.labels(self.group).observe(max(queued_s, 0.0))

    def progress(self, rows: int, rows_per_s: float, eta_s: float | None, deadline_s: float | None) -> None:
        """The running job: ``rows`` scored since the last call, its rate, the seconds it needs still
        (None: its total is unknown) and its window's end in unix seconds (None: no window)."""
        self.rows.labels(self.group).inc(rows)
        self.rows_per_second.labels(self.group).set(rows_per_s)
        self._set_or_clear(self.eta, eta_s)
        self._set_or_clear(self.deadline, deadline_s)

    def finished(self, state: str, duration_s: float) -> None:
        """A job this worker ran ended in ``state`` (completed, failed, expired, cancelled)."""
        self.duration.labels(self.group, state).observe(max(duration_s, 0.0))

    def idle(self) -> None:
        """No job runs on this worker: its running job's gauges go (an ended job must not look late)."""
        for gauge in (self.rows_per_second, self.eta, self.deadline):
            self._set_or_clear(gauge, None)

    def _set_or_clear(self, gauge: Gauge, value: float | None) -> None:
        if value is not None:
            gauge.labels(self.group).set(value)
        else:  # this worker's one series of the gauge (a registry holds one JobMetrics)
            gauge.clear()
