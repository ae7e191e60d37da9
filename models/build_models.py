"""Build the demo model models/fraud_mlp.onnx from fixed seeded weights, byte for byte the same each run.

The model is a tiny multilayer perceptron with no training behind it: it exists so the pipeline
has a real ONNX graph to run. Rebuild it with ``python models/build_models.py [--out DIR]``.
No torch is needed; the graph is written with ``onnx.helper``.
"""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SEED = 20261129
N_FEATURES = 32
N_HIDDEN = 16
OPSET = 17
# ONNX Runtime 1.31 reads IR 9 and newer; pin it so a newer onnx package does not change the bytes.
IR_VERSION = 9
MODEL_FILE = "fraud_mlp.onnx"


def _weights(seed: int = SEED, n_features: int = N_FEATURES) -> dict[str, np.ndarray]:
    """The initializers, drawn in a fixed order from one seeded generator (Linear-style [out, in])."""
    rng = np.random.default_rng(seed)
    return {
        "fc1.weight": (rng.standard_normal((N_HIDDEN, n_features)) / np.sqrt(n_features)).astype(np.float32),
        "fc1.bias": (rng.standard_normal(N_HIDDEN) * 0.1).astype(np.float32),
        "fc2.weight": (rng.standard_normal((1, N_HIDDEN)) / np.sqrt(N_HIDDEN)).astype(np.float32),
        "fc2.bias": (rng.standard_normal(1) * 0.1).astype(np.float32),
    }


def build_fraud_mlp(seed: int = SEED, version: str | None = None, n_features: int = N_FEATURES,
                    nan_scores: bool = False) -> onnx.ModelProto:
    """Return the graph features[batch, 32] -> Gemm -> Relu -> Gemm -> Sigmoid -> score[batch, 1].

    The arguments make the variants the hot-reload tests swap in: other weights (``seed``), a
    declared ``version`` (the metadata property streamer reads), another input width, or a model
    whose every score is NaN. The defaults give the committed demo model, byte for byte.
    """
    weights = _weights(seed, n_features)
    if nan_scores:
        weights["fc2.bias"] = np.full(1, np.nan, np.float32)
    nodes = [
        helper.make_node("Gemm", ["features", "fc1.weight", "fc1.bias"], ["fc1.out"], name="fc1", transB=1),
        helper.make_node("Relu", ["fc1.out"], ["relu.out"], name="relu"),
        helper.make_node("Gemm", ["relu.out", "fc2.weight", "fc2.bias"], ["fc2.out"], name="fc2", transB=1),
        helper.make_node("Sigmoid", ["fc2.out"], ["score"], name="sigmoid"),
    ]
    graph = helper.make_graph(
        nodes,
        "fraud_mlp",
        inputs=[helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", n_features])],
        outputs=[helper.make_tensor_value_info("score", TensorProto.FLOAT, ["batch", 1])],
        initializer=[numpy_helper.from_array(array, name) for name, array in weights.items()],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="streamer-build-models",
        producer_version="1",
        model_version=1,
        doc_string=f"Demo fraud scorer: untrained MLP with weights from numpy default_rng({seed}).",
    )
    if version is not None:
        helper.set_model_props(model, {"version": version})
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model


def write_models(out_dir: Path) -> Path:
    """Write fraud_mlp.onnx into ``out_dir`` (created if missing) and return its path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / MODEL_FILE
    path.write_bytes(build_fraud_mlp().SerializeToString(deterministic=True))
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).resolve().parent, help="output folder (default: models/)"
    )
    args = parser.parse_args(argv)
    path = write_models(args.out)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    print(f"wrote {path} ({path.stat().st_size} bytes, sha256 {digest})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
