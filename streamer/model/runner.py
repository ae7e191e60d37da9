"""ModelRunner protocol and the ONNX Runtime runner: one session call per batch, fed and read by its contract.

The runner asks for CUDA first and falls back to the CPU quietly: onnxruntime-gpu lists the CUDA
provider even on machines without a GPU or CUDA libraries, and then logs loud load errors that say
nothing the single INFO line naming the active provider does not.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal, Protocol

import numpy as np
import onnxruntime as ort

from streamer.config import Config
from streamer.errors import ConfigError, InferenceError, TransientInferenceError
from streamer.model.contract import Contract
from streamer.model.onnx_file import served_file
from streamer.model.signature import Columns, Signature

Device = Literal["cuda", "cpu"]
_PROVIDERS: dict[str, str] = {"cuda": "CUDAExecutionProvider", "cpu": "CPUExecutionProvider"}
# ONNX Runtime's default logger severity (2 = warning); it has no getter, so this is what we restore.
_ORT_DEFAULT_SEVERITY = 2
_ORT_FATAL_ONLY = 4
_BUFFERS = 8  # device input buffers kept, one per batch size

# What ONNX Runtime says when the device, not the data, failed: worth a retry on fewer rows.
_TRANSIENT = re.compile(r"out of memory|Failed to allocate|CUDA_ERROR_OUT_OF_MEMORY|cudaErrorMemoryAllocation"
                        r"|BFCArena|timed? ?out", re.IGNORECASE)

log = logging.getLogger(__name__)


class ModelRunner(Protocol):
    """Scores a batch of the model's input columns, one result row per input row: Columns named
    by prediction field (contract.py). A wrapper declares the wrapped model's signature and
    contract, which the loop, the stages and the reload checks read."""

    @property
    def signature(self) -> Signature: ...

    @property
    def contract(self) -> Contract: ...

    @property
    def provider(self) -> str: ...

    def warm_up(self, rows: int) -> None: ...

    def run(self, features: Columns) -> Columns: ...


class OnnxRunner:
    """Runs an ONNX model as its contract says: named, typed inputs in, named outputs out.

    Args:
        path: the ``.onnx`` file.
        providers: devices in order of preference; only those ONNX Runtime lists are requested.
        intra_op_threads: threads per operator; 0 lets ONNX Runtime choose.
        cuda_options: CUDA provider options (device_id, gpu_mem_limit, arena_extend_strategy).
        io_binding: bind the input and output (None: when the session runs on CUDA). Each batch
            size gets an input buffer on the device, reused batch after batch (one host-to-device
            copy into it per batch), and the output is copied back once per batch. ONNX Runtime's
            Python API has no pinned host buffers to offer; the copy is from the batch's array.
            Only for a model fed the feature array with its one output unmapped (one column each way).
        contract: makes the contract from the model's signature (default: one input fed a float
            matrix, one output read as scores); it raises ConfigError for a model it cannot serve.

    Raises:
        ConfigError: a provider name is unknown, or the contract does not fit the model.
        InferenceError: the model cannot be loaded.
    """

    def __init__(
        self, path: str | Path, providers: Sequence[Device] = ("cuda", "cpu"), intra_op_threads: int = 0,
        cuda_options: dict[str, str] | None = None, io_binding: bool | None = None,
        contract: Callable[[Signature], Contract] | None = None,
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
        # Errors only from each run: a converter's declared shape that the model does not keep
        # (LightGBM's label [1] for [N]) is a warning on every batch otherwise; the contract
        # checks the shapes that matter itself.
        options.log_severity_level = 3
        if cuda_options:
            wanted = [(p, dict(cuda_options)) if p == _PROVIDERS["cuda"] else p for p in wanted]
        self._session = self._open(options, wanted)
        self._provider: str = self._session.get_providers()[0]
        on_cuda = self._provider == _PROVIDERS["cuda"]
        self._device = ("cuda", int((cuda_options or {}).get("device_id", 0))) if on_cuda else ("cpu", 0)
        self._signature = Signature.of(self._session)
        try:
            self._contract = (contract or Contract.of)(self._signature)
        except ConfigError as exc:
            raise ConfigError(exc.key, f"model {self.path.name}: {exc.reason}") from exc
        simple = (self.contract.feature_column is not None and self.contract.score_column is not None
                  and len(self.signature.outputs) == 1)
        self._bound = simple and (on_cuda if io_binding is None else io_binding)
        self._buffers: dict[int, ort.OrtValue] = {}  # an input buffer on the device per batch size
        self._binding = self._session.io_binding() if self._bound else None
        self._outputs = self.contract.output_names
        self._input = self.contract.inputs[0].spec.name
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
    def signature(self) -> Signature:
        """The model's inputs and outputs, read from its session."""
        return self._signature

    @property
    def contract(self) -> Contract:
        """How the model is fed and read (contract.py)."""
        return self._contract

    @property
    def provider(self) -> str:
        """The execution provider the session actually runs on, e.g. ``CPUExecutionProvider``."""
        return self._provider

    def warm_up(self, rows: int = 1) -> None:
        """Run one batch of zeros so the first real batch does not pay for lazy initialisation."""
        self.run(self.contract.blank(rows))

    def run(self, features: Columns) -> Columns:
        """Score a batch in one session call; the result as :meth:`Contract.collect` gives it.

        Raises:
            InferenceError: the runtime failed, or returned a different number of rows than it was given.
        """
        feed = self.contract.feed(features)
        rows = len(features)
        try:
            if self._binding is not None:
                raw = [self._run_bound(feed[self._input])]
            else:
                raw = self._session.run(self._outputs, feed)
        except Exception as exc:  # onnxruntime's error classes share no useful base beyond Exception
            if _TRANSIENT.search(str(exc)):
                raise TransientInferenceError(
                    f"model {self.path.name} ran out of a resource on {rows} rows: {exc}"
                ) from exc
            raise InferenceError(f"model {self.path.name} failed on a batch of {rows} rows: {exc}") from exc
        return self.contract.collect(raw, rows)

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
        self._binding.bind_output(self._outputs[0], *self._device)
        self._session.run_with_iobinding(self._binding)
        return self._binding.copy_outputs_to_cpu()[0]

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


def model_runner(cfg: Config, path: Path | None = None) -> ModelRunner:
    """The model at ``path`` (default: the one ``model.path`` serves) on the configured devices,
    with the contract of ``model.inputs`` and ``model.outputs`` (ConfigError: it does not fit)."""
    m = cfg.model
    return OnnxRunner(path or served_file(m)[0], m.providers, intra_op_threads=m.intra_op_threads,
                      cuda_options=cuda_options(m.cuda_device_id, m.cuda_mem_limit_mb, m.cuda_arena),
                      io_binding=m.io_binding,
                      contract=lambda sig: Contract.of(sig, m.inputs, m.outputs, cfg.input.features_field))
