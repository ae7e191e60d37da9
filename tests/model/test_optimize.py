"""`streamer model optimize`: optimized and INT8 candidates that name their parent, their differences
from it measured; static INT8 calibrated on a real topic's rows."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from streamer.cli import main
from streamer.commands.model import calibration_rows
from streamer.errors import ConfigError
from streamer.model.onnx_file import file_digest
from streamer.model.optimize import optimize
from tests.conftest import ROOT, Topics, make_config

HEAVY = ROOT / "models" / "fraud_encoder.onnx"


def props(path: Path) -> dict[str, str]:
    return {p.key: p.value for p in onnx.load(str(path)).metadata_props}


def test_the_optimized_graph_scores_as_its_parent_and_names_it(tmp_path: Path) -> None:
    done = optimize(HEAVY, tmp_path / "opt.onnx")
    assert props(done.out)["streamer.parent_digest"] == file_digest(HEAVY) == done.parent_digest
    assert json.loads(props(done.out)["streamer.optimize"]) == {"int8": None, "level": "extended"}
    assert done.max_abs_delta["score"] < 1e-5  # the same arithmetic, fused


def test_dynamic_int8_is_smaller_and_close(tmp_path: Path) -> None:
    done = optimize(HEAVY, tmp_path / "int8.onnx", int8=True)
    assert done.options["int8"] == "dynamic" and done.out.stat().st_size < HEAVY.stat().st_size / 2
    assert 0 < done.max_abs_delta["score"] < 0.05  # quantized: different, not far
    ops = {n.op_type for n in onnx.load(str(done.out)).graph.node}
    assert ops & {"DynamicQuantizeLinear", "MatMulInteger", "DynamicQuantizeMatMul"}


def test_optimize_refuses_by_flag(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--out"):
        optimize(HEAVY, HEAVY)
    with pytest.raises(ConfigError, match="--calibrate-from"):
        optimize(HEAVY, tmp_path / "x.onnx", calibration=[])
    with pytest.raises(ConfigError, match=r"^file '.*missing\.onnx': cannot load it as an ONNX model"):
        optimize(tmp_path / "missing.onnx", tmp_path / "x.onnx")
    assert main(["model", "optimize", str(HEAVY), "--out", str(tmp_path / "y.onnx"), "--calibrate-from",
                 "earliest..latest"]) == 2  # no --config to read the topics from


@pytest.mark.kafka
def test_static_int8_is_calibrated_on_the_input_topic(bootstrap: str, topics: Topics, tmp_path: Path) -> None:
    from tests.integration.test_replay_kafka import produce_stamped
    from tests.lake.test_replay_lake_kafka import recent

    cfg = make_config(bootstrap, topics)
    produce_stamped(bootstrap, cfg, topics.input, 0, 600, base_ms=recent(600, 1000))
    batches = list(calibration_rows(cfg, "earliest..latest", 500))
    assert sum(len(b["features"]) for b in batches) == 500
    done = optimize(ROOT / "models" / "fraud_mlp.onnx", tmp_path / "static.onnx", int8=True, calibration=batches)
    assert done.options == {"int8": "static", "level": "extended", "calibration_rows": 500}
    ops = {n.op_type for n in onnx.load(str(done.out)).graph.node}
    assert "QuantizeLinear" in ops and "DequantizeLinear" in ops
    session = ort.InferenceSession(str(done.out), providers=["CPUExecutionProvider"])
    scores = session.run(None, {"features": np.concatenate([b["features"] for b in batches])})[0]
    assert scores.shape == (500, 1) and np.isfinite(scores).all()
