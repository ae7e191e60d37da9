"""`streamer evaluate`: a candidate model against the champion on a replayed range, reported and gated.

The range is read once, in its own consumer group (``<input.group_id>.evaluate.<run id>``, which
commits nothing), by the lake's topic source and loop (lake/topic.py, lake/run.py) with the
stream's decode, validation and batcher. Each batch is scored by both models (evaluate/pair.py),
the side-by-side rows go to a topic, an Iceberg table or a Parquet dataset (by default one beside
the report), and what each row says is kept for the report: each model's score and label, its
event time, and its outcome when one is given (``--labels FIELD``) or joined afterwards
(``--labels-from``, evaluate/labels.py). The report (evaluate/metrics.py, evaluate/report.py) is
written before the gate (evaluate/require.py) is judged, so a refused candidate leaves its reasons.
A stop (SIGTERM, Ctrl+C) ends the reading after the chunk in hand: the rows read are scored,
written and committed, the report covers them and says the run was stopped, and the exit code is
6 whatever the gate says of a part of the range.
"""

from __future__ import annotations

import datetime as dt
import re
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

from streamer.config import Config
from streamer.errors import EXIT_GATE, EXIT_STOPPED, CandidateFailedError, ConfigError
from streamer.evaluate.metrics import summarize
from streamer.evaluate.observations import ModelInfo, Run
from streamer.evaluate.report import write_report
from streamer.evaluate.require import check, parse_require
from streamer.house import new_run_id
from streamer.kafka.ranges import Ranges
from streamer.lake.run import LakeRun
from streamer.observe.bar import ProgressBar
from streamer.wiring.evaluate import Evaluation, evaluation_job
from streamer.wiring.lake import LakeHouse

_WITHIN = re.compile(r"^(\d+)(s|m|h|d)$")
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


@dataclass(frozen=True, slots=True)
class Result:
    """A finished evaluation: the report's files, the gate's verdicts and the exit code."""

    html: Path
    json: Path
    lines: list[str]
    exit_code: int


def parse_within(text: str | None) -> int | None:
    """``--labels-within``: ``7d``, ``12h``, ``30m``, ``90s`` as milliseconds."""
    if text is None:
        return None
    m = _WITHIN.match(text.strip())
    if m is None:
        raise ConfigError("--labels-within", f"{text!r} is not a duration such as 7d, 12h, 30m or 90s")
    return int(m.group(1)) * _UNIT_MS[m.group(2)]


def evaluate(cfg: Config, ev: Evaluation, progress: TextIO | None = None,
             stop: threading.Event | None = None) -> Result:
    """Score ``ev``'s range with the champion and the candidate, write both, report, and judge the
    gate; ``stop`` set ends the reading early (reported, exit 6)."""
    conditions = parse_require(ev.require) if ev.require else ()  # a bad gate is refused before any work
    started, began = dt.datetime.now(dt.UTC), time.monotonic()
    run_id = new_run_id("eval-" + started.strftime("%Y%m%dT%H%M%S-") + f"{int(time.time_ns()) % 65536:04x}")
    ev = replace(ev, report=ev.report or Path(f"evaluation-{run_id}"))
    job = evaluation_job(cfg, ev, run_id)
    scorer, known = job.scorer, job.known
    bar = ProgressBar(job.resume.left(), progress or sys.stderr, "evaluate")
    lake = LakeRun(job.sink, scorer, run_id, ev.batch_size or job.cfg.batching.max_size, lambda c: bar.update(c.rows))
    stopped = None
    try:
        counts = lake.run(job.source, job.resume, stop)
    except CandidateFailedError as exc:  # reported, and the gate fails: a broken candidate is a refused one
        stopped, counts = str(exc), lake.counts
    if counts.stopped:
        stopped = (f"stopped by SIGTERM or Ctrl+C after {counts.rows:,} of {job.resume.left():,} offsets in range: "
                   "the report covers the events read before it; run the evaluation again for the whole range")
    scored_s = time.monotonic() - began  # the models loaded, the range read and scored: before the metrics
    bar.close(counts.rows)

    obs = scorer.observations()
    if known is not None:  # the outcomes joined on the compared rows' ids and times
        obs = replace(obs, outcome=known.join(scorer.ids, obs.event_time_ms))
    labels_text = known.how if known is not None else scorer.outcomes.describe()
    summary = summarize(obs, scorer.timings, job.threshold, bootstrap=ev.bootstrap, min_events=ev.min_events)
    verdicts = check(conditions, summary)
    facts = Run(run_id, _info(job.champion, cfg.model.path), _info(job.candidate, ev.candidate),
                _range_text(job.plan, obs), job.threshold, labels_text, counts.rejects, job.sink.name,
                started.isoformat(timespec="seconds"), time.monotonic() - began, stopped)
    assert ev.report is not None
    html, js = write_report(summary, facts, verdicts, ev.report)
    failed = [v for v in verdicts if not v.passed]
    lines = [f"evaluate {run_id}{' stopped' if counts.stopped else ''}: {len(obs):,} events compared, "
             f"{counts.rejects:,} rejected, side by side into {job.sink.name}",
             *_headline(summary.metrics),
             f"throughput {counts.rows / max(scored_s, 1e-9):,.0f} events/s read and scored by both models, "
             f"{scored_s:.1f} s to the last row",
             f"report: {html} (and {js.name})"]
    lines += [("FAILED " if not v.passed else "ok     ") + v.message for v in verdicts]
    if stopped:
        lines.append(f"FAILED {stopped}")
    return Result(html, js, lines, EXIT_STOPPED if counts.stopped else EXIT_GATE if failed or stopped else 0)


def _info(house: LakeHouse, path: Path) -> ModelInfo:
    model = house.model.serving.model
    return ModelInfo(model.name, model.version, model.digest, str(path))


def _range_text(plan: Ranges, obs: Any) -> str:
    offsets = sum(b - a for a, b in plan.values())
    parts = ", ".join(f"{t}[{p}] {a}..{b}" for (t, p), (a, b) in sorted(plan.items()))
    if len(obs):
        lo, hi = (dt.datetime.fromtimestamp(x / 1000, dt.UTC).isoformat(timespec="seconds")
                  for x in (int(obs.event_time_ms.min()), int(obs.event_time_ms.max())))
        return f"{offsets:,} offsets ({parts}); event times {lo} .. {hi}"
    return f"{offsets:,} offsets ({parts})"


def _headline(metrics: dict[str, float]) -> list[str]:
    keys = ("agreement", "p99_abs_delta", "psi", "auc_delta", "labeled_fraction", "speedup")
    shown = [f"{k} {metrics[k]:.4g}" for k in keys if k in metrics]
    return [", ".join(shown)] if shown else []
