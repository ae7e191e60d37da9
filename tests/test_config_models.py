"""The model sections: a repository of several models, its folder of manifests, the route, and
the one-model config each model scores with; every refusal names its key."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from streamer.config import for_model, model_entries, model_key, prediction_topic, route_models
from streamer.config_file import config_from_dict
from streamer.errors import ConfigError
from streamer.kafka.clients import KafkaClients
from streamer.wiring.models import house_of
from streamer.wiring.stream import build_wiring

ROOT = Path(__file__).resolve().parent.parent
MODEL = str(ROOT / "models" / "fraud_mlp.onnx")


def base(**sections: Any) -> dict[str, Any]:
    return {"kafka": {"bootstrap.servers": "127.0.0.1:9092"},
            "input": {"topics": ["features"], "group_id": "g", "schema": str(ROOT / "streamer/schemas/feature_event.avsc")},
            "output": {"topic": "predictions"}, **sections}


def model(version: str = "1", **keys: Any) -> dict[str, Any]:
    return {"model": {"path": MODEL, "version": version, **keys}}


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    """A folder of two models: one with a manifest naming its file, one of versions without a path."""
    (tmp_path / "acme").mkdir()
    shutil.copy(MODEL, tmp_path / "acme" / "scorer.onnx")
    (tmp_path / "acme" / "model.yaml").write_text('model:\n  path: scorer.onnx\n  version: "2"\nbatching:\n  max_size: 32\n')
    (tmp_path / "globex" / "3").mkdir(parents=True)
    shutil.copy(MODEL, tmp_path / "globex" / "3" / "model.onnx")
    (tmp_path / "globex" / "model.yaml").write_text('model:\n  version: "3"\n')
    (tmp_path / "notes").mkdir()  # no manifest: not a model
    return tmp_path


def test_a_repository_of_named_and_found_models_and_the_config_each_scores_with(repository: Path) -> None:
    cfg = config_from_dict(base(
        models={"default": "general", "repository": str(repository),
                "named": {"general": model("1"), "small": {**model("3"), "batching": {"max_size": 8}}}},
        route={"field": "tenant", "map": {"a": "acme", "7": "small"}},
        output={"topic": "predictions", "topic_per_model": True}))
    assert cfg.model.name == "general"  # the default stands for the model section
    assert sorted(model_entries(cfg)) == ["acme", "general", "globex", "small"]
    assert route_models(cfg) == ("general", "acme", "small")
    acme = for_model(cfg, "acme")
    assert (acme.model.name, acme.model.version, acme.batching.max_size) == ("acme", "2", 32)
    assert acme.model.path == repository / "acme" / "scorer.onnx"  # relative to its manifest
    assert for_model(cfg, "globex").model.path == repository / "globex"
    assert acme.output.topic == prediction_topic(cfg, "acme") == "predictions.acme"
    assert not acme.models.named and acme.route.field is None  # a one-model config
    assert for_model(cfg).model.name == "general"
    assert for_model(cfg, "small").batching.max_size == 8
    assert for_model(cfg, "general").batching == cfg.batching
    assert model_key(cfg, "acme") == "models.repository.acme.model"
    assert model_key(cfg, "small") == "models.named.small.model"


def test_the_model_section_is_one_model_of_the_repository_and_keeps_its_challengers() -> None:
    cfg = config_from_dict(base(
        model={"path": MODEL, "name": "fraud", "version": "1"},
        shadow={"challengers": [{"path": MODEL, "name": "next", "version": "2"}]},
        models={"named": {"acme": model("4")}}))
    assert sorted(model_entries(cfg)) == ["acme", "fraud"]
    assert model_key(cfg, "fraud") == "model"
    assert [c.name for c in for_model(cfg, "fraud").shadow.challengers] == ["next"]
    assert for_model(cfg, "acme").shadow.challengers == ()
    assert route_models(cfg) == ("fraud",)


@pytest.mark.parametrize(("sections", "key", "says"), [
    ({"models": {"default": "g", "named": {"g": model(path="nope.onnx")}}}, "models.named.g.model.path", "no model file"),
    ({"models": {"named": {"g": model()}}}, "models.default", "required without a model section"),
    ({"models": {"default": "h", "named": {"g": model()}}}, "models.default", "no model 'h'"),
    ({"models": {"default": "g", "named": {"g": {**model(), "batching": {"max_size": 0}}}}},
     "models.named.g.batching.max_size", "between 1 and"),
    ({"models": {"default": "g", "named": {"g": model(name="x")}}}, "models.named.g.model.name", "its entry's"),
    ({"models": {"default": "g", "named": {"g": model(breaker_failures=0)}}},
     "models.named.g.model.breaker_failures", ">= 1"),
    ({"models": {"default": "g", "named": {"g": model()}, "max_loaded": -1}}, "models.max_loaded", ">= 0"),
    ({"model": {"path": MODEL, "name": "fraud", "version": "1"}, "models": {"default": "g", "named": {"g": model()}}},
     "models.default", "the model section's model 'fraud' is the default"),
    ({"models": {"default": "g", "named": {"g": model()}}, "route": {"field": "t", "map": {"a": "zz"}}},
     "route.map.a", "no model 'zz'"),
    ({"models": {"default": "g", "named": {"g": model()}}, "route": {"field": "t"}}, "route.map", "maps no value"),
    ({"models": {"default": "g", "named": {"g": model()}}, "route": {"map": {"a": "g"}}}, "route.field", "required"),
    ({"models": {"default": "g", "named": {"g": model()}},
      "shadow": {"challengers": [{"path": MODEL, "name": "g", "version": "2"}]}}, "shadow.challengers", "like a model"),
])
def test_a_bad_model_section_is_refused_naming_its_key(sections: dict[str, Any], key: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says) as caught:
        config_from_dict(base(**sections))
    assert caught.value.key == key


def test_a_bad_manifest_names_its_model_and_an_unknown_model_names_the_flag(repository: Path) -> None:
    (repository / "acme" / "model.yaml").write_text("model:\n  version: '2'\n  timeout_ms: -5\n")
    with pytest.raises(ConfigError) as caught:
        config_from_dict(base(models={"default": "globex", "repository": str(repository)}))
    assert caught.value.key == "models.repository.acme.model.timeout_ms"
    cfg = config_from_dict(base(models={"default": "g", "named": {"g": model()}}))
    with pytest.raises(ConfigError, match="no model 'nope'; the models are g") as unknown:
        for_model(cfg, "nope")
    assert unknown.value.key == "--model"


def test_a_models_house_is_refused_on_its_own_key_and_the_default_scores_with_its_own_batching() -> None:
    """A model's contract that cannot serve is refused under the model's key at start-up (not
    ``model.inputs...``); without a route the stream's one model is the default with its own
    ``batching`` (config.for_model), not the config's."""
    cfg = config_from_dict(base(models={"default": "g", "named": {
        "g": {**model(), "batching": {"max_size": 3}},
        "b": model(inputs={"features": ["nope"]})}}))
    with pytest.raises(ConfigError, match="takes 32 values a row") as caught:
        house_of(cfg, "b")
    assert caught.value.key == "models.named.b.model.inputs.features"
    clients = KafkaClients(consumer=lambda **kw: None, producer=lambda **kw: None, ensure_topic=lambda topic, like: None)
    wiring = build_wiring(cfg, clients=clients)
    assert (wiring.cfg.batching.max_size, wiring.serving.model.name) == (3, "g")
