"""ModelRunner protocol and the ONNX Runtime runner: one session call per batch, output rows checked.

The runner asks for CUDA first and falls back to the CPU quietly: onnxruntime-gpu lists the CUDA
provider even on machines without a GPU or CUDA libraries, and then logs loud load errors that say
nothing the single INFO line naming the active provider does not.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, Protocol

import numpy as np
import onnxruntime as ort

from streamer.errors import ConfigError, InferenceError, TransientInferenceError

Device = Literal["cuda", "cpu"]
_PROVIDERS: dict[str, str] = {"cuda": "CUDAExecutionProvider", "cpu": "CPUExecutionProvider"}
# ONNX Runtime's default logger severity (2 = warning); it has no getter, so this is what we restore.
_ORT_DEFAULT_SEVERITY = 2
_ORT_FATAL_ONLY = 4

# What ONNX Runtime says when the device, not the data, failed: worth a retry on fewer rows.
_TRANSIENT = re.compile(r"out of memory|Failed to allocate|CUDA_ERROR_OUT_OF_MEMORY|cudaErrorMemoryAllocation"
                        r"|BFCArena|timed? ?out", re.I)

log = logging.getLogger(__name__)


class ModelRunner(Protocol):
    """Scores a batch: float32 [rows, n_features] in, float32 [rows, n_outputs] out, one row per row."""

    @property
    def n_features(self) -> int: ...

    @property
    def provider(self) -> str: ...

    def warm_up(self, rows: int) -> None: ...

    def run(self, features: np.ndarray) -> np.ndarray: ...


class OnnxRunner:
    """Runs an ONNX model with one input ``[batch, n_features]`` and scores as its first output.

    Args:
        path: the ``.onnx`` file.
        providers: devices in order of preference; only those ONNX Runtime lists are requested.
        intra_op_threads: threads per operator; 0 lets ONNX Runtime choose.

    Raises:
        ConfigError: a provider name is unknown.
        InferenceError: the model cannot be loaded, or has no usable input.
    """

    def __init__(
        self, path: str | Path, providers: Sequence[Device] = ("cuda", "cpu"), intra_op_threads: int = 0
    ) -> None:
        self.path = Path(path)
        unknown = [p for p in providers if p not in _PROVIDERS]
        if unknown or not providers:
            raise ConfigError(
                "model.providers", f"use one or more of {sorted(_PROVIDERS)}; got {list(providers)}"
            )
        available = ort.get_available_providers()
        wanted = [_PROVIDERS[p] for p in providers if _PROVIDERS[p] in available]
        if not wanted:
            raise InferenceError(
                f"none of the providers {list(providers)} is available; ONNX Runtime has {available}"
            )
        options = ort.SessionOptions()
        options.intra_op_num_threads = intra_op_threads
        self._session = self._open(options, wanted)
        self._provider: str = self._session.get_providers()[0]
        inputs, outputs = self._session.get_inputs(), self._session.get_outputs()
        shape = inputs[0].shape if len(inputs) == 1 else []
        if len(shape) != 2 or not isinstance(shape[1], int):
            found = [(i.name, i.shape) for i in inputs]
            raise InferenceError(
                f"model {self.path.name} needs one input [batch, n_features]; it has {found}"
            )
        self._input, self._output, self._n_features = inputs[0].name, outputs[0].name, shape[1]
        # The version the file declares (ONNX metadata property "version"), for hot reloads.
        self.declared_version: str | None = self._session.get_modelmeta().custom_metadata_map.get("version")
        note = ""
        if "cuda" in providers and self._provider != _PROVIDERS["cuda"]:
            note = " (CUDA requested but not available)"
        log.info("model %s running on %s%s", self.path.name, self._provider, note)

    def _open(self, options: ort.SessionOptions, wanted: list[str]) -> ort.InferenceSession:
        """Create the session; if CUDA is among ``wanted`` and creation fails, retry on the rest quietly."""
        if not self.path.is_file():
            raise InferenceError(f"cannot load model {self.path}: no such file")
        # ONNX Runtime logs CUDA load failures at ERROR (severity 3 still shows them): only FATAL gets out.
        ort.set_default_logger_severity(_ORT_FATAL_ONLY)
        try:
            if _PROVIDERS["cuda"] in wanted and len(wanted) > 1:
                try:
                    return ort.InferenceSession(str(self.path), options, providers=wanted)
                except Exception as exc:  # noqa: BLE001 - whatever stopped CUDA, the CPU may still work
                    log.debug("model %s: CUDA session failed, retrying without it: %s", self.path.name, exc)
                    wanted = [p for p in wanted if p != _PROVIDERS["cuda"]]
            return ort.InferenceSession(str(self.path), options, providers=wanted)
        except Exception as exc:  # onnxruntime raises its own Fail/InvalidArgument/InvalidGraph classes
            raise InferenceError(f"cannot load model {self.path}: {exc}") from exc
        finally:
            ort.set_default_logger_severity(_ORT_DEFAULT_SEVERITY)

    @property
    def n_features(self) -> int:
        return self._n_features

    @property
    def provider(self) -> str:
        """The execution provider the session actually runs on, e.g. ``CPUExecutionProvider``."""
        return self._provider

    def warm_up(self, rows: int = 1) -> None:
        """Run one batch of zeros so the first real batch does not pay for lazy initialisation."""
        self.run(np.zeros((rows, self._n_features), dtype=np.float32))

    def run(self, features: np.ndarray) -> np.ndarray:
        """Score float32 [rows, n_features] in one session call; returns float32 [rows, n_outputs].

        Raises:
            InferenceError: the runtime failed, or returned a different number of rows than it was given.
        """
        x = np.ascontiguousarray(features, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self._n_features:
            raise InferenceError(
                f"model {self.path.name} takes [rows, {self._n_features}] features, got {x.shape}"
            )
        try:
            out = np.asarray(self._session.run([self._output], {self._input: x})[0], dtype=np.float32)
        except Exception as exc:  # onnxruntime's error classes share no useful base beyond Exception
            if _TRANSIENT.search(str(exc)):
                raise TransientInferenceError(
                    f"model {self.path.name} ran out of a resource on {len(x)} rows: {exc}"
                ) from exc
            raise InferenceError(f"model {self.path.name} failed on a batch of {len(x)} rows: {exc}") from exc
        if out.ndim < 2:
            out = out.reshape(-1, 1)
        if out.ndim != 2:
            raise InferenceError(
                f"model {self.path.name} returned a {out.ndim}-D output; expected [rows, n_outputs]"
            )
        if len(out) != len(x):
            raise InferenceError(f"model returned {len(out)} output rows for {len(x)} input rows")
        return out
