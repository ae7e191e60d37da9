"""Train a champion and two candidates on one labeled task with scikit-learn, and convert them with skl2onnx.

The task: 32 standard-normal float features (the shape of the demo's events), and an outcome drawn
from a logistic model with fixed weights, ``P(y = 1) = sigmoid(x . W)``. :func:`outcomes` draws the
outcomes of any feature rows, so a test that produces events knows their labels.

    champion.onnx    LogisticRegression(C=1.0) on 4,000 rows
    retrained.onnx   LogisticRegression(C=0.3) retrained on the same rows: about as good
    shuffled.onnx    LogisticRegression on the same rows with their outcomes shuffled: no better than chance

Each is converted with zipmap=False, so its outputs are ``label`` int64 [N] and ``probabilities``
float32 [N, 2], over one input ``features`` float32 [N, 32]. Seeded: the same files on every run.

    python models/build_eval_models.py --out DIR
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

SEED = 20261204
N_FEATURES = 32
N_ROWS = 4000
TARGET_OPSET = {"": 17, "ai.onnx.ml": 3}
WEIGHTS = np.random.default_rng(SEED).normal(scale=0.6, size=N_FEATURES)  # the task's true weights


def outcomes(features: np.ndarray, seed: int) -> np.ndarray:
    """0/1 outcomes of feature rows, drawn from the task's logistic model with ``seed``."""
    p = 1.0 / (1.0 + np.exp(-(np.asarray(features, np.float64) @ WEIGHTS)))
    return (np.random.default_rng(seed).random(len(p)) < p).astype(np.int64)


def write_models(out: Path) -> dict[str, Path]:
    """Train and convert the three models into ``out``; returns their paths by name."""
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import FloatTensorType
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(SEED + 1)
    x = rng.normal(size=(N_ROWS, N_FEATURES)).astype(np.float32)
    y = outcomes(x, SEED + 2)
    fits = {
        "champion": LogisticRegression(C=1.0, max_iter=500, random_state=0).fit(x, y),
        "retrained": LogisticRegression(C=0.3, max_iter=500, random_state=0).fit(x, y),
        "shuffled": LogisticRegression(C=1.0, max_iter=500, random_state=0).fit(x, rng.permutation(y)),
    }
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, model in fits.items():
        onx = convert_sklearn(model, name, [("features", FloatTensorType([None, N_FEATURES]))],
                              target_opset=TARGET_OPSET, options={id(model): {"zipmap": False}})
        paths[name] = out / f"{name}.onnx"
        paths[name].write_bytes(onx.SerializeToString())
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, type=Path, help="the folder to write into")
    for name, path in write_models(ap.parse_args(argv).out).items():
        print(f"{name}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
