"""The signature read from an ONNX file's bytes (model/onnx_file.py) is the one an ONNX Runtime
session of it reports, for every model shipped or built, and the commands that never score do not
load ONNX Runtime at all."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from streamer.errors import InferenceError
from streamer.model.onnx_file import read_signature
from streamer.model.signature import Signature
from tests.conftest import ROOT


def session_signature(path: Path) -> Signature:
    return Signature.of(ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]))


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "models").glob("*.onnx")))
def test_the_shipped_models_read_as_their_sessions_report_them(name: str) -> None:
    assert read_signature(ROOT / "models" / name) == session_signature(ROOT / "models" / name)


def test_the_converter_models_read_as_their_sessions_report_them(converter_models: Path) -> None:
    paths = sorted(converter_models.glob("*.onnx"))
    assert len(paths) >= 10  # ZipMap, several typed inputs, float64, tree ensembles, two outputs
    for path in paths:
        assert read_signature(path) == session_signature(path), path.name
    zipmap = read_signature(converter_models / "logreg_zipmap.onnx")
    assert any(s.element == "zipmap" for s in zipmap.outputs)


def test_initializers_are_not_inputs_and_named_dimensions_are_free(tmp_path: Path) -> None:
    # An input with an initializer is overridable, and ONNX Runtime does not list it; a dimension
    # with a name (dim_param) is as free as the batch's; a fixed one keeps its size.
    weight = numpy_helper.from_array(np.ones((3, 2), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Identity", ["name"], ["name_out"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3]),
         helper.make_tensor_value_info("w", TensorProto.FLOAT, [3, 2]),
         helper.make_tensor_value_info("name", TensorProto.STRING, [None])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2]),
         helper.make_tensor_value_info("name_out", TensorProto.STRING, [None])],
        [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "m.onnx")
    read = read_signature(tmp_path / "m.onnx")
    assert read == session_signature(tmp_path / "m.onnx")
    assert [s.name for s in read.inputs] == ["x", "name"]
    assert read.inputs[0].shape == (None, 3) and read.inputs[1].element == "string"


def test_a_file_that_is_not_a_model_is_named(tmp_path: Path) -> None:
    (tmp_path / "empty.onnx").write_bytes(b"")
    (tmp_path / "junk.onnx").write_bytes(b"\xff" * 12)
    for name in ("empty.onnx", "junk.onnx"):
        with pytest.raises(InferenceError, match=f"cannot load model .*{name}: not an ONNX model"):
            read_signature(tmp_path / name)
    with pytest.raises(InferenceError, match="cannot load model .*absent.onnx: No such file"):
        read_signature(tmp_path / "absent.onnx")


def test_commands_that_do_not_score_do_not_import_onnx_runtime() -> None:
    # dlq and the lag exporter read dead letters and offsets: ONNX Runtime (and its CUDA probing)
    # has no business in them; produce and tail load it with the codecs, and never open a session
    # (tests/commands/test_produce.py).
    code = ("import sys\n"
            "from streamer.config_file import load_config, load_part\n"
            "import streamer.cli, streamer.commands.dlq\n"
            "from streamer.observe.lag import LagConfig\n"
            "load_config('deploy/config/example.yaml', env={})\n"
            "load_part('deploy/config/example.yaml', LagConfig, env={})\n"
            "print(sorted(m for m in sys.modules if m.startswith('onnxruntime')))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
