"""A real `streamer worker` on the broker, scraped by a real Prometheus while it runs Parquet jobs:
every query of the dashboard's Jobs row and of the jobs' alerts returns data, and the counters hold
what the jobs did (rows, jobs completed, durations), an idle worker showing no running job.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from streamer.config_file import load_config
from streamer.jobs.board import Board
from streamer.jobs.queue import submit
from streamer.jobs.spec import parse_spec
from tests.conftest import ROOT, Topics, free_port
from tests.deploy.test_dashboard_jobs_online import COMPARISON, jobs_alerts, jobs_queries
from tests.integration.test_observability_kafka import get, prometheus, query, value, wait_for
from tests.lake.test_score import many
from tests.support.faults import write_config

pytestmark = pytest.mark.kafka
__all__ = ["prometheus"]  # the fixture, shared with the stream's test
ROWS = 400_000  # a few seconds of scoring: the running job is seen by several scrapes


@pytest.fixture
def worker_config(bootstrap: str, topics: Topics, tmp_path: Path) -> Path:
    path = write_config(tmp_path / "worker.yaml", bootstrap=bootstrap, input_topic=topics.input,
                        output_topic=topics.output, group=topics.group, guarantee="at_least_once",
                        metrics_port=free_port())
    doc = yaml.safe_load(path.read_text())
    doc["lake"] = {"warehouse": str(tmp_path / "lake")}
    doc["jobs"] = {"topic": f"{topics.input}.jobs", "status_topic": f"{topics.input}.jobs.status",
                   "group_id": f"{topics.group}-workers", "partitions": 1, "progress_ms": 200}
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture
def worker(worker_config: Path, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    with (tmp_path / "worker.log").open("wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "streamer", "worker", "--config", str(worker_config),
                                 "--name", "w1"], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)


def seen(url: str, expr: str, since: float) -> bool:
    """Whether ``expr`` had a value at any second since ``since`` (unix s)."""
    args = {"query": expr, "start": f"{since:.3f}", "end": f"{time.time():.3f}", "step": "0.5"}
    code, body = get(f"{url}/api/v1/query_range?" + urllib.parse.urlencode(args))
    assert code == 200, f"{expr}: HTTP {code} {body}"
    return bool(json.loads(body)["data"]["result"])


def test_a_real_worker_fills_every_jobs_query_and_alert(worker: subprocess.Popen[bytes], worker_config: Path,
                                                        tmp_path: Path,
                                                        prometheus: Callable[[dict[str, int]], str]) -> None:
    cfg = load_config(worker_config)
    source = tmp_path / "events.parquet"
    pq.write_table(many(ROWS), source, row_group_size=10_000)
    url = prometheus({"streamer-worker": cfg.metrics.port})
    wait_for(lambda: bool(query(url, 'up{job="streamer-worker"} == 1')), 60, "the worker's /metrics")
    queries = jobs_queries() + [(f"alert {a['alert']}", COMPARISON.sub("", a["expr"])) for a in jobs_alerts()]
    since = time.time()
    board = Board(cfg).follow()
    done: list[str] = []
    try:
        deadline = time.monotonic() + 120
        while True:  # jobs run one after another until Prometheus has seen every series drawn
            spec = parse_spec({"name": "metrics", "source": {"parquet": str(source)},
                               "target": {"parquet": str(tmp_path / f"out-{len(done)}")}, "within": "1h"})
            status, queued = submit(cfg, spec, board)
            assert queued
            ended = board.wait(status.id, lambda s: s.final, 90)
            assert ended is not None and ended.state == "completed", ended
            done.append(status.id)
            empty = [f"{title}: {expr}" for title, expr in queries if not seen(url, expr, since)]
            if not empty:
                break
            assert time.monotonic() < deadline, f"after {len(done)} jobs these had no series:\n" + "\n".join(empty)
    finally:
        board.close()

    # What the jobs did, once Prometheus has scraped the idle worker's last counts.
    jobs = len(done)
    wait_for(lambda: bool(query(url, f'streamer_jobs{{state="completed"}} == {jobs}')), 30,
             f"the worker to count {jobs} completed jobs")
    assert value(url, "sum(streamer_job_rows_total)") == ROWS * jobs
    assert value(url, 'sum(streamer_job_duration_seconds_count{state="completed"})') == jobs
    assert value(url, "sum(streamer_job_queued_seconds_count)") == jobs
    assert value(url, 'streamer_jobs{state="running"}') == 0
    assert value(url, "sum(streamer_job_duration_seconds_count)") == jobs  # none failed, expired or cancelled
    assert not query(url, "streamer_job_eta_seconds"), "an idle worker shows a running job"
    assert seen(url, 'streamer_jobs{state="running"} == 1', since)  # counted by the busy worker itself
    # On time all along (2 s of work in a 1 h window): the alert's condition never held.
    assert not seen(url, jobs_alerts()[0]["expr"], since)
    series: list[dict[str, Any]] = query(url, "streamer_job_rows_total")
    assert series[0]["metric"]["group"] == cfg.jobs.group_id
