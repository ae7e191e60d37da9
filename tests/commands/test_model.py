"""`streamer model inspect`, `streamer schema` and start-up refusals, as a user runs them (no broker:
a model that cannot be served is refused before Kafka is contacted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT


def streamer(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "streamer", *args], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)


def config_file(tmp_path: Path, model: Path, **model_keys: Any) -> Path:
    """A config for ``model`` with JSON input on a broker nobody listens on."""
    cfg = {"kafka": {"bootstrap.servers": "127.0.0.1:1"},
           "input": {"topics": ["events"], "group_id": "g", "format": "json"},
           "model": {"path": str(model), "name": model.stem, "version": "1", **model_keys},
           "output": {"topic": "predictions"}}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.parametrize(("model", "keys", "named"), [
    ("logreg", {}, "model.outputs"),  # two outputs, none picked silently
    ("column_transformer", {"outputs": {"label": "label"}}, "model.inputs"),  # five inputs, none mapped
    ("logreg", {"inputs": {"features": ["a", "b"]}, "outputs": {"label": "label"}}, "model.inputs.features"),
    ("logreg", {"outputs": {"p": {"output": "probabilities", "column": 2}}}, "model.outputs.p.column"),
])
def test_a_model_it_cannot_serve_exits_2_naming_the_key(tmp_path: Path, converter_models: Path, model: str,
                                                        keys: dict[str, Any], named: str) -> None:
    run = streamer("run", "--config", str(config_file(tmp_path, converter_models / f"{model}.onnx", **keys)))
    assert run.returncode == 2, run.stderr
    assert f"config key '{named}'" in run.stderr, run.stderr


def test_schema_prints_the_prediction_schema_the_mapping_makes(tmp_path: Path, converter_models: Path) -> None:
    path = config_file(tmp_path, converter_models / "logreg_zipmap.onnx",
                       outputs={"label": "output_label", "fraud": {"output": "output_probability", "column": 1}})
    run = streamer("schema", "--config", str(path))
    assert run.returncode == 0, run.stderr
    fields = {f["name"]: f["type"] for f in json.loads(run.stdout)["fields"]}
    assert fields["label"] == "long" and fields["fraud"] == "float" and "scores" not in fields


def test_a_float64_model_starts_and_its_schema_keeps_scores(tmp_path: Path, converter_models: Path) -> None:
    """It exited 3 on its warm-up batch before the contract (float32 fed to a double input)."""
    run = streamer("schema", "--config", str(config_file(tmp_path, converter_models / "float64_regressor.onnx")))
    assert run.returncode == 0, run.stderr
    assert "scores" in {f["name"] for f in json.loads(run.stdout)["fields"]}


def test_inspect_shows_the_signature_and_a_starting_config(converter_models: Path) -> None:
    run = streamer("model", "inspect", str(converter_models / "logreg_zipmap.onnx"))
    assert run.returncode == 0, run.stderr
    assert "output_probability  zipmap" in run.stdout and "label: output_label" in run.stdout
    assert "zipmap': False" in run.stdout  # the faster conversion is named
