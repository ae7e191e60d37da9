"""The dashboard's Online row on a real Prometheus: an online server (no Kafka) answers and sheds
requests while Debian's prometheus scrapes its /metrics, and every query of the row returns a
series. The other rows are evaluated beside a stream in tests/integration/test_observability_kafka.py.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from streamer.config import OnlineConfig
from streamer.wiring.lake import lake_house
from tests.deploy.test_alerts import ALERTS
from tests.deploy.test_dashboard import DASHBOARD
from tests.online.doubler import TIMEOUT_S, free_port, running
from tests.online.test_served import example
from tests.support import prometheus as prometheus_server

COMPARISON = re.compile(r"\s*(>|<|>=|<=|==|!=)\s*[-+0-9.eE]+\s*$")  # an alert's threshold


def online_queries(prefix: str = "Online: ") -> list[tuple[str, str]]:
    """The Online row's queries (or another row's, by its panels' ``prefix``) as Grafana sends them
    with every variable at "All"."""
    substitute = {"$__rate_interval": "1m", "$job": ".+", "$instance": ".+", "$group": ".+", "$model": ".+"}
    out = []
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        if panel["type"] == "row" or not panel["title"].startswith(prefix):
            continue
        for target in panel["targets"]:
            expr = target["expr"]
            for name, value in substitute.items():
                expr = expr.replace(name, value)
            out.append((panel["title"], expr))
    return out


def call(url: str, body: dict[str, Any] | None = None, headers: dict[str, str] | None = None) -> tuple[int, str]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data, {"content-type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture
def server() -> Iterator[str]:
    port = free_port()
    cfg = replace(example(), online=OnlineConfig(http_port=port, grpc_port=0, max_wait_ms=1))
    with running(cfg, lake_house(cfg).model.serving):
        yield f"127.0.0.1:{port}"


@pytest.fixture
def prometheus(server: str, tmp_path: Path) -> Iterator[str]:
    with prometheus_server.running(tmp_path, {"streamer-online": [server]}) as url:
        yield url


def query(url: str, expr: str) -> list[Any]:
    try:
        code, body = call(f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    except OSError:  # not listening yet
        return []
    assert code in (200, 503), f"{expr}: HTTP {code} {body}"  # 503: still starting
    return json.loads(body)["data"]["result"] if code == 200 else []


def online_alerts() -> list[dict[str, str]]:
    return next(g for g in yaml.safe_load(ALERTS.read_text())["groups"] if g["name"] == "streamer-online")["rules"]


def test_every_online_query_and_alert_returns_data_from_a_real_prometheus(server: str, prometheus: str) -> None:
    queries = online_queries()
    assert len(queries) >= 6
    alerts = online_alerts()
    assert [a["alert"] for a in alerts] == ["StreamerOnlineDegraded"]
    queries += [(f"alert {a['alert']}", COMPARISON.sub("", a["expr"])) for a in alerts]
    model = example().model.name
    infer = {"inputs": [{"name": "features", "shape": [1, 32], "datatype": "FP32", "data": [0.5] * 32}]}
    deadline = time.monotonic() + 60
    while True:  # answered and shed requests while Prometheus gathers samples for rate()
        code, body = call(f"http://{server}/v2/models/{model}/infer", infer)
        assert code == 200, body
        code, body = call(f"http://{server}/v2/models/{model}/infer", infer, {"X-Request-Timeout-Ms": "0.001"})
        assert code == 503, body  # a deadline no batch can meet: shed at once
        empty = [f"{title}: {expr}" for title, expr in queries if not query(prometheus, expr)]
        if not empty:
            break
        assert time.monotonic() < deadline, "these return no series:\n" + "\n".join(empty)
        time.sleep(0.2)
    codes = {r["metric"]["code"] for r in query(prometheus, "sum by (code) (streamer_online_requests_total)")}
    assert {"200", "503"} <= codes
    reasons = query(prometheus, 'streamer_online_shed_total{reason="deadline"} > 0')
    assert reasons and reasons[0]["metric"]["group"] == example().input.group_id
