"""A replay of a routed config to a topic, on the real broker: each event is scored by the model its
tenant names, as the stream scores it (the stream's route and lanes)."""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from streamer.cli_batch import one_model
from streamer.commands.demo import produce_events
from streamer.commands.replay import run_replay
from streamer.config import RouteConfig, with_overrides
from streamer.config_file import load_config
from streamer.formats.avro import AvroCodec, load_schema
from streamer.formats.json_events import JsonCodec
from streamer.kafka.ranges import When
from tests.commands.test_models_batch import ENCODER, models_config, offline
from tests.conftest import Topics, read_all
from tests.jobs.support import ROOT

pytestmark = pytest.mark.kafka
MLP = ROOT / "models" / "fraud_mlp.onnx"


def test_a_routed_replay_to_a_topic_scores_each_event_with_its_tenants_model(
        bootstrap: str, topics: Topics, tmp_path: Path) -> None:
    cfg = load_config(models_config(tmp_path, bootstrap, run=topics.group.removeprefix("group-")))
    cfg = with_overrides(cfg, input={"format": "json", "schema": None})
    cfg = replace(cfg, route=RouteConfig("tenant", {"a": "acme", "b": "fraud_mlp"}))
    args = type("Args", (), {"command": "replay", "model": None, "model_file": None, "model_version": None,
                             "to_table": None, "to_parquet": None, "to_kv": None})()
    assert one_model(cfg, args) is cfg  # no --model: every model, routed
    x = np.random.default_rng(5).standard_normal((120, 32)).astype(np.float32)
    events = [{"event_id": f"e{i}", "entity_id": "c", "event_time": 1_700_000_000_000 + i,
               "tenant": "ab"[i % 2], "features": x[i].tolist()} for i in range(120)]
    produce_events(bootstrap, topics.input, ((b"c", JsonCodec().encode(e)) for e in events))
    out = f"{topics.output}.routed"
    summary = run_replay(cfg, When("earliest"), run_id="r1", output_topic=out, progress=io.StringIO())
    assert summary.stats.predictions == 120
    decoder = AvroCodec(load_schema(ROOT / "streamer" / "schemas" / "prediction.avsc"))
    preds = {p["event_id"]: p for p in (decoder.decode(m.value()) for m in read_all(bootstrap, out))}
    for tenant, model, name, version in (("a", ENCODER, "acme", "7"), ("b", MLP, "fraud_mlp", "1")):
        ids = [i for i in range(120) if events[i]["tenant"] == tenant]
        got = [preds[f"e{i}"] for i in ids]
        assert {(p["model_name"], p["model_version"]) for p in got} == {(name, version)}
        np.testing.assert_array_equal(np.array([p["scores"] for p in got], np.float32), offline(model, x[ids]))
