"""The evaluation's files: report.json with every figure for machines, report.html for people.

The HTML is one self-contained file: an inline style, the pictures embedded as base64 PNG, no
script, no link and no address to fetch, so it opens the same offline, attached to a ticket or in
a CI artifact. Every text in it is escaped.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from datetime import datetime, timezone
from html import escape
from pathlib import Path
from typing import Any

from streamer.evaluate import plots
from streamer.evaluate.figures import OUTCOME_NAMES, SIDES, Summary
from streamer.evaluate.observations import Run
from streamer.evaluate.require import Verdict

COUNTS = ("events", "labeled", "champion_failed", "candidate_failed")  # whole numbers in report.json

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 60em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; border-bottom: 1px solid #ccc; margin-top: 2em; }
table { border-collapse: collapse; margin: 0.5em 0; } td, th { border: 1px solid #ccc; padding: 0.2em 0.6em; }
th { background: #f3f3f3; text-align: left; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
.pass { color: #17692c; background: #e6f4ea; } .fail { color: #a50e0e; background: #fce8e6; }
ul.gate { list-style: none; padding: 0; } ul.gate li { padding: 0.3em 0.6em; margin: 0.2em 0; }
.why { color: #666; font-style: italic; } img { max-width: 100%; display: block; margin: 0.5em 0; }
"""


def write_report(summary: Summary, run: Run, verdicts: Sequence[Verdict], folder: Path) -> tuple[Path, Path]:
    """Write ``folder/report.html`` and ``folder/report.json``; returns their paths (html, json)."""
    folder.mkdir(parents=True, exist_ok=True)
    html_path, json_path = folder / "report.html", folder / "report.json"
    json_path.write_text(json.dumps(as_json(summary, run, verdicts), indent=2, allow_nan=False) + "\n")
    html_path.write_text(as_html(summary, run, verdicts))
    return html_path, json_path


def _clean(value: Any) -> Any:
    """JSON-ready: tuples as lists, NaN and infinities as null, keys in their given order."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _clean(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return value


def as_json(summary: Summary, run: Run, verdicts: Sequence[Verdict]) -> dict[str, Any]:
    """The report's JSON document, in a fixed key order."""
    return _clean({
        "run": run,
        "metrics": {k: int(v) if k in COUNTS else v for k, v in summary.metrics.items()},
        "missing": summary.missing,
        "gate": [{"condition": str(v.condition), "metric": v.condition.metric, "op": v.condition.op,
                  "bound": v.condition.bound, "value": v.value, "passed": v.passed, "message": v.message}
                 for v in verdicts],
        "confusion": summary.confusion,
        "over_time": {"bin": summary.bin, "bins": summary.over_time},
        "curves": summary.curves,
        "histograms": summary.histograms,
    })


def number(value: float | None) -> str:
    """A figure for people: four significant digits, counts as integers."""
    if value is None or not math.isfinite(value):
        return "-"
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:.4g}"


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], numeric_from: int = 1) -> str:
    cells = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "".join(
        "<tr>" + "".join(f'<td class="n">{escape(c)}</td>' if i >= numeric_from else f"<td>{escape(c)}</td>"
                         for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><tr>{cells}</tr>{body}</table>"


def _img(png: str | None, alt: str) -> str:
    return f'<img src="data:image/png;base64,{png}" alt="{escape(alt)}">' if png else ""


def _metric_rows(summary: Summary, names: Sequence[tuple[str, str]]) -> list[list[str]]:
    """(label, metric) pairs as rows: the value, or why it is missing."""
    return [[label, number(summary.metrics[name]) if name in summary.metrics
             else "missing: " + summary.missing.get(name, "not computed")] for label, name in names]


def as_html(summary: Summary, run: Run, verdicts: Sequence[Verdict]) -> str:
    """The report as one self-contained HTML page."""
    parts = [f"<h1>Evaluation {escape(run.run_id)}: candidate {escape(run.candidate.name)} version "
             f"{escape(run.candidate.version)} against champion {escape(run.champion.name)} version "
             f"{escape(run.champion.version)}</h1>", _header(run)]
    if verdicts:
        parts.append(_gate(verdicts))
    parts += [_agreement(summary), _deltas(summary), _outcomes(summary), _timing(summary)]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>Evaluation {escape(run.run_id)}</title><style>{STYLE}</style></head>\n<body>\n"
            + "\n".join(parts) + "\n</body></html>\n")


def _header(run: Run) -> str:
    facts = [["run id", run.run_id], ["started at", run.started_at], ["took", f"{run.seconds:.1f} s"],
             ["range", run.range], ["threshold", f"score >= {run.threshold:g}"],
             ["outcomes", run.labels or "none given"], ["rows not compared", f"{run.rejects:,}"],
             ["predictions written to", run.written_to or "nowhere"]]
    if run.stopped:
        facts.insert(0, ["STOPPED before the range's end", run.stopped])
    models = [[side, m.name, m.version, m.digest, m.path] for side, m in zip(SIDES, (run.champion, run.candidate))]
    return ("<h2>Run</h2>" + _table(["fact", "value"], facts, numeric_from=9)
            + _table(["side", "name", "version", "digest", "path"], models, numeric_from=9))


def _gate(verdicts: Sequence[Verdict]) -> str:
    failed = sum(not v.passed for v in verdicts)
    head = f"{failed} of {len(verdicts)} conditions failed" if failed else f"all {len(verdicts)} conditions hold"
    items = "".join(f'<li class="{"pass" if v.passed else "fail"}">{"PASS" if v.passed else "FAIL"}: '
                    f"{escape(v.message)}</li>" for v in verdicts)
    return f'<h2>Gate: <span class="{"fail" if failed else "pass"}">{escape(head)}</span></h2><ul class="gate">{items}</ul>'


def _agreement(summary: Summary) -> str:
    c = summary.confusion
    rows = [[f"champion {label}", *(f"{n:,}" for n in row)] for label, row in zip(c.labels, c.counts)]
    over_time = [[datetime.fromtimestamp(b.start_ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M"),
                  f"{b.events:,}", number(b.agreement), number(b.mean_abs_delta)] for b in summary.over_time]
    return ("<h2>Agreement</h2>" + _table(["metric", "value"], _metric_rows(
                summary, [("events compared", "events"), ("label agreement", "agreement")]))
            + "<p>Confusion of the labels (rows: champion, columns: candidate)</p>"
            + _table(["", *(f"candidate {label}" for label in c.labels)], rows)
            + _img(plots.agreement_over_time(summary), f"agreement by {summary.bin} of event time")
            + f"<details><summary>Agreement by {escape(summary.bin)} (UTC)</summary>"
            + _table([summary.bin, "events", "agreement", "mean |delta|"], over_time) + "</details>")


def _deltas(summary: Summary) -> str:
    rows = _metric_rows(summary, [("mean |delta|", "mean_abs_delta"), ("p50 |delta|", "p50_abs_delta"),
                                  ("p99 |delta|", "p99_abs_delta"), ("max |delta|", "max_abs_delta")])
    return ("<h2>Score difference</h2>" + _table(["metric", "value"], rows)
            + _img(plots.delta_histogram(summary), "histogram of candidate minus champion score")
            + "<h2>Score distributions</h2>"
            + _table(["metric", "value"], _metric_rows(summary, [("PSI (candidate against champion)", "psi")]))
            + _img(plots.score_distributions(summary), "champion and candidate score distributions overlaid"))


def _outcomes(summary: Summary) -> str:
    labeled = _table(["metric", "value"], _metric_rows(
        summary, [("labeled events", "labeled"), ("labeled fraction", "labeled_fraction")]))
    if "champion_auc" not in summary.metrics:
        why = summary.missing.get("champion_auc", "not computed")
        return f'<h2>Outcomes</h2>{labeled}<p class="why">No outcome metrics: {escape(why)}</p>'
    m = summary.metrics
    rows = [[name, number(m.get(f"champion_{name}")), number(m.get(f"candidate_{name}")),
             number(m.get(f"{name}_delta")),
             f"[{number(m[f'{name}_delta_low'])}, {number(m[f'{name}_delta_high'])}]"
             if f"{name}_delta_low" in m else summary.missing.get(f"{name}_delta_low", "-")]
            for name in OUTCOME_NAMES]
    return ("<h2>Outcomes</h2>" + labeled
            + _table(["metric", "champion", "candidate", "delta", "delta 95% interval"], rows)
            + _img(plots.curve(summary, "roc"), "ROC curves of both models overlaid")
            + _img(plots.curve(summary, "pr"), "precision-recall curves of both models overlaid")
            + _img(plots.curve(summary, "calibration"), "calibration curves of both models"))


def _timing(summary: Summary) -> str:
    m = summary.metrics
    names = [("events/s", "events_per_s"), ("p50 batch ms", "p50_batch_ms"), ("p99 batch ms", "p99_batch_ms"),
             ("CPU us per event (the process's, during its calls)", "cpu_us_per_event"),
             ("rows it failed on (left out)", "failed")]
    rows = [[label, *(number(m.get(f"{side}_{name}")) for side in SIDES)] for label, name in names]
    rows.append(["speedup (candidate events/s over champion's)", "", number(m.get("speedup"))])
    return "<h2>Timing on the same batches</h2>" + _table(["metric", *SIDES], rows)
