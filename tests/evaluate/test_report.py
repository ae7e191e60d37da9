"""The report's files: JSON a machine reads, one HTML page that opens offline with its pictures."""

from __future__ import annotations

import json
import re
from html import escape
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from streamer.evaluate.metrics import summarize
from streamer.evaluate.observations import Run
from streamer.evaluate.report import write_report
from streamer.evaluate.require import check, parse_require
from tests.evaluate.conftest import THRESHOLD, informative, observations, timings

N = 2000
EMBEDDED = '<img src="data:image/png;base64,'


def offline(html: str) -> None:
    """Nothing to fetch: no script, no link, no address (a data URI's base64 cannot hold one)."""
    lowered = html.lower()
    assert "<script" not in lowered and "<link" not in lowered
    assert "http" not in re.sub(r'src="data:image/png;base64,[A-Za-z0-9+/=]+"', "", lowered)
    assert "http://" not in lowered and "https://" not in lowered and "url(" not in lowered


def test_with_outcomes_the_files_hold_every_figure_and_the_gate(run: Run, tmp_path: Path) -> None:
    y, champion = informative(N)
    candidate = np.random.default_rng(1).permutation(champion)
    summary = summarize(observations(champion, candidate, y), timings(N), THRESHOLD, bootstrap=50)
    verdicts = check(parse_require("auc_delta>=-0.005,agreement>=0.5"), summary)
    html_path, json_path = write_report(summary, run, verdicts, tmp_path / "out")
    assert (html_path, json_path) == (tmp_path / "out" / "report.html", tmp_path / "out" / "report.json")

    document = json.loads(json_path.read_text())
    assert list(document)[:7] == ["run", "metrics", "missing", "gate", "confusion", "over_time", "curves"]
    assert document["metrics"] == summary.metrics and "auc_delta_low" in document["metrics"]
    assert document["run"]["candidate"]["digest"] == "sha256:bb22"
    assert [g["passed"] for g in document["gate"]] == [False, True]
    assert all(len(c["x"]) <= 200 for side in document["curves"].values() for c in side.values())
    assert json_path.read_text() == json.dumps(json.loads(json_path.read_text()), indent=2) + "\n"  # no NaN

    html = html_path.read_text()
    offline(html)
    assert html.count(EMBEDDED) >= 5
    assert all(re.search(r'alt="[^"]+"', tag) for tag in re.findall(r"<img [^>]+>", html))
    shown = escape(verdicts[0].message)
    assert shown.endswith("fails auc_delta &gt;= -0.005") and shown in html and 'class="fail"' in html and 'class="pass"' in html
    assert html.index(shown) < html.index("Agreement</h2>")  # the verdicts come first
    assert "eval-&lt;1&gt;" in html and "eval-<1>" not in html  # text is escaped
    assert "sha256:aa11" in html and "models/fraud-2.onnx" in html
    assert plt.get_fignums() == []  # no figure left behind


def test_without_outcomes_the_outcome_section_says_why(run: Run, tmp_path: Path) -> None:
    _, scores = informative(N)
    summary = summarize(observations(scores, scores + 0.01, None), timings(N), THRESHOLD)
    _, json_path = write_report(summary, run, [], tmp_path)
    html = (tmp_path / "report.html").read_text()
    offline(html)
    assert "No outcome metrics: no outcomes: give --labels FIELD or --labels-from PATH" in html
    assert html.count(EMBEDDED) == 3 and "<h2>Gate" not in html
    document = json.loads(json_path.read_text())
    assert document["missing"]["auc_delta"].startswith("no outcomes") and document["curves"] == {}


def test_missing_scores_are_null_in_the_json(run: Run, tmp_path: Path) -> None:
    _, scores = informative(N)
    candidate = scores.copy()
    candidate[0] = np.nan
    summary = summarize(observations(scores, candidate, None), timings(N), THRESHOLD)
    _, json_path = write_report(summary, run, [], tmp_path)
    text = json_path.read_text()
    assert "NaN" not in text
    assert json.loads(text)["over_time"]["bins"][0]["mean_abs_delta"] is None
