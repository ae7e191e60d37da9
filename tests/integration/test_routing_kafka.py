"""Three models of different contracts on one mixed tenant stream, on the real broker.

The models come from the real converters (the ``converter_models`` fixture): ``reg`` (a Ridge
regressor, its one output as ``scores``), ``cls`` (a logistic regression reading four named JSON
fields stacked into its input, writing ``label`` and ``probabilities``) and ``two`` (a Ridge and a
PCA over one input, writing ``score`` and ``embedding``). Events name their tenant; ``route``
maps tenants to models. Every prediction equals ONNX Runtime run offline on its tenant's model,
on its model's own topic (``output.topic_per_model``); an unknown tenant is a ``route`` dead
letter; one model's new version reloads that model alone; one model failing every batch opens its
own breaker while the other two keep scoring.
"""

from __future__ import annotations

import shutil
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from prometheus_client import CollectorRegistry

from streamer.commands.demo import produce_events
from streamer.config import (
    BatchingConfig,
    Config,
    InputSource,
    ModelConfig,
    ModelEntry,
    ModelsConfig,
    OutputTarget,
    RouteConfig,
    prediction_topic,
    with_overrides,
)
from streamer.formats.json_events import JsonCodec
from streamer.kafka.deadletter import header
from streamer.kafka.topics import create_topics
from streamer.wiring.models import house_of
from streamer.wiring.stream import build_processor
from tests.conftest import Topics, committed_offsets, end_offsets, make_config, read_all, run_until_outputs
from tests.integration.test_converters_kafka import LABEL_PROBS, offline, same_bits
from tests.support.faults import wait_until

pytestmark = pytest.mark.kafka
TENANTS = {"acme": "reg", "globex": "cls", "7": "two"}  # the tenant 7 is a JSON number: routed by its text


def entry(path: Path, name: str, version: str = "1", inputs: dict[str, Any] | None = None,
          outputs: dict[str, Any] | None = None, **keys: Any) -> ModelEntry:
    return ModelEntry(ModelConfig(
        path, name, version, inputs=None if inputs is None else {k: InputSource.parse(v, k) for k, v in inputs.items()},
        outputs=None if outputs is None else {k: OutputTarget.parse(v, k) for k, v in outputs.items()}, **keys),
        BatchingConfig(max_size=32, max_wait_ms=20))


def routed(bootstrap: str, topics: Topics, models: Path, unknown: str = "dead_letter", **reg: Any) -> Config:
    """The example config reading JSON, with the three models routed by tenant, each to its topic."""
    cfg = with_overrides(make_config(bootstrap, topics), input={"format": "json", "schema": None},
                         output={"schema": None, "topic_per_model": True})
    named = {"reg": entry(reg.pop("path", models / "regressor.onnx"), "reg", **reg),
             "cls": entry(models / "logreg.onnx", "cls", inputs={"features": ["f0", "f1", "f2", "f3"]},
                          outputs=LABEL_PROBS),
             "two": entry(models / "two_outputs.onnx", "two", outputs={"score": "score", "embedding": "embedding"})}
    cfg = replace(cfg, model=named["reg"].model, models=ModelsConfig(named=named, default="reg"),
                  route=RouteConfig("tenant", {t: m for t, m in TENANTS.items()}, unknown))  # type: ignore[arg-type]
    create_topics(bootstrap, {prediction_topic(cfg, name): 1 for name in named})
    return cfg


def events(n: int, seed: int = 3, start: int = 0) -> tuple[list[dict[str, Any]], np.ndarray]:
    """``n`` events of the tenants in turn, every 10th of an unknown one; the features twice: as
    the array ``features`` and as the fields f0..f3."""
    x = np.random.default_rng(seed).standard_normal((n, 4)).astype(np.float32)
    tenants: list[Any] = ["acme", "globex", 7]
    out = [{"event_id": f"e{start + i}", "entity_id": "c", "event_time": 1_700_000_000_000 + i,
            "tenant": "zeta" if i % 10 == 9 else tenants[i % 3], "features": x[i].tolist(),
            **{f"f{k}": float(x[i, k]) for k in range(4)}} for i in range(n)]
    return out, x


def produce(bootstrap: str, topic: str, evs: list[dict[str, Any]]) -> None:
    codec = JsonCodec()
    produce_events(bootstrap, topic, ((str(e["tenant"]).encode(), codec.encode(e)) for e in evs))


def predictions(bootstrap: str, cfg: Config, name: str) -> dict[str, dict[str, Any]]:
    """Model ``name``'s predictions on its topic, by event id."""
    decoder = house_of(cfg, name).encoder
    return {p["event_id"]: p for p in (dict(decoder.decode(m.value()))
                                      for m in read_all(bootstrap, prediction_topic(cfg, name)))}


def model_of(e: dict[str, Any]) -> str | None:
    return TENANTS.get(str(e["tenant"]))


def expected(models: Path, name: str, x: np.ndarray) -> dict[str, Any]:
    if name == "reg":
        return {"scores": offline(models / "regressor.onnx", {"features": x})["variable"]}
    if name == "cls":
        o = offline(models / "logreg.onnx", {"features": x})
        return {"label": o["label"], "probabilities": o["probabilities"]}
    o = offline(models / "two_outputs.onnx", {"features": x})
    return {"score": o["score"][:, 0], "embedding": o["embedding"]}


def test_three_models_score_their_tenants_as_onnx_runtime_does_each_on_its_topic(
        bootstrap: str, topics: Topics, converter_models: Path) -> None:
    cfg = routed(bootstrap, topics, converter_models)
    evs, x = events(300)
    produce(bootstrap, topics.input, evs)
    registry = CollectorRegistry()
    processor = build_processor(cfg, registry=registry)
    run_until_outputs(processor, len(evs))
    for name in ("reg", "cls", "two"):
        rows = [i for i, e in enumerate(evs) if model_of(e) == name]
        got = predictions(bootstrap, cfg, name)
        assert sorted(got) == sorted(evs[i]["event_id"] for i in rows), name  # its tenant's, all of them
        for field, values in expected(converter_models, name, x[rows]).items():
            assert same_bits([got[evs[i]["event_id"]][field] for i in rows], np.asarray(values)), (name, field)
        assert {p["model_name"] for p in got.values()} == {name}
        assert registry.get_sample_value("streamer_batch_size_rows_sum", {"model": name}) == len(rows)
    letters = [(JsonCodec().decode(m.value()), m.headers()) for m in read_all(bootstrap, topics.dlq)]
    assert sorted(e["event_id"] for e, _ in letters) == sorted(e["event_id"] for e in evs if e["tenant"] == "zeta")
    assert {header(h, "stage") for _, h in letters} == {"route"}
    assert all("'tenant' is 'zeta'" in (header(h, "exception.message") or "") for _, h in letters)
    ends = end_offsets(bootstrap, topics.input)
    assert committed_offsets(bootstrap, topics.group, topics.input) == ends and sum(ends.values()) == len(evs)


def test_an_unknown_tenant_is_scored_by_the_default_model_when_asked(
        bootstrap: str, topics: Topics, converter_models: Path) -> None:
    cfg = routed(bootstrap, topics, converter_models, unknown="default")
    evs, x = events(40)
    produce(bootstrap, topics.input, evs)
    processor = build_processor(cfg)
    run_until_outputs(processor, len(evs))
    assert processor.stats.dead_letters.total() == 0
    rows = [i for i, e in enumerate(evs) if model_of(e) in ("reg", None)]
    got = predictions(bootstrap, cfg, "reg")
    assert sorted(got) == sorted(evs[i]["event_id"] for i in rows)
    want = expected(converter_models, "reg", x[rows])["scores"]
    assert same_bits([got[evs[i]["event_id"]]["scores"] for i in rows], want)


def failing_model(path: Path) -> Path:
    """A [N, 4] -> ``variable`` [N, 1] model that passes the start-up probe (zeros) and fails on
    any live row: it gathers column ``ceil(|x0|) * 100`` of a 4-column input, out of range."""
    x = helper.make_tensor_value_info("features", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("variable", TensorProto.FLOAT, ["N", 1])
    nodes = [
        helper.make_node("Slice", ["features", "zero", "one", "axis"], ["x0"]),
        helper.make_node("Abs", ["x0"], ["a"]), helper.make_node("Ceil", ["a"], ["c"]),
        helper.make_node("Mul", ["c", "hundred"], ["m"]), helper.make_node("Cast", ["m"], ["idx"], to=TensorProto.INT64),
        helper.make_node("GatherElements", ["features", "idx"], ["variable"], axis=1),
    ]
    consts = [helper.make_tensor("zero", TensorProto.INT64, [1], [0]), helper.make_tensor("one", TensorProto.INT64, [1], [1]),
              helper.make_tensor("axis", TensorProto.INT64, [1], [1]),
              helper.make_tensor("hundred", TensorProto.FLOAT, [], [100.0])]
    graph = helper.make_graph(nodes, "failing", [x], [y], initializer=consts)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


def test_one_model_reloads_alone_and_one_failing_model_degrades_alone(
        bootstrap: str, topics: Topics, converter_models: Path, tmp_path: Path) -> None:
    """``reg`` fails every live batch (its fallback, the real regressor, scores: degraded, its
    breaker opens); ``cls`` is a folder of versions whose version 2 lands mid-stream (reloaded
    alone: the others' versions and reload counts stay); ``two`` scores throughout as offline."""
    (tmp_path / "cls" / "1").mkdir(parents=True)
    shutil.copy(converter_models / "logreg.onnx", tmp_path / "cls" / "1" / "model.onnx")
    cfg = routed(bootstrap, topics, converter_models, path=failing_model(tmp_path / "failing.onnx"),
                 fallback_path=converter_models / "regressor.onnx", breaker_failures=1, breaker_probe_ms=60_000,
                 breaker_probe_max_ms=60_000, reload_check_ms=100)
    named = dict(cfg.models.named)
    named["cls"] = replace(named["cls"], model=replace(named["cls"].model, path=tmp_path / "cls", version="",
                                                       reload_check_ms=100))
    cfg = replace(cfg, models=replace(cfg.models, named=named))
    registry = CollectorRegistry()
    processor = build_processor(cfg, registry=registry)
    first, x1 = events(150)
    second, x2 = events(150, seed=4, start=150)
    thread = threading.Thread(target=processor.run, daemon=True)
    thread.start()
    try:
        produce(bootstrap, topics.input, first)
        wait_until(lambda: processor.stats.outputs >= len(first), 60, "the first half handled")
        staged = tmp_path / "cls" / "2.staged"
        staged.mkdir()
        shutil.copy(converter_models / "lightgbm.onnx", staged / "model.onnx")
        staged.rename(tmp_path / "cls" / "2")  # whole, as a deploy should
        wait_until(lambda: processor.servings["cls"].model.version == "2", 60, "cls version 2 swapped in")
        produce(bootstrap, topics.input, second)
        wait_until(lambda: processor.stats.outputs >= len(first) + len(second), 60, "the second half handled")
    finally:
        processor.stop()
        thread.join(60)
    assert not thread.is_alive()

    def sample(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert sample("streamer_model_breaker_state", model="reg") == 2  # open: the fallback scores
    assert sample("streamer_model_breaker_state", model="two") == sample("streamer_model_breaker_state", model="cls") == 0
    assert sample("streamer_model_reloads_total", model="cls", result="swapped") == 1
    assert sample("streamer_model_reloads_total", model="two", result="swapped") == 0
    assert sample("streamer_model_reloads_total", model="reg", result="swapped") == 0
    reg, cls, two = (predictions(bootstrap, cfg, name) for name in ("reg", "cls", "two"))
    evs, x = first + second, np.concatenate([x1, x2])
    assert all(p["degraded"] and p["model_name"] == "reg-fallback" for p in reg.values())
    assert len(reg) == sum(model_of(e) == "reg" for e in evs)
    assert not any(p["degraded"] for p in (*cls.values(), *two.values()))
    assert {p["model_version"] for p in two.values()} == {"1"}
    assert [cls[e["event_id"]]["model_version"] for e in evs if model_of(e) == "cls"] == (
        ["1"] * sum(model_of(e) == "cls" for e in first) + ["2"] * sum(model_of(e) == "cls" for e in second))
    rows = [i for i, e in enumerate(evs) if model_of(e) == "two"]
    want = expected(converter_models, "two", x[rows])
    assert same_bits([two[evs[i]["event_id"]]["embedding"] for i in rows], want["embedding"])
    after = [i for i, e in enumerate(second) if model_of(e) == "cls"]
    probs = offline(converter_models / "lightgbm.onnx", {"features": x2[after]})["probabilities"]
    assert same_bits([cls[second[i]["event_id"]]["probabilities"] for i in after], probs)
