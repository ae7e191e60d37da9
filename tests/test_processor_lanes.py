"""A processor of several models (``route``), driven with fake clients: each model batches its own
rows and writes its own topic, and an offset is committed only once every earlier row's output, in
whatever lane, is acknowledged. The real broker tests (tests/integration/test_routing_kafka.py)
prove the same end to end with converter models."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np

from streamer.config import (
    BatchingConfig,
    Config,
    ModelConfig,
    ModelEntry,
    ModelsConfig,
    RouteConfig,
    dead_letter_topic,
    for_model,
)
from streamer.errors import InferenceError
from streamer.formats.configured import output_codec
from streamer.formats.json_events import JsonCodec
from streamer.house import ModelSide, Wiring
from streamer.kafka.clients import KafkaClients
from streamer.kafka.deadletter import header
from streamer.kafka.side import open_kafka
from streamer.observe.stats import Stats
from streamer.processor import Processor
from streamer.testing import FunctionRunner
from streamer.wiring.stream import build_processor
from tests.support.fakes import serving_of
from tests.test_processor import P0, Harness, config

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "models" / "fraud_mlp.onnx"


def routed(unknown: str = "dead_letter") -> Config:
    """Model ``a`` flushes every 2 rows; model ``b`` waits a minute: only a drain flushes it."""
    cfg = config(max_wait_ms=60_000)
    named = {"a": ModelEntry(ModelConfig(MODEL, "a", "1"), BatchingConfig(max_size=2, max_wait_ms=60_000)),
             "b": ModelEntry(ModelConfig(MODEL, "b", "1"))}
    return replace(cfg, model=named["a"].model, models=ModelsConfig(named=named, default="a"),
                   route=RouteConfig("tenant", {"x": "a", "y": "b"}, unknown),  # type: ignore[arg-type]
                   output=replace(cfg.output, topic_per_model=True))


def lanes_harness(cfg: Config, b_fails: threading.Event | None = None) -> Harness:
    """The fake clients' Harness with a processor of models a (scores x[:, 0]) and b (x[:, 0] + 1;
    failing while ``b_fails`` is set, with no fallback)."""
    h = Harness(config(max_wait_ms=60_000))  # its fake clients; its processor is replaced
    clients = KafkaClients(consumer=lambda **kw: h.consumer.configure(**kw), producer=h._producer,
                           ensure_topic=lambda topic, like: None)
    sides = []
    for name, add in (("a", 0.0), ("b", 1.0)):
        one = for_model(cfg, name)
        def score(x: np.ndarray, add: float = add) -> np.ndarray:
            if add and b_fails is not None and b_fails.is_set():
                raise InferenceError("CUDA error: an illegal memory access was encountered")
            return x[:, :1] + np.float32(add)

        runner = FunctionRunner(score, 32)
        sides.append(ModelSide(one, serving_of(one, runner, h.clock), output_codec(one)))
    h.processor = Processor(Wiring(cfg, sides[0].serving, JsonCodec(), sides[0].encoder, open_kafka(cfg, clients),
                                   clock=h.clock, models=tuple(sides)))
    return h


def tenant_event(i: int, tenant: str) -> bytes:
    return json.dumps({"event_id": f"e{i}", "entity_id": "c", "event_time": 1_700_000_000_000, "tenant": tenant,
                       "features": [0.5 * i] * 32}).encode()


def test_each_model_writes_its_own_topic_and_commits_wait_for_every_lane() -> None:
    cfg = routed()
    h = lanes_harness(cfg)
    h.consumer.rebalance("assign", [P0])
    tenants = ["x", "y", "x", "y", "x", "z", "y"]  # z: no model, a route dead letter
    h.consumer.append(P0, [tenant_event(i, t) for i, t in enumerate(tenants)])
    passes = [0]

    def a_scored_and_b_still_open(s: Stats) -> bool:
        # a's rows 0, 2 (and 4 with the next) are acknowledged; b's rows 1, 3, 6 wait in its open
        # batch: nothing may be committed past offset 1, b's first row
        assert all(c.get(P0, 0) <= 1 for c in h.consumer.commits), h.consumer.commits
        passes[0] += 1
        return passes[0] >= 30 and sum(t == "scores.a" for t, _ in h.producer.written) == 2

    h.run(a_scored_and_b_still_open)  # the stop drains b's batch and commits everything
    assert h.consumer.committed == {P0: 7}
    by_topic: dict[str, list[dict[str, object]]] = {}
    for topic, value in h.producer.written:
        if topic.startswith("scores."):
            by_topic.setdefault(topic, []).append(dict(output_codec(for_model(cfg, topic[7:])).decode(value)))
    assert {t: [p["source_offset"] for p in ps] for t, ps in by_topic.items()} == {"scores.a": [0, 2, 4],
                                                                                 "scores.b": [1, 3, 6]}
    assert {p["model_name"] for p in by_topic["scores.b"]} == {"b"}
    assert [p["scores"] for p in by_topic["scores.b"]] == [[1.5], [2.5], [4.0]]  # b's: 0.5 i + 1
    letters = [(v, hs) for (t, v), hs in zip(h.producer.written, h.producer.written_headers, strict=True)
               if t == dead_letter_topic(cfg)]
    assert [json.loads(v or b"")["tenant"] for v, _ in letters] == ["z"]
    assert header(letters[0][1], "stage") == "route"
    assert "'z'" in (header(letters[0][1], "exception.message") or "")
    assert set(h.processor.servings) == {"a", "b"} and h.processor.serving is h.processor.servings["a"]


def test_an_unknown_value_is_scored_by_the_default_model_when_asked() -> None:
    h = lanes_harness(routed(unknown="default"))
    h.consumer.rebalance("assign", [P0])
    h.consumer.append(P0, [tenant_event(i, t) for i, t in enumerate(["q", "y", "q"])])
    h.run(lambda s: sum(t == "scores.a" for t, _ in h.producer.written) == 2)
    assert h.consumer.committed == {P0: 3}
    assert [t for t, _ in h.producer.written] == ["scores.a", "scores.a", "scores.b"]  # b's at the drain
    assert h.processor.stats.dead_letters.total() == 0


def test_a_failing_model_without_a_fallback_holds_the_stream_until_it_answers() -> None:
    """Model b fails every batch (no fallback): the processor is unhealthy and commits nothing past
    b's first row, while a's batches are scored; once b answers, everything is committed."""
    cfg = routed()
    named = dict(cfg.models.named)
    named["b"] = replace(named["b"], batching=BatchingConfig(max_size=2, max_wait_ms=60_000))
    failing = threading.Event()
    failing.set()
    h = lanes_harness(replace(cfg, models=replace(cfg.models, named=named)), failing)
    h.consumer.rebalance("assign", [P0])
    h.consumer.append(P0, [tenant_event(i, t) for i, t in enumerate(["x", "y", "x", "y", "x", "x"])])
    passes = [0]

    def held_while_b_fails(s: Stats) -> bool:
        assert all(c.get(P0, 0) <= 1 for c in h.consumer.commits), h.consumer.commits
        if h.processor.unhealthy_reason is None:
            return False
        assert "model failing" in h.processor.unhealthy_reason
        passes[0] += 1
        if passes[0] < 40:  # many retries of b, and a's batches scored meanwhile
            return False
        assert sum(t == "scores.a" for t, _ in h.producer.written) == 4 and not any(
            t == "scores.b" for t, _ in h.producer.written)
        failing.clear()
        return True

    h.run(held_while_b_fails, lambda s: h.consumer.committed == {P0: 6} and h.processor.healthy)


def test_the_default_model_stands_behind_the_processor_when_the_route_sends_it_nothing() -> None:
    """Unknown values are dead letters and no value maps to the default: the stream scores with
    a and b alone, yet the processor's serving (the online server's default beside the stream) is
    the default model's, and the route's dead letters are named by it."""
    cfg = routed()
    named = {**cfg.models.named, "general": ModelEntry(ModelConfig(MODEL, "general", "9"))}
    cfg = replace(cfg, model=named["general"].model, models=ModelsConfig(named=named, default="general"))
    h = Harness(config(max_wait_ms=60_000))  # its fake clients; its processor is replaced
    clients = KafkaClients(consumer=lambda **kw: h.consumer.configure(**kw), producer=h._producer,
                           ensure_topic=lambda topic, like: None)
    h.processor = build_processor(cfg, clients=clients)
    assert list(h.processor.servings) == ["a", "b"]
    assert (h.processor.serving.model.name, h.processor.serving.model.version) == ("general", "9")
    h.consumer.rebalance("assign", [P0])
    h.consumer.append(P0, [tenant_event(i, t) for i, t in enumerate(["x", "z", "x"])])
    h.run(lambda s: sum(t == "scores.a" for t, _ in h.producer.written) == 2)
    assert h.consumer.committed == {P0: 3}
    letters = [hs for (t, _), hs in zip(h.producer.written, h.producer.written_headers, strict=True)
               if t == dead_letter_topic(cfg)]
    assert [header(hs, "stage") for hs in letters] == ["route"]
    assert header(letters[0], "model.name") == "general"
