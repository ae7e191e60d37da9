"""Tests for streamer.model.runner on the committed demo model, plus the fakes in streamer.testing."""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from types import ModuleType

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from streamer.errors import InferenceError
from streamer.model.runner import ModelRunner, OnnxRunner, cuda_options
from streamer.model.signature import Columns
from streamer.testing import FakeClock, FunctionRunner, PoisonRunner

MODELS = Path(__file__).resolve().parents[2] / "models"
MODEL = MODELS / "fraud_mlp.onnx"


def build_models_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_models", MODELS / "build_models.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reference_mlp(features: np.ndarray) -> np.ndarray:
    """The demo model recomputed in numpy from its own initializers."""
    w = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(MODEL)).graph.initializer}
    hidden = np.maximum(features @ w["fc1.weight"].T + w["fc1.bias"], 0.0)
    logits = hidden @ w["fc2.weight"].T + w["fc2.bias"]
    return np.asarray(1.0 / (1.0 + np.exp(-logits)), dtype=np.float32)


@pytest.fixture(scope="module")
def runner() -> OnnxRunner:
    return OnnxRunner(MODEL, providers=("cuda", "cpu"))


def test_model_loads_and_reports_its_provider(runner: OnnxRunner) -> None:
    assert runner.contract.feature_width == 32
    # onnxruntime-gpu lists CUDA even without a GPU or CUDA libraries; then the CPU is what runs.
    assert runner.provider == provider_onnxruntime_picks()


def provider_onnxruntime_picks() -> str:
    """What ONNX Runtime itself runs the model on when asked for CUDA, then the CPU.

    Asked of ONNX Runtime's own API, not of anything in streamer.runner.
    """
    cpu, cuda = "CPUExecutionProvider", "CUDAExecutionProvider"
    if cuda not in ort.get_available_providers():
        return cpu
    try:  # CUDA listed: a session gets it only where the GPU and CUDA libraries really are
        session = ort.InferenceSession(str(MODEL), providers=[cuda, cpu])
    except Exception:  # noqa: BLE001 - some builds raise instead of falling back
        return cpu
    return str(session.get_providers()[0])



def score(runner: ModelRunner, features: np.ndarray) -> np.ndarray:
    """The runner's ``scores`` column for a feature matrix (the ``features`` column)."""
    out = runner.run(Columns({"features": features}))
    assert list(out.arrays) == ["scores"]
    return out.arrays["scores"]


def test_provider_is_logged_once_at_info(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="streamer.model.runner"):
        OnnxRunner(MODEL, providers=("cuda", "cpu"))
    lines = [
        r.getMessage() for r in caplog.records if r.name == "streamer.model.runner" and r.levelno == logging.INFO
    ]
    assert len(lines) == 1
    assert lines[0].startswith("model fraud_mlp.onnx running on ")


@pytest.mark.parametrize("rows", [1, 7, 256])
def test_output_matches_numpy_for_dynamic_batches(runner: OnnxRunner, rows: int) -> None:
    features = np.random.default_rng(rows).standard_normal((rows, 32)).astype(np.float32)
    out = score(runner, features)
    assert out.shape == (rows, 1) and out.dtype == np.float32
    np.testing.assert_allclose(out, reference_mlp(features), atol=1e-5, rtol=0)


def test_input_is_cast_to_float32_contiguous(runner: OnnxRunner) -> None:
    features = np.asfortranarray(np.random.default_rng(1).standard_normal((5, 32)))  # float64, not C-order
    np.testing.assert_allclose(
        score(runner, features), reference_mlp(features.astype(np.float32)), atol=1e-5, rtol=0
    )
    runner.warm_up(3)


def test_wrong_feature_count_is_an_inference_error(runner: OnnxRunner) -> None:
    with pytest.raises(InferenceError, match=r"\[rows, 32\]"):
        score(runner, np.zeros((2, 31), dtype=np.float32))


def test_wrong_output_row_count_names_both_counts(tmp_path: Path) -> None:
    # A model that ignores its input and always answers one row.
    constant = numpy_helper.from_array(np.array([[0.5]], dtype=np.float32), "value")
    graph = helper.make_graph(
        [helper.make_node("Constant", [], ["score"], value=constant)],
        "constant",
        inputs=[helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", 4])],
        outputs=[helper.make_tensor_value_info("score", TensorProto.FLOAT, [1, 1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    path = tmp_path / "constant.onnx"
    onnx.save(model, str(path))
    runner = OnnxRunner(path, providers=("cpu",))
    assert score(runner, np.zeros((1, 4), dtype=np.float32)).shape == (1, 1)
    with pytest.raises(InferenceError, match="model returned 1 output rows for 3 input rows"):
        score(runner, np.zeros((3, 4), dtype=np.float32))


def test_unloadable_model_is_an_inference_error(tmp_path: Path) -> None:
    with pytest.raises(InferenceError, match="no such file"):
        OnnxRunner(tmp_path / "missing.onnx")
    (tmp_path / "junk.onnx").write_bytes(b"not a model")
    with pytest.raises(InferenceError, match="cannot load model"):
        OnnxRunner(tmp_path / "junk.onnx")


def test_build_models_is_deterministic(tmp_path: Path) -> None:
    """Both committed models, the demo MLP and the heavy encoder, rebuild byte for byte."""
    script = build_models_script()
    first = [p.read_bytes() for p in script.write_models(tmp_path / "a")]
    second = [p.read_bytes() for p in script.write_models(tmp_path / "b")]
    assert first == second == [MODEL.read_bytes(), (MODELS / "fraud_encoder.onnx").read_bytes()]


def test_the_heavy_encoder_scores_a_batch_in_the_runner() -> None:
    runner = OnnxRunner(MODELS / "fraud_encoder.onnx", ("cpu",))
    scores = score(runner, np.random.default_rng(1).normal(size=(64, 32)).astype(np.float32))
    assert runner.contract.feature_width == 32 and scores.shape == (64, 1)
    assert np.isfinite(scores).all() and 0 < scores.min() and scores.max() < 1 and scores.std() > 0.001


# --- fakes --------------------------------------------------------------------------------------


def test_fake_clock() -> None:
    clock = FakeClock(10.0)
    assert clock() == 10.0
    clock.advance(0.25)
    assert clock() == 10.25


def test_function_runner_and_poison_runner() -> None:
    inner = FunctionRunner(lambda x: x.sum(axis=1, keepdims=True), n_features=3)
    poisoned = PoisonRunner(inner, sentinel=-1.0)
    runners: list[ModelRunner] = [inner, poisoned]
    assert [r.provider for r in runners] == ["fake", "fake"] and poisoned.contract.feature_width == 3
    ok = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.float32)
    np.testing.assert_array_equal(score(poisoned, ok), [[6.0], [15.0]])
    with pytest.raises(InferenceError, match=r"\[1\]"):
        score(poisoned, np.array([[1, 2, 3], [-1, 0, 0]], dtype=np.float32))
    assert (poisoned.calls, inner.calls) == (2, 1)


def test_io_binding_gives_the_same_scores_as_a_plain_run_at_every_batch_size() -> None:
    """The CUDA path's binding code, run here on the CPU provider: device buffers per batch size
    (more sizes than it keeps), one copy back per batch."""
    plain = OnnxRunner(MODELS / "fraud_encoder.onnx", ("cpu",), 1)
    bound = OnnxRunner(MODELS / "fraud_encoder.onnx", ("cpu",), 1, io_binding=True)
    assert bound.io_bound and not plain.io_bound
    x = np.random.default_rng(2).normal(size=(512, 32)).astype(np.float32)
    for n in (512, 1, 7, 256, 3, 100, 511, 2, 9, 64, 512, 7):
        np.testing.assert_array_equal(score(bound, x[:n]), score(plain, x[:n]))


def test_cuda_options_map_the_config_and_fall_back_to_the_cpu_without_a_gpu() -> None:
    assert cuda_options(1, 0, "next_power_of_two") == {"device_id": "1", "arena_extend_strategy": "kNextPowerOfTwo"}
    assert cuda_options(0, 2048, "same_as_requested") == {
        "device_id": "0", "arena_extend_strategy": "kSameAsRequested", "gpu_mem_limit": str(2048 * 1024 * 1024)}
    runner = OnnxRunner(MODEL, ("cuda", "cpu"), 1, cuda_options(0, 256, "same_as_requested"))
    if runner.provider == "CUDAExecutionProvider":  # a GPU host: bound to the device by default
        assert runner.io_bound
    else:
        assert runner.provider == "CPUExecutionProvider" and not runner.io_bound
    assert score(runner, np.zeros((4, 32), np.float32)).shape == (4, 1)
