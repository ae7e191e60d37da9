"""The evaluation's house: the champion and the candidate on one range, side by side, and where their rows go.

Both models are built as a lake run's (lake.py: no challengers, no reloads) in the evaluation's
own consumer group, without a fallback (a degraded score compares nothing); the candidate is
refused at start when it cannot serve the config as the champion does. The range is read once by
the lake's topic source, with the champion's decode and validation, and its rows are written to a
topic, an Iceberg table or a Parquet dataset (by default ``predictions/`` beside the report).
One model of a routed config (``evaluate --model``) is evaluated on the events the route sends it
(:class:`RoutedTo`): the others are passed over.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from streamer.config import Config, ModelConfig, RouteConfig, default_model, route_models
from streamer.errors import ConfigError, RouteError
from streamer.evaluate import labels
from streamer.evaluate.labels import Known, LabelsFrom, Outcomes
from streamer.evaluate.pair import PairColumns, PairScorer
from streamer.evaluate.to_topic import TopicSink, topic_codec
from streamer.formats.codec import Codec
from streamer.formats.configured import input_codec
from streamer.kafka.clients import ensure_topic, make_producer
from streamer.kafka.ranges import Ranges, When
from streamer.lake.sink import Resume, Shard, Sink
from streamer.lake.topic import Only, TopicSource, replay_plan
from streamer.model.runner import ModelRunner
from streamer.pipeline.records import Messages
from streamer.pipeline.route import Router
from streamer.pipeline.stages import Reject, Stages
from streamer.wiring.lake import LakeHouse, Target, lake_house, open_sink


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
class RoutedTo:
    """The events a route sends one model: the route, its default model, the models it scores
    with (config.route_models) and the model evaluated."""

    route: RouteConfig
    default: str
    models: tuple[str, ...]
    model: str

    @classmethod
    def of(cls, cfg: Config, model: str) -> RoutedTo | None:
        """``model``'s events of ``cfg``'s route (None: no route, every event is the model's);
        a model the route sends no event is refused on ``--model``."""
        if cfg.route.field is None:
            return None
        if model not in route_models(cfg):
            raise ConfigError("--model", f"route.map sends model {model!r} no event (nor, as the default, the "
                                         f"values it does not name): nothing of the range is its to evaluate")
        return cls(cfg.route, default_model(cfg), route_models(cfg), model)

    def only(self, decoder: Codec) -> Only:
        """A chunk's messages the route sends the model, and the rejects of those that cannot be
        read; the events of the other models (and unknown values' dead letters) are passed over."""
        router = Router(self.route, self.default, self.models, decoder)

        def only(chunk: Messages) -> tuple[Messages, list[Reject]]:
            parts, rejects = router.split(chunk)
            kept = parts.get(self.model, chunk.take(np.empty(0, np.intp)))
            return kept, [r for r in rejects if not isinstance(r[0], RouteError)]
        return only


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
    routed: RoutedTo | None = None  # the champion's events of a route; None: every event of the range

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
class EvaluationJob:
    """An evaluation ready to run: its config, both houses, the side-by-side scorer, the sink,
    the range (planned once) and where it starts, the source, and the outcomes joined afterwards
    (``--labels-from``; None: none)."""

    run_id: str
    cfg: Config
    champion: LakeHouse
    candidate: LakeHouse
    scorer: PairScorer
    sink: Sink
    plan: Ranges
    resume: Resume
    source: TopicSource
    known: Known | None
    threshold: float


def evaluation_job(cfg: Config, ev: Evaluation, run_id: str) -> EvaluationJob:
    """Build ``ev``'s run: a labels source that cannot join, a candidate that cannot serve, an
    output that cannot be written are refused here, before anything is replayed."""
    cfg = _evaluation_config(cfg, run_id)
    known = _labels(cfg, ev.labels_from)
    champion = lake_house(cfg)
    candidate = _candidate(cfg, ev, champion.model.runner)
    model = champion.model
    pair = PairColumns(model.schema_out, [f["name"] for f in model.contract.avro_fields()])
    threshold = cfg.shadow.flip_threshold if ev.threshold is None else ev.threshold
    decoder = input_codec(cfg.input, model.schema_in)  # built once: a registry-backed one asks the registry
    scorer = PairScorer(model.serving, candidate.model.serving, champion.columns, pair, run_id, threshold,
                        Outcomes(decoder if ev.labels else None, ev.labels), None if known is None else known.key)
    sink = _open_outputs(cfg, ev, pair)
    plan = replay_plan(cfg, ev.start, ev.end, Shard())
    source = TopicSource(cfg, Stages.serving(decoder, model.encoder, cfg, model.runner),
                         None if ev.routed is None else ev.routed.only(decoder))
    return EvaluationJob(run_id, cfg, champion, candidate, scorer, sink, plan, sink.resume(run_id, Shard(), plan, False),
                         source, known, threshold)


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
        if out.topic in (cfg.output.topic, *cfg.input.topics):
            raise ConfigError("--to-topic", f"{out.topic!r} is a topic of the live stream; name another one")
        ensure_topic(cfg, out.topic, like=cfg.output.topic)
        return TopicSink(out.topic, topic_codec(cfg, out.topic, pair.avro), make_producer(cfg),
                         cfg.output.ack_timeout_ms / 1000.0)
    target = Target(out.table, out.parquet if out.table or out.parquet else str(Path(ev.report or ".") / "predictions"))
    return open_sink(cfg.lake, target, pair.schema)


def _labels(cfg: Config, spec: LabelsFrom | None) -> Known | None:
    if spec is None:
        return None
    return labels.prepare(spec, labels.read(cfg.lake, spec))


