"""The Grafana dashboard keeps the conventions that make it work in any Grafana (see
deploy/grafana/dashboard.py, which writes it). That every query returns data from a real
Prometheus is tests/integration/test_observability_kafka.py's job.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from streamer.observe.lag import LagExporter
from streamer.observe.metrics import Metrics

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "streamer.json"
SELECTOR = re.compile(r"(streamer_[a-z_]+)(\{[^}]*\})?")
VARIABLE_FILTERS = ('job=~"$job"', 'instance=~"$instance"', 'group=~"$group"')


def load() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def targets() -> list[tuple[str, dict[str, Any]]]:
    return [(p["title"], t) for p in load()["panels"] for t in p["targets"]]


def test_the_committed_json_is_the_generator_output() -> None:
    spec = importlib.util.spec_from_file_location("dashboard", ROOT / "deploy" / "grafana" / "dashboard.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert DASHBOARD.read_text() == module.render(), "run: python deploy/grafana/dashboard.py"


def test_a_datasource_variable_and_every_panel_and_query_use_it() -> None:
    variables = {v["name"]: v for v in load()["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for name in ("job", "instance", "group"):
        assert variables[name]["type"] == "query" and variables[name]["includeAll"], name
        assert variables[name]["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    for panel in load()["panels"]:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
    for title, target in targets():
        assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, title


@pytest.mark.parametrize("title,target", targets(), ids=lambda x: x if isinstance(x, str) else x["refId"])
def test_every_series_selector_filters_by_job_instance_and_group(title: str, target: dict[str, Any]) -> None:
    selectors = SELECTOR.findall(target["expr"])
    assert selectors, target["expr"]
    for metric, labels in selectors:
        for wanted in VARIABLE_FILTERS:
            assert wanted in labels, f"{title}: {metric} lacks {wanted}"


def test_ranges_use_rate_interval_and_panels_have_units_and_descriptions() -> None:
    for title, target in targets():
        assert not re.search(r"\[\d+[smhdw]\]", target["expr"]), f"{title}: fixed range in {target['expr']}"
        ranges = re.findall(r"\[([^\]]+)\]", target["expr"])
        assert all(r == "$__rate_interval" for r in ranges), f"{title}: {ranges}"
    for panel in load()["panels"]:
        assert panel["fieldConfig"]["defaults"].get("unit"), f"{panel['title']}: no unit"
        assert len(panel.get("description", "")) > 20, f"{panel['title']}: no description"


def test_every_metric_the_dashboard_reads_exists_with_its_type_and_no_gauge_ends_in_total() -> None:
    registry = CollectorRegistry()
    Metrics(registry)
    exporter = LagExporter("127.0.0.1:9", "g", ["t"], registry)  # builds its gauges; never connects
    exporter.close()
    kinds: dict[str, str] = {}  # series name -> the type of the family it belongs to
    for family in registry.collect():
        if family.type == "histogram":
            for suffix in ("_bucket", "_sum", "_count"):
                kinds[family.name + suffix] = "histogram"
        if family.type == "counter":
            kinds[family.name + "_total"] = "counter"
        if family.type == "gauge":
            kinds[family.name] = "gauge"
            assert not family.name.endswith("_total"), f"gauge {family.name} has a counter's suffix"
    for title, target in targets():
        for metric, _ in SELECTOR.findall(target["expr"]):
            assert metric in kinds, f"{title}: {metric} is not a metric streamer exports"
            if metric.endswith("_total"):
                assert kinds[metric] == "counter", f"{title}: {metric}"


def test_the_dashboard_keeps_the_linters_strict_rules() -> None:
    """The three findings Grafana's dashboard-linter reported in strict mode (its Go module is not
    served here, so these are checked directly): the job and instance variables' allValue `.+`
    (its template rules), and a provisioned dashboard that is not editable in the UI."""
    board = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["job"]["allValue"] == variables["instance"]["allValue"] == ".+"
    assert board["editable"] is False
