"""The dashboard's Jobs row and the jobs' alerts on a real Prometheus: two job workers' metrics
(JobMetrics on a group registry, served on /metrics as `streamer worker` serves them) recorded
through the calls a worker makes, while Debian's prometheus scrapes both; every query of the row
and every jobs alert returns a series, and the alert's condition picks the late job alone.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from streamer.observe.health import HealthServer, Status
from streamer.observe.jobs import JobMetrics
from streamer.observe.metrics import GroupRegistry
from tests.deploy.test_alerts import ALERTS
from tests.deploy.test_dashboard_online import online_queries, query
from tests.support import prometheus as prometheus_server

GROUP = "streamer-jobs"
COMPARISON = re.compile(r"\s*(>|<|>=|<=|==|!=)\s*[-+0-9.eE]+\s*$")  # an alert's threshold


def jobs_queries() -> list[tuple[str, str]]:
    """The Jobs row's queries as Grafana sends them with every variable at "All"."""
    return online_queries(prefix="Jobs: ")


def jobs_alerts() -> list[dict[str, str]]:
    return next(g for g in yaml.safe_load(ALERTS.read_text())["groups"] if g["name"] == "streamer-jobs")["rules"]


class Worker:
    """One worker's metrics, served on a port of its own as a worker's metrics section serves them."""

    def __init__(self) -> None:
        self.meters = JobMetrics(GroupRegistry(GROUP), GROUP)
        self.http = HealthServer(self.meters.registry, "127.0.0.1", 0, lambda: Status(True, True))
        self.rows = 0

    def job(self, *, late: bool, rows: int = 1000) -> None:
        """One job's calls: started, progress twice, finished, idle, and the next job running."""
        self.meters.started(queued_s=0.4)
        now = time.time()
        for _ in range(2):
            # late: needs an hour, its window ends in a minute; else the reverse.
            self.meters.progress(rows, rows_per_s=500.0, eta_s=3600.0 if late else 60.0,
                                 deadline_s=now + (60.0 if late else 3600.0))
            self.rows += rows
        self.meters.finished("completed", duration_s=4.0)
        self.meters.idle()
        self.meters.started(queued_s=1.5)
        self.meters.progress(rows, rows_per_s=500.0, eta_s=3600.0 if late else 60.0,
                             deadline_s=now + (60.0 if late else 3600.0))
        self.rows += rows

    def close(self) -> None:
        self.http.close()


@pytest.fixture
def workers() -> Iterator[dict[str, Worker]]:
    made = {"late": Worker(), "on-time": Worker()}
    yield made
    for w in made.values():
        w.close()


@pytest.fixture
def prometheus(workers: dict[str, Worker], tmp_path: Path) -> Iterator[str]:
    targets = [f"127.0.0.1:{w.http.port}" for w in workers.values()]
    with prometheus_server.running(tmp_path, {"streamer-worker": targets}) as url:
        yield url


def test_every_jobs_query_and_alert_returns_data_from_a_real_prometheus(workers: dict[str, Worker],
                                                                          prometheus: str) -> None:
    queries = jobs_queries()
    assert len(queries) >= 6
    alerts = jobs_alerts()
    assert [a["alert"] for a in alerts] == ["StreamerJobWillMissWindow"]
    queries += [(f"alert {a['alert']}", COMPARISON.sub("", a["expr"])) for a in alerts]
    deadline = time.monotonic() + 60
    while True:  # jobs run and end while Prometheus gathers samples for rate()
        for w in workers.values():
            w.meters.states({"queued": 2, "running": 2, "completed": 5, "failed": 1})
            w.job(late=w is workers["late"])
        empty = [f"{title}: {expr}" for title, expr in queries if not query(prometheus, expr)]
        if not empty:
            break
        assert time.monotonic() < deadline, "these return no series:\n" + "\n".join(empty)
        time.sleep(0.2)

    # The alert's condition, threshold included: the late worker's job, not the one on time.
    late = query(prometheus, alerts[0]["expr"])
    assert [r["metric"]["instance"] for r in late] == [f"127.0.0.1:{workers['late'].http.port}"], late
    assert late[0]["metric"]["group"] == GROUP
    # Both workers read the same status topic: the row counts each state once, not once per worker.
    by_state = {r["metric"]["state"]: float(r["value"][1]) for r in query(prometheus, dict(queries)["Jobs: by state"])}
    assert by_state == {"queued": 2, "running": 2, "completed": 5, "failed": 1}

    # The values, once the workers are quiet and Prometheus has scraped their last call.
    rows = sum(w.rows for w in workers.values())
    scraped = time.monotonic() + 30
    while not query(prometheus, f"sum(streamer_job_rows_total) == {rows}"):
        assert time.monotonic() < scraped, f"Prometheus did not scrape {rows} rows"
        time.sleep(0.2)
    for w in workers.values():
        w.meters.idle()
    idle = time.monotonic() + 30
    while query(prometheus, "streamer_job_eta_seconds"):  # cleared gauges go stale at the next scrape
        assert time.monotonic() < idle, "an idle worker's eta stayed"
        time.sleep(0.2)
    assert not query(prometheus, alerts[0]["expr"])
