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
_BUFFERS = 8  # device input buffers kept, one per batch size

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
        cuda_options: CUDA provider options (device_id, gpu_mem_limit, arena_extend_strategy).
        io_binding: bind the input and output (None: when the session runs on CUDA). Each batch
            size gets an input buffer on the device, reused batch after batch (one host-to-device
            copy into it per batch), and the output is copied back once per batch. ONNX Runtime's
            Python API has no pinned host buffers to offer; the copy is from the batch's array.

    Raises:
        ConfigError: a provider name is unknown.
        InferenceError: the model cannot be loaded, or has no usable input.
    """

    def __init__(
        self, path: str | Path, providers: Sequence[Device] = ("cuda", "cpu"), intra_op_threads: int = 0,
        cuda_options: dict[str, str] | None = None, io_binding: bool | None = None,
    ) -> None:
        self.path = Path(path)
        unknown = [p for p in providers if p not in _PROVIDERS]
        if unknown or not providers:
            raise ConfigError(
                "model.providers", f"use one or more of {sorted(_PROVIDERS)}; got {list(providers)}"
            )
        available = ort.get_available_providers()
        wanted: list[str | tuple[str, dict[str, str]]] = [_PROVIDERS[p] for p in providers if _PROVIDERS[p] in available]
        if not wanted:
            raise InferenceError(
                f"none of the providers {list(providers)} is available; ONNX Runtime has {available}"
            )
        options = ort.SessionOptions()
        options.intra_op_num_threads = intra_op_threads
        if cuda_options:
            wanted = [(p, dict(cuda_options)) if p == _PROVIDERS["cuda"] else p for p in wanted]
        self._session = self._open(options, wanted)
        self._provider: str = self._session.get_providers()[0]
        on_cuda = self._provider == _PROVIDERS["cuda"]
        self._device = ("cuda", int((cuda_options or {}).get("device_id", 0))) if on_cuda else ("cpu", 0)
        self._bound = on_cuda if io_binding is None else io_binding
        self._buffers: dict[int, ort.OrtValue] = {}  # an input buffer on the device per batch size
        self._binding = self._session.io_binding() if self._bound else None
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

    def _open(self, options: ort.SessionOptions,
              wanted: list[str | tuple[str, dict[str, str]]]) -> ort.InferenceSession:
        """Create the session; if CUDA is among ``wanted`` and creation fails, retry on the rest quietly."""
        if not self.path.is_file():
            raise InferenceError(f"cannot load model {self.path}: no such file")
        # ONNX Runtime logs CUDA load failures at ERROR (severity 3 still shows them): only FATAL gets out.
        ort.set_default_logger_severity(_ORT_FATAL_ONLY)
        try:
            names = [p if isinstance(p, str) else p[0] for p in wanted]
            if _PROVIDERS["cuda"] in names and len(wanted) > 1:
                try:
                    return ort.InferenceSession(str(self.path), options, providers=wanted)
                except Exception as exc:  # noqa: BLE001 - whatever stopped CUDA, the CPU may still work
                    log.debug("model %s: CUDA session failed, retrying without it: %s", self.path.name, exc)
                    wanted = [p for p, name in zip(wanted, names, strict=True) if name != _PROVIDERS["cuda"]]
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
            if self._binding is not None:
                out = self._run_bound(x)
            else:
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

    def _run_bound(self, x: np.ndarray) -> np.ndarray:
        """One batch through the I/O binding: into this size's device buffer, run, one copy back."""
        assert self._binding is not None
        buffer = self._buffers.get(len(x))
        if buffer is None:
            if len(self._buffers) >= _BUFFERS:  # bisection's odd sizes: keep the newest few
                self._buffers.pop(next(iter(self._buffers)))
            buffer = ort.OrtValue.ortvalue_from_shape_and_type(x.shape, np.float32, *self._device)
            self._buffers[len(x)] = buffer
        buffer.update_inplace(x)
        self._binding.bind_ortvalue_input(self._input, buffer)
        self._binding.bind_output(self._output, *self._device)
        self._session.run_with_iobinding(self._binding)
        return np.asarray(self._binding.copy_outputs_to_cpu()[0], dtype=np.float32)

    @property
    def io_bound(self) -> bool:
        return self._binding is not None


def cuda_options(device_id: int, mem_limit_mb: int, arena: str) -> dict[str, str]:
    """The CUDA provider's options from the config's ``model.cuda_*`` keys (0 MB: no limit)."""
    options = {"device_id": str(device_id),
               "arena_extend_strategy": {"next_power_of_two": "kNextPowerOfTwo",
                                         "same_as_requested": "kSameAsRequested"}[arena]}
    if mem_limit_mb:
        options["gpu_mem_limit"] = str(mem_limit_mb * 1024 * 1024)
    return options
