"""Train small seeded models with the real converters (skl2onnx, onnxmltools) and write them as ONNX files.

Hand-written graphs (models/build_models.py) only exercise the plain ``features -> score`` shape. Real
converter output looks different: ZipMap outputs (``seq(map(int64, tensor(float)))``), int64 label
tensors of shape [N], several named inputs (one per column, string and int64 ones among them),
float64 inputs and outputs, TreeEnsemble ops from the ai.onnx.ml domain, and more than one output.
The tests serve each of these files through the processor and compare what comes out of the stream
with onnxruntime run offline on the same rows.

Everything is tiny and fixed: 300 rows drawn from ``numpy.random.default_rng`` with a fixed seed,
every ``random_state`` set, each model well under 200 KB, the whole run a few seconds. Each file is
loaded back into ``onnxruntime.InferenceSession`` on the CPU and run on 3 rows before it is listed.
With the pinned package versions the files are byte-for-byte the same on every run.

Run it (it needs the dev extras: scikit-learn, skl2onnx, onnxmltools, lightgbm, xgboost-cpu)::

    python models/build_converter_models.py --out DIR

It writes into DIR (created if needed; there is no default folder, nothing lands in models/):

    logreg_zipmap.onnx      LogisticRegression, binary, skl2onnx default (ZipMap on)
    logreg.onnx             the same classifier with zipmap=False (outputs renamed label, probabilities)
    regressor.onnx          Ridge, float32 -> variable [N, 1]
    scaler_gbm.onnx         Pipeline(StandardScaler, GradientBoostingClassifier), zipmap=False
    column_transformer.onnx one input per column (2 string, 2 float, 1 int64) -> LogisticRegression
    float64_regressor.onnx  LinearRegression with a double input and a double output
    lightgbm.onnx           LGBMClassifier via onnxmltools.convert_lightgbm, zipmap=False
    xgboost.onnx            XGBClassifier via onnxmltools.convert_xgboost
    multiclass.onnx         LogisticRegression, 3 classes, zipmap=False
    two_outputs.onnx        Ridge (`score` [N, 1]) and PCA (`embedding` [N, 3]) converted by skl2onnx
                            and joined into one graph over one shared `features` input
    bool_enum_nullable.onnx ColumnTransformer over a boolean (int64 input, passed through), an enum
                            (category strings, one-hot) and a nullable int (float input, median
                            imputer, scaler) -> LogisticRegression; the held-out converter case

and ``DIR/manifest.json``: for each model its file, a description, the inputs and outputs as
onnxruntime reports them (name, type string such as ``tensor(float)``, shape with null for a
dynamic dimension), the opsets, for classifiers the class labels, and for a model with an imputer
the value it imputes per input (``fills``: what ``model.inputs.<name>.fill`` maps a null to, so the
stream scores a null as the model scores NaN offline).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

SEED = 20261201
N_ROWS = 300
N_FEATURES = 4
# The highest opsets skl2onnx may use (ONNX Runtime 1.31 runs all of them). Converters write the lowest
# version each graph needs, so the files declare 9..17 and ai.onnx.ml 1 or 3; the manifest lists them.
TARGET_OPSET = {"": 17, "ai.onnx.ml": 3}
# onnxmltools takes one integer (the ai.onnx.ml version follows from it) and refuses anything above 15.
ONNXMLTOOLS_OPSET = 15
COUNTRIES = ["US", "DE", "FR", "BR"]
CHANNELS = ["web", "app", "pos"]
TIERS = ["BASIC", "PLUS", "PRO"]
MAX_BYTES = 200_000


def _numeric_data(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """X float32 [300, 4], a binary label, a 3-class label and a continuous target, all from rng."""
    x = rng.standard_normal((N_ROWS, N_FEATURES)).astype(np.float32)
    w = np.array([1.5, -2.0, 0.7, 0.0], dtype=np.float32)
    noise = rng.standard_normal(N_ROWS).astype(np.float32)
    logit = x @ w + 0.5 * noise
    y_bin = (logit > 0).astype(np.int64)
    y_multi = np.digitize(logit, [-1.0, 1.0]).astype(np.int64)  # 0, 1, 2
    y_reg = (x @ np.array([0.3, -1.1, 2.0, 0.5], dtype=np.float32) + 0.1 * noise + 4.0).astype(np.float32)
    return x, y_bin, y_multi, y_reg


def _tabular_data(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """An object array [300, 5] (country, channel, amount, age_days, n_items) and a binary label."""
    country = rng.choice(COUNTRIES, N_ROWS)
    channel = rng.choice(CHANNELS, N_ROWS)
    amount = rng.lognormal(3.0, 1.0, N_ROWS).astype(np.float32)
    age_days = rng.uniform(0.0, 2000.0, N_ROWS).astype(np.float32)
    n_items = rng.integers(1, 11, N_ROWS).astype(np.int64)
    logit = (np.log(amount) - 3.0) - age_days / 1000.0 + 0.8 * (channel == "web") \
        + 0.6 * (country == "BR") + 0.1 * n_items - 0.3 + 0.5 * rng.standard_normal(N_ROWS)
    table = np.empty((N_ROWS, 5), dtype=object)
    for i, column in enumerate((country, channel, amount, age_days, n_items)):
        table[:, i] = column
    return table, (logit > 0).astype(np.int64)


def _mixed_data(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """An object array [300, 3] (is_online bool, tier string, n_orders float with NaN for a null
    count, 15% of them) and a binary label: a domain event's columns as pandas would hand them over."""
    is_online = rng.random(N_ROWS) < 0.4
    tier = rng.choice(TIERS, N_ROWS)
    n_orders = rng.integers(0, 20, N_ROWS).astype(np.float64)
    n_orders[rng.random(N_ROWS) < 0.15] = np.nan
    logit = 1.2 * is_online + 0.8 * (tier == "PRO") - 0.4 * (tier == "BASIC") \
        - 0.1 * np.nan_to_num(n_orders, nan=5.0) + 0.3 + 0.5 * rng.standard_normal(N_ROWS)
    table = np.empty((N_ROWS, 3), dtype=object)
    for i, column in enumerate((is_online, tier, n_orders)):
        table[:, i] = column
    return table, (logit > 0).astype(np.int64)


def _merge_parallel(models: list[onnx.ModelProto], prefixes: list[str], input_name: str,
                    name: str) -> onnx.ModelProto:
    """One graph running several single-input models side by side on a shared input.

    Each model keeps its nodes, initializers and outputs; node, initializer and intermediate names get
    the model's prefix (outputs and the shared input keep their names) so nothing collides.
    """
    nodes, inits, outputs, opsets = [], [], [], {}
    for model, prefix in zip(models, prefixes):
        keep = {input_name} | {o.name for o in model.graph.output}
        rename = {n: prefix + n for n in
                  {i.name for i in model.graph.initializer}
                  | {v for node in model.graph.node for v in (*node.input, *node.output)}
                  if n and n not in keep}
        for init in model.graph.initializer:
            init = onnx.TensorProto.FromString(init.SerializeToString())
            init.name = rename.get(init.name, init.name)
            inits.append(init)
        for node in model.graph.node:
            node = onnx.NodeProto.FromString(node.SerializeToString())
            node.name = prefix + node.name
            node.input[:] = [rename.get(v, v) for v in node.input]
            node.output[:] = [rename.get(v, v) for v in node.output]
            nodes.append(node)
        outputs.extend(model.graph.output)
        for op in model.opset_import:
            opsets[op.domain] = max(opsets.get(op.domain, 0), op.version)
    graph = onnx.helper.make_graph(nodes, name, [models[0].graph.input[0]], outputs, inits)
    merged = onnx.helper.make_model(
        graph, opset_imports=[onnx.helper.make_opsetid(d, v) for d, v in sorted(opsets.items())],
        producer_name=models[0].producer_name, producer_version=models[0].producer_version,
        ir_version=models[0].ir_version)
    onnx.checker.check_model(merged)
    return merged


def build_models() -> list[dict[str, Any]]:
    """Train and convert every model; returns [{file, description, model, classes?, sample}]."""
    import lightgbm
    import xgboost
    from onnxmltools.convert import convert_lightgbm, convert_xgboost
    from onnxmltools.convert.common.data_types import FloatTensorType as MlFloatTensorType
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import (
        DoubleTensorType,
        FloatTensorType,
        Int64TensorType,
        StringTensorType,
    )
    from sklearn.compose import ColumnTransformer
    from sklearn.decomposition import PCA
    from sklearn.ensemble import GradientBoostingClassifier
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    rng = np.random.default_rng(SEED)
    x, y_bin, y_multi, y_reg = _numeric_data(rng)
    table, y_tab = _tabular_data(rng)
    features = [("features", FloatTensorType([None, N_FEATURES]))]
    sample = {"features": x[:3]}
    out: list[dict[str, Any]] = []

    def add(file: str, description: str, model: onnx.ModelProto, inputs: dict[str, np.ndarray],
            classes: Any = None, fills: dict[str, float] | None = None) -> None:
        out.append({"file": file, "description": description, "model": model, "sample": inputs,
                    "classes": None if classes is None else [c.item() for c in classes], "fills": fills})

    logreg = LogisticRegression(random_state=0, max_iter=200).fit(x, y_bin)
    add("logreg_zipmap.onnx", "sklearn LogisticRegression, binary, 4 float features; skl2onnx default "
        "(ZipMap on): output_probability is a sequence of {class: probability} maps",
        convert_sklearn(logreg, "logreg_zipmap", features, target_opset=TARGET_OPSET), sample,
        logreg.classes_)
    add("logreg.onnx", "the same LogisticRegression converted with zipmap=False; skl2onnx then names "
        "the outputs label int64 [N] and probabilities float32 [N, 2]",
        convert_sklearn(logreg, "logreg", features, target_opset=TARGET_OPSET,
                        options={id(logreg): {"zipmap": False}}), sample, logreg.classes_)

    ridge = Ridge(alpha=1.0, random_state=0).fit(x, y_reg)
    add("regressor.onnx", "sklearn Ridge regression on 4 float features -> variable float32 [N, 1]",
        convert_sklearn(ridge, "regressor", features, target_opset=TARGET_OPSET), sample)

    gbm = Pipeline([("scale", StandardScaler()),
                    ("gbm", GradientBoostingClassifier(n_estimators=10, max_depth=2, random_state=0))])
    gbm.fit(x, y_bin)
    add("scaler_gbm.onnx", "sklearn Pipeline(StandardScaler, GradientBoostingClassifier(10 trees, depth 2)), "
        "binary, zipmap=False (Scaler + TreeEnsembleClassifier from ai.onnx.ml)",
        convert_sklearn(gbm, "scaler_gbm", features, target_opset=TARGET_OPSET,
                        options={id(gbm): {"zipmap": False}}), sample, gbm.classes_)

    # Integer column indices over an object array, in the order of initial_types: with one [N, 1]
    # input per column, skl2onnx maps column i to input i, so no pandas is needed.
    tab = Pipeline([
        ("prep", ColumnTransformer([
            ("onehot", OneHotEncoder(handle_unknown="ignore"), [0, 1]),
            ("scale", StandardScaler(), [2, 3]),
            ("scale_int", StandardScaler(), [4]),
        ])),
        ("clf", LogisticRegression(random_state=0, max_iter=500)),
    ]).fit(table, y_tab)
    tab_types = [("country", StringTensorType([None, 1])), ("channel", StringTensorType([None, 1])),
                 ("amount", FloatTensorType([None, 1])), ("age_days", FloatTensorType([None, 1])),
                 ("n_items", Int64TensorType([None, 1]))]
    tab_sample = {
        "country": table[:3, 0:1].astype(str).astype(object),
        "channel": table[:3, 1:2].astype(str).astype(object),
        "amount": table[:3, 2:3].astype(np.float32),
        "age_days": table[:3, 3:4].astype(np.float32),
        "n_items": table[:3, 4:5].astype(np.int64),
    }
    add("column_transformer.onnx", "sklearn ColumnTransformer (OneHotEncoder on country/channel, "
        "StandardScaler on amount/age_days and on int64 n_items) into LogisticRegression; "
        "one ONNX input per column; zipmap=False",
        convert_sklearn(tab, "column_transformer", tab_types, target_opset=TARGET_OPSET,
                        options={id(tab): {"zipmap": False}}), tab_sample, tab.classes_)

    x64 = x.astype(np.float64)
    linreg = LinearRegression().fit(x64, y_reg.astype(np.float64))
    add("float64_regressor.onnx", "sklearn LinearRegression with a double input: features float64 [N, 4] "
        "-> variable float64 [N, 1]",
        convert_sklearn(linreg, "float64_regressor", [("features", DoubleTensorType([None, N_FEATURES]))],
                        target_opset=TARGET_OPSET), {"features": x64[:3]})

    lgbm = lightgbm.LGBMClassifier(n_estimators=10, num_leaves=7, random_state=0, n_jobs=1, verbose=-1,
                                   deterministic=True, force_row_wise=True)
    lgbm.fit(x, y_bin)
    add("lightgbm.onnx", "lightgbm LGBMClassifier (10 trees, 7 leaves), binary, via "
        "onnxmltools.convert_lightgbm with zipmap=False: label int64 and probabilities float32 [N, 2]; "
        "the converter declares label's shape as [1] though it returns [N] (onnxruntime logs a "
        "VerifyOutputSizes warning per run)",
        convert_lightgbm(lgbm, "lightgbm", [("features", MlFloatTensorType([None, N_FEATURES]))],
                         target_opset=ONNXMLTOOLS_OPSET, zipmap=False), sample, lgbm.classes_)

    # xgboost: fit on a plain numpy array so the booster's feature names are none (the converter reads
    # split features as f0..fN and refuses other names).
    xgb = xgboost.XGBClassifier(n_estimators=10, max_depth=2, learning_rate=0.3, random_state=0, n_jobs=1,
                                tree_method="hist")
    xgb.fit(x, y_bin)
    add("xgboost.onnx", "xgboost XGBClassifier (10 trees, depth 2), binary, via onnxmltools.convert_xgboost "
        "(no ZipMap: label int64 [N] and probabilities float32 [N, 2])",
        convert_xgboost(xgb, "xgboost", [("features", MlFloatTensorType([None, N_FEATURES]))],
                        target_opset=ONNXMLTOOLS_OPSET), sample, xgb.classes_)

    multi = LogisticRegression(random_state=0, max_iter=500).fit(x, y_multi)
    add("multiclass.onnx", "sklearn LogisticRegression, 3 classes, zipmap=False: label int64 [N], "
        "probabilities float32 [N, 3]",
        convert_sklearn(multi, "multiclass", features, target_opset=TARGET_OPSET,
                        options={id(multi): {"zipmap": False}}), sample, multi.classes_)

    # Two float outputs, both from skl2onnx: each model converted on its own with its output named, then
    # the two graphs joined side by side over the shared input.
    pca = PCA(n_components=3, random_state=0).fit(x)
    score_part = convert_sklearn(ridge, "score", features, target_opset=TARGET_OPSET,
                                 final_types=[("score", FloatTensorType([None, 1]))])
    emb_part = convert_sklearn(pca, "embedding", features, target_opset=TARGET_OPSET,
                               final_types=[("embedding", FloatTensorType([None, 3]))])
    add("two_outputs.onnx", "two float outputs over one input: sklearn Ridge -> score float32 [N, 1] and "
        "sklearn PCA(3) -> embedding float32 [N, 3], each converted by skl2onnx, joined into one graph",
        _merge_parallel([score_part, emb_part], ["score_", "embedding_"], "features", "two_outputs"), sample)

    # The held-out kind: types a domain event has and the models above do not take. A boolean
    # (skl2onnx takes it as an int64 column), category strings (an enum's symbols) and a nullable
    # count (NaN in training; a float input with an imputer, as skl2onnx converts SimpleImputer).
    # Its own generator: the models above keep their bytes.
    mixed, y_mixed = _mixed_data(np.random.default_rng(SEED + 1))
    held_out = Pipeline([
        ("prep", ColumnTransformer([
            ("flag", "passthrough", [0]),
            ("tier", OneHotEncoder(handle_unknown="ignore"), [1]),
            ("orders", Pipeline([("impute", SimpleImputer(strategy="median")), ("scale", StandardScaler())]), [2]),
        ])),
        ("clf", LogisticRegression(random_state=0, max_iter=500)),
    ]).fit(mixed, y_mixed)
    imputed = float(held_out.named_steps["prep"].named_transformers_["orders"].named_steps["impute"].statistics_[0])
    add("bool_enum_nullable.onnx", "sklearn ColumnTransformer (is_online boolean passed through as an int64 "
        "input, tier category strings one-hot, n_orders a nullable count: float input, median SimpleImputer, "
        "StandardScaler) into LogisticRegression; one ONNX input per column; zipmap=False",
        convert_sklearn(held_out, "bool_enum_nullable",
                        [("is_online", Int64TensorType([None, 1])), ("tier", StringTensorType([None, 1])),
                         ("n_orders", FloatTensorType([None, 1]))],
                        target_opset=TARGET_OPSET, options={id(held_out): {"zipmap": False}}),
        {"is_online": mixed[:3, 0:1].astype(np.int64), "tier": mixed[:3, 1:2].astype(str).astype(object),
         "n_orders": mixed[:3, 2:3].astype(np.float32)}, held_out.classes_, {"n_orders": imputed})
    return out


def _stable(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with its opset imports sorted by domain: skl2onnx lists them in set order, which follows
    PYTHONHASHSEED, and only that order kept the bytes from being the same on every run."""
    opsets = sorted(model.opset_import, key=lambda op: op.domain)
    model = onnx.ModelProto.FromString(model.SerializeToString())
    del model.opset_import[:]
    model.opset_import.extend(opsets)
    return model


def _shape(shape: list[Any]) -> list[Any]:
    """ORT shape with every dynamic dimension (None or a symbolic name) as None."""
    return [d if isinstance(d, int) else None for d in shape]


def _check(path: Path, sample: dict[str, np.ndarray]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Load the file in onnxruntime on the CPU, run it on 3 rows, return its (inputs, outputs)."""
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    result = sess.run(None, sample)
    for value in result:
        n = len(value)
        if n != 3:
            raise RuntimeError(f"{path.name}: an output has {n} rows for 3 input rows")
    inputs = [{"name": i.name, "type": i.type, "shape": _shape(i.shape)} for i in sess.get_inputs()]
    outputs = [{"name": o.name, "type": o.type, "shape": _shape(o.shape)} for o in sess.get_outputs()]
    return inputs, outputs


def write_models(out_dir: Path) -> list[Path]:
    """Build, write and check every model, then write manifest.json; returns the model paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, Any] = {"seed": SEED, "rows": N_ROWS, "models": {}}
    paths = []
    for entry in build_models():
        path = out_dir / entry["file"]
        model = _stable(entry["model"])
        data = model.SerializeToString()
        if len(data) > MAX_BYTES:
            raise RuntimeError(f"{path.name} is {len(data)} bytes, over {MAX_BYTES}")
        path.write_bytes(data)
        inputs, outputs = _check(path, entry["sample"])
        info: dict[str, Any] = {
            "file": entry["file"], "description": entry["description"], "inputs": inputs, "outputs": outputs,
            "opset": {op.domain or "ai.onnx": op.version for op in model.opset_import},
            "bytes": len(data),
        }
        if entry["classes"] is not None:
            info["classes"] = entry["classes"]
        if entry["fills"] is not None:
            info["fills"] = entry["fills"]
        manifest["models"][path.stem] = info
        paths.append(path)
        sig_in = ", ".join(f"{i['name']}:{i['type']}{i['shape']}" for i in inputs)
        sig_out = ", ".join(f"{o['name']}:{o['type']}{o['shape']}" for o in outputs)
        print(f"wrote {path} ({len(data)} bytes): {sig_in} -> {sig_out}")
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"wrote {out_dir / 'manifest.json'}")
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True,
                        help="folder to write the models and manifest.json into")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    write_models(args.out)
    print(f"done in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
