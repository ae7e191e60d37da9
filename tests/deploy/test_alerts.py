"""Alert rules of deploy/prometheus/alerts.yml under promtool's rule unit tests: series over time in,
the alerts that fire (after their ``for``) out. That every alert's query returns data from a real
Prometheus is tests/integration/test_observability_kafka.py's job (and, for the jobs' alerts,
tests/deploy/test_dashboard_jobs_online.py's).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
WORKER = {"job": "streamer-worker", "group": "streamer-jobs"}


def series(name: str, instance: str, values: str) -> dict[str, str]:
    labels = ", ".join(f'{k}="{v}"' for k, v in {**WORKER, "instance": instance}.items())
    return {"series": f"{name}{{{labels}}}", "values": values}


def promtool_test(tmp_path: Path, tests: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    promtool = shutil.which("promtool")
    assert promtool, "no promtool: `make test` installs Debian's prometheus package"
    path = tmp_path / "alerts_test.yml"
    path.write_text(json.dumps({"rule_files": [str(ALERTS)], "evaluation_interval": "1m", "tests": tests}))
    return subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=60)


def test_a_running_job_that_needs_more_than_its_window_leaves_alerts_after_five_minutes(tmp_path: Path) -> None:
    # time() is the evaluation time in seconds from 0. "late": its window ends at 1 h, it needs 2 h
    # more; "on-time": ends at 2 h, needs 10 min; "just-late" / "just-on-time": finish a minute after
    # / before the window's end all along; "no-total": a topic range (no eta) past its window;
    # "late-then-faster": late for 3 minutes (a slow start), then on time: never pending for 5.
    inputs = [series("streamer_job_eta_seconds", "late", "7200x20"),
              series("streamer_job_deadline_timestamp_seconds", "late", "3600x20"),
              series("streamer_job_eta_seconds", "on-time", "600x20"),
              series("streamer_job_deadline_timestamp_seconds", "on-time", "7200x20"),
              series("streamer_job_eta_seconds", "just-late", "3660-60x20"),
              series("streamer_job_deadline_timestamp_seconds", "just-late", "3600x20"),
              series("streamer_job_eta_seconds", "just-on-time", "3540-60x20"),
              series("streamer_job_deadline_timestamp_seconds", "just-on-time", "3600x20"),
              series("streamer_job_deadline_timestamp_seconds", "no-total", "60x20"),
              series("streamer_job_eta_seconds", "late-then-faster", "7200 7200 7200 7200 60x16"),
              series("streamer_job_deadline_timestamp_seconds", "late-then-faster", "3600x20")]
    def alert(instance: str, late: str) -> dict[str, Any]:
        return {"exp_labels": {"severity": "warning", **WORKER, "instance": instance},
                "exp_annotations": {"summary": f"The job running on {instance} (group streamer-jobs) needs "
                                               f"{late} more than its window leaves: it will expire unfinished"}}

    # At 10 min "late" needs 600 s + 7200 s - 3600 s (the window's end) = 4200 s more than it has.
    result = promtool_test(tmp_path, [{"interval": "1m", "input_series": inputs, "alert_rule_test": [
        {"eval_time": "4m", "alertname": "StreamerJobWillMissWindow", "exp_alerts": []},
        {"eval_time": "10m", "alertname": "StreamerJobWillMissWindow",
         "exp_alerts": [alert("late", "1h 10m 0s"), alert("just-late", "1m 0s")]}]}])
    assert result.returncode == 0, result.stdout + result.stderr


def test_an_idle_worker_never_alerts_on_the_job_it_ran(tmp_path: Path) -> None:
    # The job ran late for 3 minutes and ended: the worker cleared its gauges (stale from then on).
    inputs = [series("streamer_job_eta_seconds", "w1", "7200 7200 7200 stale"),
              series("streamer_job_deadline_timestamp_seconds", "w1", "60 60 60 stale")]
    result = promtool_test(tmp_path, [{"interval": "1m", "input_series": inputs, "alert_rule_test": [
        {"eval_time": "10m", "alertname": "StreamerJobWillMissWindow", "exp_alerts": []}]}])
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_wrong_expectation_fails_so_the_tests_above_can_fail(tmp_path: Path) -> None:
    inputs = [series("streamer_job_eta_seconds", "w1", "600x20"),
              series("streamer_job_deadline_timestamp_seconds", "w1", "7200x20")]
    wrong = {"severity": "warning", **WORKER, "instance": "w1"}  # on time: no alert, yet one expected
    result = promtool_test(tmp_path, [{"interval": "1m", "input_series": inputs, "alert_rule_test": [
        {"eval_time": "10m", "alertname": "StreamerJobWillMissWindow", "exp_alerts": [{"exp_labels": wrong}]}]}])
    assert result.returncode == 1, result.stdout + result.stderr


ONLINE = {"job": "streamer-online", "group": "streamer-fraud"}


def online_series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    text = ", ".join(f'{k}="{v}"' for k, v in {**ONLINE, "instance": "s1:8000", **labels}.items())
    return {"series": f"{name}{{{text}}}", "values": values}


def test_online_answers_degraded_above_five_percent_for_ten_minutes_alert(tmp_path: Path) -> None:
    # Per minute: 600 answers, 60 of them degraded (10%) by breaker from minute 0; from minute 30
    # 6 (1%), and the alert resolves. Another group, "quiet", degrades 3% all along: never.
    inputs = [online_series("streamer_online_answers_total", {"source": "scored"}, "0+600x60"),
              online_series("streamer_online_degraded_total", {"reason": "breaker"}, "0+60x30 1800+6x30"),
              online_series("streamer_online_degraded_total", {"reason": "features"}, "0x60"),
              online_series("streamer_online_answers_total", {"source": "scored", "group": "quiet"}, "0+600x60"),
              online_series("streamer_online_degraded_total", {"reason": "deadline", "group": "quiet"}, "0+18x60")]
    fired = {"exp_labels": {"severity": "warning", "group": "streamer-fraud"},
             "exp_annotations": {"summary": "Group streamer-fraud: 10% of online answers are degraded for 10 minutes "
                                            "(the dashboard's degraded answers by reason: breaker, deadline or features)"}}
    result = promtool_test(tmp_path, [{"interval": "1m", "input_series": inputs, "alert_rule_test": [
        {"eval_time": "8m", "alertname": "StreamerOnlineDegraded", "exp_alerts": []},
        {"eval_time": "20m", "alertname": "StreamerOnlineDegraded", "exp_alerts": [fired]},
        {"eval_time": "50m", "alertname": "StreamerOnlineDegraded", "exp_alerts": []}]}])
    assert result.returncode == 0, result.stdout + result.stderr
