"""`streamer model optimize`: a faster candidate of a model file, saved beside it, never served unproven.

ONNX Runtime's graph optimizations are applied once and the optimized graph saved (``extended``
by default: ``all`` adds layout changes tied to this machine's CPU). With ``int8`` the model is
quantized by ``onnxruntime.quantization`` after its pre-processing (shape inference and the same
optimizations): dynamically (weights to INT8, activations quantized per batch at run time, no
calibration), or statically when calibration rows are given (activations' ranges measured on
those rows, MinMax). The output records where it came from in its ``metadata_props``: the
parent's digest and file name and the options, so a candidate names its parent.

A quick look follows: the candidate and its parent score the same rows (the calibration rows, or
random ones of the model's input shape) and the largest difference of each output is printed.
It is a smoke test: the proof is both models' scores on the same history (`streamer evaluate`).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from streamer.errors import ConfigError, FileError
from streamer.model.onnx_file import file_digest

LEVELS = {"basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
          "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
          "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}
Feeds = dict[str, np.ndarray]


@dataclass(frozen=True, slots=True)
class Optimized:
    """What optimize wrote: the file, its options, its parent's digest, and the quick look's
    largest |difference| per output on ``rows`` rows."""

    out: Path
    options: dict[str, Any]
    parent_digest: str
    rows: int
    max_abs_delta: dict[str, float]

    def lines(self) -> list[str]:
        deltas = ", ".join(f"{name} {delta:.3g}" for name, delta in self.max_abs_delta.items())
        return [f"wrote {self.out} ({self.out.stat().st_size:,} bytes): {json.dumps(self.options, sort_keys=True)}, "
                f"parent digest {self.parent_digest}",
                f"largest |candidate - parent| on {self.rows} rows: {deltas}",
                f"a smoke test: prove it on history before it serves: streamer evaluate --config FILE "
                f"--candidate {self.out} --from 7d --require \"agreement>=0.97,p99_abs_delta<=0.02\""]


def optimize(path: Path, out: Path, *, level: str = "extended", int8: bool = False,
             calibration: Iterable[Feeds] | None = None) -> Optimized:
    """Write ``path``'s optimized (and with ``int8``, quantized) graph to ``out``. ``calibration``:
    batches of the model's inputs for static quantization (None: dynamic)."""
    if level not in LEVELS:
        raise ConfigError("--level", f"must be one of {', '.join(LEVELS)}, got {level!r}")
    if calibration is not None and not int8:
        raise ConfigError("--calibrate-from", "calibrates INT8 quantization: give --int8 too")
    if out.resolve() == path.resolve():
        raise ConfigError("--out", "is the model itself: write the candidate beside it")
    parent = _session(path)
    options: dict[str, Any] = {"level": level, "int8": ("static" if calibration is not None else "dynamic")
                               if int8 else None}
    with tempfile.TemporaryDirectory() as tmp:
        if not int8:
            _optimized(path, out, LEVELS[level])
        else:
            rows = _quantized(path, out, Path(tmp), calibration)
            if calibration is not None:
                options["calibration_rows"] = rows
    digest = file_digest(path)
    _record(out, {"streamer.parent_digest": digest, "streamer.parent": path.name,
                  "streamer.optimize": json.dumps(options, sort_keys=True)})
    feeds = _look_rows(parent)
    deltas = _deltas(parent, _session(out), feeds)
    return Optimized(out, options, digest, len(next(iter(feeds.values()))), deltas)


def _session(path: Path, level: Any = None, saved: Path | None = None) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    if level is not None:
        opts.graph_optimization_level = level
    if saved is not None:
        opts.optimized_model_filepath = str(saved)
    try:
        return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own classes for a missing or corrupt file
        raise FileError(path, f"cannot load it as an ONNX model: {exc}") from exc


def _optimized(path: Path, out: Path, level: Any) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    _session(path, level, saved=out)  # ONNX Runtime writes the optimized graph as it loads


def _quantized(path: Path, out: Path, tmp: Path, calibration: Iterable[Feeds] | None) -> int:
    """Quantize to INT8 (static with calibration, else dynamic); the calibration rows used."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantType,
        quant_pre_process,
        quantize_dynamic,
        quantize_static,
    )

    pre = tmp / "pre.onnx"
    quant_pre_process(str(path), str(pre))
    out.parent.mkdir(parents=True, exist_ok=True)
    if calibration is None:
        quantize_dynamic(str(pre), str(out), weight_type=QuantType.QInt8)
        return 0
    batches = list(calibration)
    if not batches:
        raise ConfigError("--calibrate-from", "the range holds no rows the model can take: nothing to calibrate on")

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._left: Iterator[Feeds] = iter(batches)

        def get_next(self) -> Feeds | None:
            return next(self._left, None)

    quantize_static(str(pre), str(out), Reader(), activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
    return sum(len(next(iter(b.values()))) for b in batches)


def _record(out: Path, props: dict[str, str]) -> None:
    import onnx

    model = onnx.load(str(out))
    kept = [p for p in model.metadata_props if p.key not in props]
    del model.metadata_props[:]
    model.metadata_props.extend(kept)
    for key, value in props.items():
        model.metadata_props.add(key=key, value=value)
    onnx.save(model, str(out))


def _look_rows(session: ort.InferenceSession, n: int = 256) -> Feeds:
    """Rows of the model's input shape: standard normal numbers (integers 0..9, strings "0".."9")."""
    rng = np.random.default_rng(20261204)
    feeds: Feeds = {}
    for spec in session.get_inputs():
        dims = [n if i == 0 or not isinstance(d, int) else d for i, d in enumerate(spec.shape)]
        if "string" in spec.type:
            feeds[spec.name] = rng.integers(0, 10, dims).astype(str).astype(object)
        elif "int" in spec.type:
            feeds[spec.name] = rng.integers(0, 10, dims).astype(np.int64 if "64" in spec.type else np.int32)
        elif "bool" in spec.type:
            feeds[spec.name] = rng.integers(0, 2, dims).astype(bool)
        else:
            feeds[spec.name] = rng.standard_normal(dims).astype(np.float64 if "double" in spec.type else np.float32)
    return feeds


def _deltas(parent: ort.InferenceSession, candidate: ort.InferenceSession, feeds: Feeds) -> dict[str, float]:
    names = [o.name for o in parent.get_outputs()]
    want, got = parent.run(names, feeds), candidate.run(names, feeds)
    out = {}
    for name, a, b in zip(names, want, got, strict=True):
        if isinstance(a, np.ndarray) and a.dtype.kind in "fiub":
            out[name] = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) if a.size else 0.0
    return out
