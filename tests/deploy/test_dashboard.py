"""The Grafana dashboard keeps the conventions that make it work in any Grafana (see
deploy/grafana/dashboard.py, which writes it). That every query returns data from a real
Prometheus is tests/integration/test_observability_kafka.py's job.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from streamer.observe.jobs import JobMetrics
from streamer.observe.lag import LagExporter
from streamer.observe.metrics import Metrics
from streamer.online.meters import OnlineMetrics

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "streamer.json"
SELECTOR = re.compile(r"(streamer_[a-z_]+)(\{[^}]*\})?")
VARIABLE_FILTERS = ('job=~"$job"', 'instance=~"$instance"', 'group=~"$group"')


def load() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def graphs() -> list[dict[str, Any]]:
    """The panels that draw queries (rows only group them)."""
    return [p for p in load()["panels"] if p["type"] != "row"]


def targets() -> list[tuple[str, dict[str, Any]]]:
    return [(p["title"], t) for p in graphs() for t in p["targets"]]


def test_the_committed_json_is_the_generator_output() -> None:
    spec = importlib.util.spec_from_file_location("dashboard", ROOT / "deploy" / "grafana" / "dashboard.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert DASHBOARD.read_text() == module.render(), "run: python deploy/grafana/dashboard.py"


def test_a_datasource_variable_and_every_panel_and_query_use_it() -> None:
    variables = {v["name"]: v for v in load()["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for name in ("job", "instance", "group", "model"):
        assert variables[name]["type"] == "query" and variables[name]["includeAll"], name
        assert variables[name]["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    for panel in graphs():
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


MODEL_SIDE = ("streamer_batch_size_rows", "streamer_batch_flushes", "streamer_inference_seconds", "streamer_feature_psi",
              "streamer_feature_out_of_range_ratio", "streamer_degraded_predictions", "streamer_model_breaker_state",
              "streamer_model_info", "streamer_model_reloads", "streamer_shadow_flips", "streamer_shadow_compared_rows",
              "streamer_shadow_abs_diff", "streamer_shadow_predictions", "streamer_shadow_failures")


def test_a_model_variable_that_every_model_side_series_uses() -> None:
    """A stream of several models (``route``): each model-side series has the ``model`` label, and
    the dashboard's model variable picks it."""
    variables = {v["name"]: v for v in load()["templating"]["list"]}
    assert variables["model"]["type"] == "query" and variables["model"]["includeAll"]
    assert "streamer_model_info" in variables["model"]["definition"]
    seen = set()
    for title, target in targets():
        for metric, labels in SELECTOR.findall(target["expr"]):
            base = re.sub(r"_(bucket|sum|count|total)$", "", metric)
            if base in MODEL_SIDE:
                seen.add(base)
                assert 'model=~"$model"' in labels, f"{title}: {metric} lacks the model variable"
    assert seen == set(MODEL_SIDE)


def test_ranges_use_rate_interval_and_panels_have_units_and_descriptions() -> None:
    for title, target in targets():
        assert not re.search(r"\[\d+[smhdw]\]", target["expr"]), f"{title}: fixed range in {target['expr']}"
        ranges = re.findall(r"\[([^\]]+)\]", target["expr"])
        assert all(r == "$__rate_interval" for r in ranges), f"{title}: {ranges}"
    for panel in graphs():
        assert panel["fieldConfig"]["defaults"].get("unit"), f"{panel['title']}: no unit"
        assert len(panel.get("description", "")) > 20, f"{panel['title']}: no description"


def test_every_metric_the_dashboard_reads_exists_with_its_type_and_no_gauge_ends_in_total() -> None:
    registry = CollectorRegistry()
    Metrics(registry)
    OnlineMetrics(registry)
    JobMetrics(registry, "streamer-jobs")
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


def test_the_online_row_shows_requests_by_code_p99_shed_by_reason_and_queued_rows() -> None:
    panels = load()["panels"]
    row = next(n for n, p in enumerate(panels) if p["type"] == "row")
    assert panels[row]["title"] == "Online" and not panels[row]["collapsed"]
    below = list(itertools.takewhile(lambda p: p["type"] != "row", panels[row + 1:]))  # up to the next row
    assert all(p["gridPos"]["y"] > panels[row]["gridPos"]["y"] for p in below)
    assert all(p["gridPos"]["y"] < panels[row]["gridPos"]["y"] for p in panels[:row])
    exprs = {p["title"]: " ".join(t["expr"] for t in p["targets"]) for p in below}
    assert "sum by (code, transport) (rate(streamer_online_requests_total{" in exprs["Online: requests by code"]
    assert "histogram_quantile(0.99, sum by (le, transport) (rate(streamer_online_request_seconds_bucket{" in \
        exprs["Online: latency"]
    assert "sum by (reason) (rate(streamer_online_shed_total{" in exprs["Online: shed requests by reason"]
    assert "streamer_online_queued_rows{" in exprs["Online: queued rows"]
    degraded = exprs["Online: degraded answers by reason"]  # a share of the answers, by reason
    assert "sum by (reason) (rate(streamer_online_degraded_total{" in degraded
    assert "/ ignoring (reason) group_left clamp_min(sum(rate(streamer_online_answers_total{" in degraded
    assert "sum by (le, hop) (rate(streamer_online_hop_seconds_bucket{" in exprs["Online: hops"]
    assert len({p["id"] for p in panels}) == len(panels)  # Grafana keys panels by id


def test_the_jobs_row_shows_jobs_by_state_finished_duration_time_queued_rows_per_second_and_the_window() -> None:
    panels = load()["panels"]
    rows = {p["title"]: n for n, p in enumerate(panels) if p["type"] == "row"}
    assert list(rows) == ["Online", "Jobs"] and not panels[rows["Jobs"]]["collapsed"]
    below = panels[rows["Jobs"] + 1:]
    assert below and all(p["title"].startswith("Jobs: ") for p in below)
    assert all(p["gridPos"]["y"] > panels[rows["Jobs"]]["gridPos"]["y"] for p in below)
    assert all(p["gridPos"]["y"] < panels[rows["Jobs"]]["gridPos"]["y"] for p in panels[:rows["Jobs"]])
    exprs = {p["title"]: " ".join(t["expr"] for t in p["targets"]) for p in below}
    # One count per group, not one per worker: every worker exports the whole status topic's counts.
    assert "sum by (state) (max by (group, state) (streamer_jobs{" in exprs["Jobs: by state"]
    assert "sum by (state) (increase(streamer_job_duration_seconds_count{" in exprs["Jobs: finished"]
    assert "histogram_quantile(0.95, sum by (le, state) (rate(streamer_job_duration_seconds_bucket{" in \
        exprs["Jobs: duration"]
    assert "histogram_quantile(0.5, sum by (le) (rate(streamer_job_queued_seconds_bucket{" in exprs["Jobs: time queued"]
    assert "streamer_job_rows_per_second{" in exprs["Jobs: rows per second"]
    assert "rate(streamer_job_rows_total{" in exprs["Jobs: rows per second"]
    window = exprs["Jobs: time needed and time left"]
    assert "streamer_job_eta_seconds{" in window and "streamer_job_deadline_timestamp_seconds{" in window
    assert len({p["id"] for p in panels}) == len(panels)


def test_every_query_is_valid_promql(tmp_path: Path) -> None:
    """promtool parses each query (as a recording rule) with the variables as Grafana fills them."""
    promtool = shutil.which("promtool")
    assert promtool, "no promtool: `make test` installs Debian's prometheus package"
    substitute = {"$__rate_interval": "1m", "$job": ".+", "$instance": ".+", "$group": ".+", "$model": ".+"}
    rules = []
    for n, (title, target) in enumerate(targets()):
        expr = target["expr"]
        for name, value in substitute.items():
            expr = expr.replace(name, value)
        assert "$" not in expr, f"{title}: an unknown variable in {target['expr']}"
        rules.append({"record": f"dashboard:query_{n}", "expr": expr})


    def check(rules: list[dict[str, str]]) -> subprocess.CompletedProcess[str]:
        path = tmp_path / "rules.yml"
        path.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}))  # JSON is YAML
        return subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)

    result = check(rules)
    assert result.returncode == 0 and f"SUCCESS: {len(rules)} rules found" in result.stdout, \
        result.stdout + result.stderr
    assert check([{"record": "dashboard:broken", "expr": "sum(rate(streamer_online_shed_total[1m])"}]).returncode == 1
