"""`streamer evaluate`: a candidate model against the champion on a replayed range, reported and gated.

The range is read once, in its own consumer group (``<input.group_id>.evaluate.<run id>``, which
commits nothing), by the lake's topic source and loop (lake/topic.py, lake/run.py) with the
stream's decode, validation and batcher. Each batch is scored by both models (evaluate/pair.py),
the side-by-side rows go to a topic, an Iceberg table or a Parquet dataset (by default one beside
the report), and what each row says is kept for the report: each model's score and label, its
event time, and its outcome when one is given (``--labels FIELD``) or joined afterwards
(``--labels-from``, evaluate/labels.py). The report (evaluate/metrics.py, evaluate/report.py) is
written before the gate (evaluate/gate.py) is judged, so a refused candidate leaves its reasons.
"""

from __future__ import annotations

import datetime as dt
import re
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

from streamer.commands.lake import LakeHouse, Target, lake_house, new_run_id, open_sink
from streamer.config import Config, ModelConfig
from streamer.errors import EXIT_GATE, CandidateFailedError, ConfigError
from streamer.evaluate.labels import Known, LabelsFrom
from streamer.evaluate.observations import ModelInfo, Run
from streamer.evaluate.pair import PairColumns
from streamer.kafka.ranges import Ranges, When
from streamer.lake.sink import Shard, Sink
from streamer.lake.topic import replay_plan
from streamer.model.runner import ModelRunner
from streamer.observe.bar import ProgressBar

_WITHIN = re.compile(r"^(\d+)(s|m|h|d)$")
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


@dataclass(frozen=True, slots=True)
class Outputs:
    """Where the side-by-side predictions go: a topic, an Iceberg table, or a Parquet dataset
    (default: ``predictions/`` beside the report)."""

    topic: str | None = None
    table: str | None = None
    parquet: str | None = None

    def __post_init__(self) -> None:
        if sum(x is not None for x in (self.topic, self.table, self.parquet)) > 1:
            raise ConfigError("--to-topic", "give at most one of --to-topic, --to-table and --to-parquet")


@dataclass(frozen=True, slots=True)
class Evaluation:
    """What ``streamer evaluate`` does: the candidate, the range, the outcomes, the outputs, the gate."""

    candidate: Path
    start: When
    end: When
    report: Path | None = None  # default: evaluation-<run id>
    candidate_version: str | None = None
    labels: str | None = None  # --labels FIELD
    labels_from: LabelsFrom | None = None
    threshold: float | None = None  # default: shadow.flip_threshold
    require: str | None = None
    outputs: Outputs = Outputs()
    batch_size: int | None = None  # default: batching.max_size, the stream's batches
    min_events: int = 100
    bootstrap: int = 200

    def __post_init__(self) -> None:
        if self.labels is not None and self.labels_from is not None:
            raise ConfigError("--labels", "give one of --labels FIELD and --labels-from PATH")
        if self.min_events < 1:
            raise ConfigError("--min-events", f"must be >= 1, got {self.min_events}")
        if self.bootstrap < 0:
            raise ConfigError("--bootstrap", f"must be >= 0, got {self.bootstrap}")
        if self.batch_size is not None and self.batch_size < 1:
            raise ConfigError("--batch-size", f"must be >= 1, got {self.batch_size}")
        if self.threshold is not None and not 0.0 <= self.threshold <= 1.0:
            raise ConfigError("--threshold", f"must be within [0, 1], got {self.threshold}")


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


def evaluate(cfg: Config, ev: Evaluation, progress: TextIO | None = None) -> Result:
    """Score ``ev``'s range with the champion and the candidate, write both, report, and judge the gate."""
    from streamer.evaluate.gate import check, parse_require
    from streamer.evaluate.labels import Outcomes
    from streamer.evaluate.metrics import summarize
    from streamer.evaluate.pair import PairScorer
    from streamer.evaluate.report import write_report
    from streamer.lake.run import LakeRun
    from streamer.lake.topic import TopicSource
    from streamer.pipeline.stages import Stages
    from streamer.wiring import input_codec, prediction_schema

    conditions = parse_require(ev.require) if ev.require else ()  # a bad gate is refused before any work
    started, began = dt.datetime.now(dt.UTC), time.monotonic()
    run_id = new_run_id("eval-" + started.strftime("%Y%m%dT%H%M%S-") + f"{int(time.time_ns()) % 65536:04x}")
    ev = replace(ev, report=ev.report or Path(f"evaluation-{run_id}"))
    cfg = _evaluation_config(cfg, run_id)
    known = _labels(cfg, ev.labels_from)  # a labels source that cannot join is refused before the replay
    champion = lake_house(cfg)
    candidate = _candidate(cfg, ev, champion.runner)
    fields = [f["name"] for f in champion.runner.contract.avro_fields()]
    pair = PairColumns(prediction_schema(cfg, champion.runner), fields)
    threshold = cfg.shadow.flip_threshold if ev.threshold is None else ev.threshold
    decoder = input_codec(cfg)  # built once: a registry-backed one asks the registry
    scorer = PairScorer(champion.serving, candidate.serving, champion.columns, pair, run_id, threshold,
                        Outcomes(decoder if ev.labels else None, ev.labels), None if known is None else known.key)
    sink = _open_outputs(cfg, ev, pair)
    plan = replay_plan(cfg, ev.start, ev.end, Shard())
    resume = sink.resume(run_id, Shard(), plan, False)
    stages = Stages.serving(decoder, champion.encoder, cfg, champion.runner)
    bar = ProgressBar(resume.left(), progress or sys.stderr, "evaluate")
    lake = LakeRun(sink, scorer, run_id, ev.batch_size or cfg.batching.max_size, lambda c: bar.update(c.rows))
    stopped = None
    try:
        counts = lake.run(TopicSource(cfg, stages), resume)
    except CandidateFailedError as exc:  # reported, and the gate fails: a broken candidate is a refused one
        stopped, counts = str(exc), lake.counts
    bar.close(counts.rows)

    obs = scorer.observations()
    if known is not None:  # the outcomes joined on the compared rows' ids and times
        obs = replace(obs, outcome=known.join(scorer.ids, obs.event_time_ms))
    labels_text = known.how if known is not None else scorer.outcomes.describe()
    summary = summarize(obs, scorer.timings, threshold, bootstrap=ev.bootstrap, min_events=ev.min_events)
    verdicts = check(conditions, summary)
    facts = Run(run_id, _info(champion, cfg.model.path), _info(candidate, ev.candidate), _range_text(plan, obs),
                threshold, labels_text, counts.rejects, sink.name, started.isoformat(timespec="seconds"),
                time.monotonic() - began, stopped)
    assert ev.report is not None
    html, js = write_report(summary, facts, verdicts, ev.report)
    failed = [v for v in verdicts if not v.passed]
    lines = [f"evaluate {run_id}: {len(obs):,} events compared, {counts.rejects:,} rejected, "
             f"side by side into {sink.name}",
             *_headline(summary.metrics),
             f"report: {html} (and {js.name})"]
    lines += [("FAILED " if not v.passed else "ok     ") + v.message for v in verdicts]
    if stopped:
        lines.append(f"FAILED {stopped}")
    return Result(html, js, lines, EXIT_GATE if failed or stopped else 0)


def _evaluation_config(cfg: Config, run_id: str) -> Config:
    """The run's config: its own consumer group, and no fallback (a degraded score compares nothing)."""
    model: ModelConfig = replace(cfg.model, fallback_path=None, fallback_scores=None)
    return replace(cfg, input=replace(cfg.input, group_id=f"{cfg.input.group_id}.evaluate.{run_id}"), model=model)


def _candidate(cfg: Config, ev: Evaluation, champion: ModelRunner) -> LakeHouse:
    """The candidate's house: refused at start (exit 2) when it cannot serve the config as the
    champion does: a missing file, another input signature, an output the mapping cannot read."""
    if not ev.candidate.is_file():
        raise ConfigError("--candidate", f"no model file at {ev.candidate}")
    version = ev.candidate_version or ev.candidate.stem
    try:
        return lake_house(cfg, ev.candidate.resolve(), version, key="--candidate", like=champion)
    except ConfigError as exc:
        if exc.key == "--candidate":
            raise
        raise ConfigError(exc.key, f"the candidate {ev.candidate.name}: {exc.reason}") from exc


def _open_outputs(cfg: Config, ev: Evaluation, pair: PairColumns) -> Sink:
    out = ev.outputs
    if out.topic is not None:
        from streamer.evaluate.to_topic import TopicSink, topic_codec
        from streamer.kafka.clients import ensure_topic, make_producer

        if out.topic in (cfg.output.topic, *cfg.input.topics):
            raise ConfigError("--to-topic", f"{out.topic!r} is a topic of the live stream; name another one")
        ensure_topic(cfg, out.topic, like=cfg.output.topic)
        return TopicSink(out.topic, topic_codec(cfg, out.topic, pair.avro), make_producer(cfg),
                         cfg.output.ack_timeout_ms / 1000.0)
    target = Target(out.table, out.parquet if out.table or out.parquet else str(Path(ev.report or ".") / "predictions"))
    return open_sink(cfg, target, pair.schema)


def _labels(cfg: Config, spec: LabelsFrom | None) -> Known | None:
    if spec is None:
        return None
    from streamer.evaluate import labels

    return labels.prepare(spec, labels.read(cfg.lake, spec))


def _info(house: LakeHouse, path: Path) -> ModelInfo:
    model = house.serving.model
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
