"""Metrics, health and lag on a real broker, checked by a real Prometheus server.

Every expression of the Grafana dashboard and of the alert rules is evaluated through
Prometheus's HTTP API while a processor and the lag exporter run, and must return a series; the
counters and the latency histogram must then hold the values the stream implies.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from prometheus_client import CollectorRegistry

from streamer.commands.demo import encoded_events, produce_events, synthetic_events
from streamer.config import ChallengerConfig, Config, with_overrides
from streamer.formats.configured import input_codec
from streamer.observe.drift import write_profile
from streamer.observe.health import HealthServer, Status
from streamer.observe.lag import LagExporter
from streamer.processor import Processor
from streamer.testing import FunctionRunner, score_matrix
from streamer.wiring.stream import build_processor
from tests.conftest import ROOT, Topics, free_port, make_config
from tests.support.faults import ChildProcessor, write_config

pytestmark = pytest.mark.kafka
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "streamer.json"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
COMPARISON = re.compile(r"\s*(>|<|>=|<=|==|!=)\s*[-+0-9.eE]+\s*$")


def get(url: str, timeout: float = 5) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def observed_config(bootstrap: str, topics: Topics, **metrics: Any) -> Config:
    cfg = make_config(bootstrap, topics)
    return with_overrides(cfg, metrics={"enabled": True, "port": 0, "stats_interval_ms": 1000,
                                        **metrics})


def feed(bootstrap: str, topics: Topics, cfg: Config, n: int, seed: int = 1) -> None:
    produce_events(bootstrap, topics.input,
                   encoded_events(input_codec(cfg.input), synthetic_events(n, 32, seed=seed), stamp_now=True))


class Running:
    """A processor running in a thread of this process until stopped."""

    def __init__(self, processor: Processor) -> None:
        self.processor = processor
        self.thread = threading.Thread(target=processor.run, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.processor.stop()
        self.thread.join(60)
        assert not self.thread.is_alive()


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Callable[[dict[str, int]], str]]:
    """Start Debian's prometheus (installed by `make test`) scraping the given jobs every second."""
    binary = shutil.which("prometheus")
    assert binary, "no prometheus binary: `make test` installs Debian's prometheus package"
    procs: list[subprocess.Popen[bytes]] = []

    def start(jobs: dict[str, int]) -> str:
        port = free_port()
        config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                  "rule_files": [str(ALERTS)],
                  "scrape_configs": [{"job_name": job, "static_configs": [{"targets": [f"127.0.0.1:{p}"]}]}
                                     for job, p in jobs.items()]}
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
        log = (tmp_path / "prometheus.log").open("wb")
        procs.append(subprocess.Popen([binary, f"--config.file={tmp_path / 'prometheus.yml'}",
                                       f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                       f"--web.listen-address=127.0.0.1:{port}"],
                                      stdout=log, stderr=subprocess.STDOUT))
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: _ready(url), 60, "prometheus to be ready")
        return url

    yield start
    for p in procs:
        p.terminate()
        p.wait(30)


def _ready(url: str) -> bool:
    try:
        return get(f"{url}/-/ready", 1)[0] == 200
    except OSError:
        return False


def query(url: str, expr: str) -> list[Any]:
    code, body = get(f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    assert code == 200, f"{expr}: HTTP {code} {body}"
    return json.loads(body)["data"]["result"]


def value(url: str, expr: str) -> float:
    """The single value ``expr`` evaluates to now."""
    result = query(url, expr)
    assert len(result) == 1, f"{expr}: expected one series, got {result}"
    return float(result[0]["value"][1])


def dashboard_queries() -> list[tuple[str, str]]:
    """Each panel query as Grafana would send it with every variable at "All" (regex ``.*``) and
    a one-minute rate interval (the test scrapes every second)."""
    dash = json.loads(DASHBOARD.read_text())
    substitute = {"$__rate_interval": "1m", "$job": ".*", "$instance": ".*", "$group": ".*", "$model": ".*"}
    exprs = []
    # Rows draw nothing; the Online row's series come from an online server, the Jobs row's from
    # a job worker: tests/deploy/test_dashboard_online.py and test_dashboard_jobs_online.py run
    # those under a real Prometheus.
    for p in dash["panels"]:
        if p["type"] == "row" or p["title"].startswith(("Online: ", "Jobs: ")):
            continue
        for t in p["targets"]:
            expr = t["expr"]
            for name, value in substitute.items():
                expr = expr.replace(name, value)
            assert "$" not in expr, f"an unknown variable in {t['expr']}"
            exprs.append((f"panel '{p['title']}'", expr))
    return exprs


def alert_queries() -> list[tuple[str, str]]:
    # The group "streamer": the processors' and the lag exporter's ("streamer-jobs" is the workers').
    rules = next(g for g in yaml.safe_load(ALERTS.read_text())["groups"] if g["name"] == "streamer")["rules"]
    return [(f"alert {r['alert']}", COMPARISON.sub("", r["expr"])) for r in rules]


def drift_profile(path: Path) -> Path:
    """A training profile of the demo's feature distribution (what synthetic_events draws)."""
    sample = np.array([e["features"] for e in synthetic_events(20_000, 32, seed=5)])
    write_profile(sample, path)
    return path


def test_every_dashboard_panel_and_alert_returns_data(bootstrap: str, topics: Topics, tmp_path: Path,
                                                      prometheus: Callable[[dict[str, int]], str]) -> None:
    base = observed_config(bootstrap, topics)
    same = ChallengerConfig(base.model.path, "challenger", "2")  # the champion's own model, in shadow
    cfg = with_overrides(base, model={"drift_profile": drift_profile(tmp_path / "profile.json")},
                         shadow={"challengers": (same,)})
    feed(bootstrap, topics, cfg, 2000)
    fed = 2000
    running = Running(build_processor(cfg))
    registry = CollectorRegistry()
    exporter = LagExporter({"bootstrap.servers": bootstrap}, topics.group, [topics.input], registry)
    lag_http = HealthServer(registry, "127.0.0.1", 0, lambda: Status(True, True))
    stop = threading.Event()
    lag_thread = threading.Thread(target=exporter.run, args=(1.0, stop), daemon=True)
    lag_thread.start()
    try:
        url = prometheus({"streamer": running.processor.http.port, "streamer-lag": lag_http.port})
        deadline = time.monotonic() + 60
        while True:  # a live stream while Prometheus gathers enough samples for rate()
            feed(bootstrap, topics, cfg, 200, seed=int(time.monotonic()))
            fed += 200
            ready = query(url, 'count_over_time(up{job="streamer"}[1m]) >= 8') and \
                query(url, 'count_over_time(up{job="streamer-lag"}[1m]) >= 8') and \
                query(url, "streamer_end_to_end_latency_seconds_count > 0")
            if ready:
                break
            assert time.monotonic() < deadline, "prometheus did not gather samples in 60 s"
            time.sleep(0.5)
        assert all(float(r["value"][1]) == 1 for r in query(url, "up")), query(url, "up")
        empty = [f"{where}: {expr}" for where, expr in dashboard_queries() + alert_queries()
                 if not query(url, expr)]
        assert not empty, "these return no series:\n" + "\n".join(empty)
        # The processor's series carry the consumer group, as the lag exporter's do: the
        # dashboard's group variable selects both.
        assert query(url, f'streamer_healthy{{job="streamer", group="{topics.group}"}}')
        assert query(url, f'streamer_group_total_lag_messages{{job="streamer-lag", group="{topics.group}"}}')

        # The values, not only their presence: once the stream is quiet and Prometheus has
        # scraped the last ack, every event fed was consumed, batched once and predicted once
        # (no dead letters here), and the counters of one scrape agree exactly.
        wait_for(lambda: bool(query(url, f"sum(streamer_predictions_produced_total) == {fed}")),
                 60, f"Prometheus to scrape {fed} predictions")
        assert value(url, "sum(streamer_events_consumed_total)") == fed
        assert value(url, "sum(streamer_batch_size_rows_sum)") == fed
        assert value(url, "sum(streamer_end_to_end_latency_seconds_count)") == fed
        # Event time to ack: more than nothing, and far less than a minute on a local broker.
        assert query(url, "streamer_end_to_end_latency_seconds_sum > 0"), \
            "end-to-end latency is recorded as 0"
        mean_s = value(url, "sum(streamer_end_to_end_latency_seconds_sum)"
                            " / sum(streamer_end_to_end_latency_seconds_count)")
        assert 0 < mean_s < 60, mean_s
        # The challenger is the champion's own model: it agrees on every row it compared.
        assert value(url, "sum(streamer_shadow_compared_rows_total)") > 0
        assert value(url, "sum(streamer_shadow_flips_total)") == 0
    finally:
        stop.set()
        lag_thread.join(30)
        running.stop()
        lag_http.close()
        exporter.close()
    check = subprocess.run(["promtool", "check", "rules", str(ALERTS)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


def test_lag_is_exact_while_no_processor_runs(bootstrap: str, topics: Topics) -> None:
    cfg = make_config(bootstrap, topics)
    exporter = LagExporter({"bootstrap.servers": bootstrap}, topics.group, [topics.input],
                           CollectorRegistry())
    try:
        feed(bootstrap, topics, cfg, 1000)
        build_processor(cfg).run(until=lambda s: s.outputs >= 1000)
        assert sum(exporter.collect().values()) == 0
        assert exporter.members.labels(topics.group)._value.get() == 0  # nobody is running
        feed(bootstrap, topics, cfg, 700, seed=2)  # arriving while every processor is down
        assert sum(exporter.collect().values()) == 700
        assert exporter.lag_seconds_max.labels(topics.group)._value.get() > 0
        feed(bootstrap, topics, cfg, 300, seed=3)
        assert sum(exporter.collect().values()) == 1000
        build_processor(cfg).run(until=lambda s: s.outputs >= 1000)
        assert sum(exporter.collect().values()) == 0
        assert exporter.lag_seconds_max.labels(topics.group)._value.get() == 0
    finally:
        exporter.close()


def test_a_hanging_model_is_reported_unhealthy(bootstrap: str, topics: Topics) -> None:
    cfg = observed_config(bootstrap, topics, stall_timeout_ms=1500)
    release = threading.Event()
    real = build_processor(cfg).runner

    def hanging(x: np.ndarray) -> np.ndarray:
        release.wait(60)
        return score_matrix(real, x)

    running = Running(build_processor(cfg, runner=FunctionRunner(hanging, real.contract.feature_width)))
    base = f"http://127.0.0.1:{running.processor.http.port}"
    try:
        wait_for(lambda: get(f"{base}/readyz")[0] == 200, 60, "readiness (model warm, group joined)")
        assert get(f"{base}/healthz")[0] == 200
        feed(bootstrap, topics, cfg, 100)
        started = time.monotonic()
        wait_for(lambda: get(f"{base}/healthz")[0] == 503, 30, "/healthz to report the hang")
        assert time.monotonic() - started < 1.5 + 10  # within the stall timeout, plus a batch wait
        assert "main loop silent" in get(f"{base}/healthz")[1]
    finally:
        release.set()
        running.stop()


def test_no_secret_in_metrics_or_logs(bootstrap: str, topics: Topics, tmp_path: Path) -> None:
    secret = "s3cret-Hunter2-do-not-leak"
    port = free_port()
    config = write_config(tmp_path / "cfg.yaml", bootstrap=bootstrap, input_topic=topics.input,
                          output_topic=topics.output, group=topics.group, guarantee="at_least_once",
                          kafka={"sasl.username": "scorer", "sasl.password": "${SASL_PASSWORD}"})
    doc = yaml.safe_load(config.read_text())
    doc["metrics"] = {"enabled": True, "port": port}
    config.write_text(yaml.safe_dump(doc))
    feed(bootstrap, topics, make_config(bootstrap, topics), 200)
    proc = ChildProcessor(config, tmp_path / "run.log",
                          env={"SASL_PASSWORD": secret, "STREAMER_LOG_LEVEL": "DEBUG"}).start()
    proc.wait_for_log("assigned")
    status, scrape = get(f"http://127.0.0.1:{port}/metrics")
    assert status == 200 and "streamer_events_consumed_total" in scrape
    assert proc.terminate() == 0
    log = proc.log.read_text()
    assert "sasl.password" in log and "***" in log  # the setting is logged, redacted
    assert secret not in scrape and secret not in log


def test_drift_metrics_rise_on_the_shifted_features_only(bootstrap: str, topics: Topics, tmp_path: Path) -> None:
    """Through the real processor: a stream drawn like the training profile shows low PSI on every
    feature; once features 3 and 7 shift by two standard deviations, those two show high PSI and
    the others stay low."""
    cfg = with_overrides(make_config(bootstrap, topics),
                         model={"drift_profile": drift_profile(tmp_path / "profile.json"),
                                "drift_window_rows": 2_000})
    registry = CollectorRegistry()
    running = Running(build_processor(cfg, registry=registry))
    codec = input_codec(cfg.input)

    def psi() -> np.ndarray:
        return np.array([registry.get_sample_value("streamer_feature_psi", {"model": cfg.model.name, "feature": str(i)}) or 0.0
                         for i in range(32)])

    def feed_until(predicate: Callable[[], bool], shift: float, what: str) -> None:
        deadline = time.monotonic() + 60
        seed = 100
        while not predicate():  # a live stream: the gauges refresh as batches are scored
            events = synthetic_events(500, 32, seed=seed)
            for e in events:
                f = e["features"]
                assert isinstance(f, list)
                f[3] += shift
                f[7] += shift
            produce_events(bootstrap, topics.input, encoded_events(codec, events))
            seed += 1
            assert time.monotonic() < deadline, f"timed out waiting for {what}: PSI {psi().round(3)}"
            time.sleep(0.3)  # pacing the feed, not synchronising

    try:
        feed_until(lambda: running.processor.stats.predictions >= 3_000 and 0 < psi().max() < 0.1, 0.0,
                   "low PSI on a reference stream")
        feed_until(lambda: psi()[[3, 7]].min() > 0.25, 2.0, "high PSI on the shifted features")
        assert np.delete(psi(), [3, 7]).max() < 0.1, psi().round(3)
        outside = np.array([registry.get_sample_value("streamer_feature_out_of_range_ratio",
                                                      {"model": cfg.model.name, "feature": str(i)})
                            for i in range(32)])
        assert outside[[3, 7]].min() > np.delete(outside, [3, 7]).max(), outside.round(4)
    finally:
        running.stop()
