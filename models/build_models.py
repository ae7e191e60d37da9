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


ENCODER_FILE = "fraud_encoder.onnx"
TOKENS, TOKEN_WIDTH = 8, 4  # the 32 features read as a sequence of 8 vectors of 4


def build_fraud_encoder(layers: int = 2, width: int = 64, heads: int = 4, ffn: int = 256,
                        seed: int = SEED + 1) -> onnx.ModelProto:
    """A heavy scorer: a small transformer encoder over the features read as 8 tokens of 4.

    features[batch, 32] -> [batch, 8, 4] -> linear to ``width`` + position embedding -> ``layers``
    pre-norm encoder layers (``heads``-head self-attention, a ReLU feed-forward of ``ffn``, each
    with a residual) -> layer norm -> mean over the tokens -> linear -> sigmoid -> score[batch, 1].
    About 0.8 MFLOP per row with the defaults, so a batch of 512 takes milliseconds on one CPU
    core: the model, not the I/O around it, dominates (issue 15's pipelining benchmark).
    """
    rng = np.random.default_rng(seed)
    head = width // heads
    inits: dict[str, np.ndarray] = {}
    nodes: list[onnx.NodeProto] = []

    def w(name: str, *shape: int, scale: float | None = None) -> str:
        fan_in = shape[0] if len(shape) > 1 else 1
        inits[name] = (rng.standard_normal(shape) * (scale if scale is not None else 1 / np.sqrt(fan_in))
                       ).astype(np.float32)
        return name

    def const(name: str, value: np.ndarray) -> str:
        inits[name] = value
        return name

    def node(op: str, inputs: list[str], out: str, **attrs: object) -> str:
        nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def norm(x: str, name: str) -> str:
        return node("LayerNormalization", [x, const(f"{name}.g", np.ones(width, np.float32)),
                                           const(f"{name}.b", np.zeros(width, np.float32))], f"{name}.out", axis=-1)

    split = const("shape.tokens", np.array([-1, TOKENS, TOKEN_WIDTH], np.int64))
    per_head = const("shape.heads", np.array([0, TOKENS, heads, head], np.int64))
    merged = const("shape.merged", np.array([0, TOKENS, width], np.int64))
    scale = const("attn.scale", np.array(1 / np.sqrt(head), np.float32))
    x = node("Reshape", ["features", split], "tokens")
    x = node("MatMul", [x, w("embed.w", TOKEN_WIDTH, width)], "embed.mm")
    x = node("Add", [x, w("embed.b", width, scale=0.02)], "embed.out")
    x = node("Add", [x, w("position", TOKENS, width, scale=0.02)], "embed.pos")
    for i in range(layers):
        p = f"layer{i}"
        h = norm(x, f"{p}.norm1")
        q, k, v = (node("Transpose", [node("Reshape", [node("MatMul", [h, w(f"{p}.{n}", width, width)], f"{p}.{n}.mm"),
                                                        per_head], f"{p}.{n}.split")], f"{p}.{n}.heads",
                        perm=[0, 2, 3, 1] if n == "k" else [0, 2, 1, 3]) for n in ("q", "k", "v"))
        scores = node("Mul", [node("MatMul", [q, k], f"{p}.scores"), scale], f"{p}.scaled")
        attn = node("MatMul", [node("Softmax", [scores], f"{p}.softmax", axis=-1), v], f"{p}.attn")
        attn = node("Reshape", [node("Transpose", [attn], f"{p}.attn.t", perm=[0, 2, 1, 3]), merged], f"{p}.attn.merged")
        x = node("Add", [x, node("MatMul", [attn, w(f"{p}.o", width, width)], f"{p}.o.mm")], f"{p}.res1")
        h = norm(x, f"{p}.norm2")
        h = node("Relu", [node("Add", [node("MatMul", [h, w(f"{p}.ff1", width, ffn)], f"{p}.ff1.mm"),
                                       w(f"{p}.ff1.b", ffn, scale=0.02)], f"{p}.ff1.out")], f"{p}.relu")
        h = node("Add", [node("MatMul", [h, w(f"{p}.ff2", ffn, width)], f"{p}.ff2.mm"),
                         w(f"{p}.ff2.b", width, scale=0.02)], f"{p}.ff2.out")
        x = node("Add", [x, h], f"{p}.res2")
    x = node("ReduceMean", [norm(x, "final")], "pooled", axes=[1], keepdims=0)
    x = node("Gemm", [x, w("head.w", 1, width, scale=1 / np.sqrt(width)), w("head.b", 1, scale=0.1)], "logit",
             transB=1)
    nodes.append(helper.make_node("Sigmoid", [x], ["score"], name="sigmoid"))
    graph = helper.make_graph(
        nodes, "fraud_encoder",
        inputs=[helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", N_FEATURES])],
        outputs=[helper.make_tensor_value_info("score", TensorProto.FLOAT, ["batch", 1])],
        initializer=[numpy_helper.from_array(array, name) for name, array in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="streamer-build-models", producer_version="1", model_version=1,
                              doc_string=f"Heavy demo scorer: untrained transformer encoder, weights from "
                                         f"numpy default_rng({seed}).")
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model


def write_models(out_dir: Path) -> list[Path]:
    """Write fraud_mlp.onnx and fraud_encoder.onnx into ``out_dir`` (created if missing)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, model in ((MODEL_FILE, build_fraud_mlp()), (ENCODER_FILE, build_fraud_encoder())):
        path = out_dir / name
        path.write_bytes(model.SerializeToString(deterministic=True))
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).resolve().parent, help="output folder (default: models/)"
    )
    args = parser.parse_args(argv)
    for path in write_models(args.out):
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        print(f"wrote {path} ({path.stat().st_size} bytes, sha256 {digest})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
