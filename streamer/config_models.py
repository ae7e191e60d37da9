"""The config sections of the models a deployment serves: ``model`` (one model), ``models`` (a
repository of several, one of them the default) and ``route`` (which model scores an event).

Validated like every section (config.py's docstring) and imported through streamer.config. A
model of the repository is checked as ``model`` is, and refused naming its own key
(``models.named.<name>.model.path``); config.py's ``for_model`` is the whole config one model scores with.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal, Protocol

from streamer.config_check import above, at_least, check_types, file_exists
from streamer.config_contract import InputSource, OutputTarget
from streamer.config_sections import BatchingConfig, ShadowConfig
from streamer.errors import ConfigError

Provider = Literal["cuda", "cpu"]
Unknown = Literal["default", "dead_letter"]
MANIFEST = "model.yaml"  # a repository folder's model: its sections model, batching and shadow


@dataclass(frozen=True, slots=True)
class ModelConfig:
    path: Path  # an ONNX file, or a folder of versions '<n>/model.onnx' (the highest is served)
    name: str  # the model's name in predictions and metrics
    version: str  # written as model.version in every prediction, exactly as given
    # The model's contract (model/contract.py). None: a single input from input.features_field
    # and a single output as 'scores' (a model with more of either needs these mappings).
    inputs: Mapping[str, InputSource] | None = None  # model input name -> where its values come from
    outputs: Mapping[str, OutputTarget] | None = None  # prediction field -> model output
    providers: tuple[Provider, ...] = ("cuda", "cpu")  # ONNX Runtime providers, tried in this order
    intra_op_threads: int = 1  # 1: no spinning thread pool competing with librdkafka; 0: ONNX Runtime decides
    drift_profile: Path | None = None  # the training features' profile (observe/drift.py); None: no drift metrics
    drift_window_rows: int = 100_000  # the live rows compared with it (a sliding window)
    reload_check_ms: int = 2_000  # how often model.path is looked at for a new model; 0: on SIGHUP only
    pipelined: bool | None = None  # score on an inference thread (pipeline/inference.py); None: when heavy
    io_binding: bool | None = None  # bind input and output to device buffers; None: on CUDA
    cuda_device_id: int = 0  # the GPU the CUDA provider runs on
    cuda_mem_limit_mb: int = 0  # the CUDA arena's limit; 0: none
    cuda_arena: Literal["next_power_of_two", "same_as_requested"] = "next_power_of_two"  # how the arena grows
    # Degrade, don't fail (pipeline/serving.py): with a fallback, a failing or slow model trips a
    # circuit breaker and the fallback scores, its predictions flagged degraded. None: hold and retry.
    fallback_path: Path | None = None  # a simpler ONNX model, same input width
    fallback_scores: tuple[float, ...] | None = None  # or a constant output row
    timeout_ms: int = 0  # a batch slower than this opens the breaker; 0: no limit
    breaker_failures: int = 3  # failed batches in a row that open it
    breaker_probe_ms: int = 1_000  # open: the first probe of the model after this, then doubling
    breaker_probe_max_ms: int = 60_000  # the longest wait between probes

    def __post_init__(self) -> None:
        check_types(self, "model")
        for name, source in (self.inputs or {}).items():
            source.check(f"model.inputs.{name}")
        if self.inputs == {}:
            raise ConfigError("model.inputs", "maps no input (leave it out for the default)")
        if self.outputs == {}:
            raise ConfigError("model.outputs", "maps no output (leave it out for the default)")
        if self.outputs is not None and self.fallback_scores is not None:
            raise ConfigError("model.fallback_scores", "a constant row stands in for 'scores' only; with "
                                                      "model.outputs use model.fallback_path")
        if not self.providers:
            raise ConfigError("model.providers", "needs at least one of 'cuda', 'cpu'")
        at_least(0, "model.intra_op_threads", self.intra_op_threads)
        at_least(1, "model.drift_window_rows", self.drift_window_rows)
        at_least(0, "model.reload_check_ms", self.reload_check_ms)
        at_least(0, "model.cuda_device_id", self.cuda_device_id)
        at_least(0, "model.cuda_mem_limit_mb", self.cuda_mem_limit_mb)
        at_least(0, "model.timeout_ms", self.timeout_ms)
        at_least(1, "model.breaker_failures", self.breaker_failures)
        above(0, "model.breaker_probe_ms", self.breaker_probe_ms)
        if self.breaker_probe_max_ms < self.breaker_probe_ms:
            raise ConfigError("model.breaker_probe_max_ms", f"{self.breaker_probe_max_ms} is below "
                                                            f"model.breaker_probe_ms {self.breaker_probe_ms}")
        if self.fallback_path is not None and self.fallback_scores is not None:
            raise ConfigError("model.fallback_scores", "set model.fallback_path or model.fallback_scores, not both")
        if self.fallback_scores == ():
            raise ConfigError("model.fallback_scores", "needs at least one score")
        if not (self.path.is_dir() and model_versions(self.path)):  # a file, or a folder of versions
            file_exists("model.path", "model", self.path)
        file_exists("model.fallback_path", "fallback model", self.fallback_path)
        file_exists("model.drift_profile", "drift profile", self.drift_profile)

    @property
    def fallback(self) -> bool:
        return self.fallback_path is not None or self.fallback_scores is not None



MODEL_FILE = "model.onnx"  # inside each numbered version folder of a model directory


def model_versions(folder: Path) -> dict[int, Path]:
    """A model directory's versions (Triton's and TF Serving's layout): ``<folder>/<n>/model.onnx``
    for each whole number n; the highest is the one served."""
    found = {}
    for child in folder.iterdir() if folder.is_dir() else ():
        if child.name.isdigit() and (child / MODEL_FILE).is_file():
            found[int(child.name)] = child / MODEL_FILE
    return found


@dataclass(frozen=True, slots=True)
class ModelEntry:
    """One model of the repository: a ``model`` section (its ``name`` is the entry's), and the
    ``batching`` and ``shadow`` challengers of its own (null: the config's batching; no challengers but the `shadow` section's for the default model)."""

    model: ModelConfig  # the keys of the model section: path, version, inputs, outputs, fallback, drift, ...
    batching: BatchingConfig | None = None  # its batches' size and wait; null: the config's batching
    shadow: ShadowConfig | None = None  # its challengers in shadow; null: none (the default model: the shadow section's)

    def __post_init__(self) -> None:
        check_types(self, "")


@dataclass(frozen=True, slots=True)
class ModelsConfig:
    """Several models in one deployment: the ``model`` section (when given) and each model named
    here or found in ``repository``. The stream scores each event with the model ``route`` picks;
    online, each model answers at ``/v2/models/<name>``; a command or a job names one with
    ``--model``."""

    named: Mapping[str, ModelEntry] = field(default_factory=dict)  # model name -> its model section, and batching and shadow of its own
    repository: Path | None = None  # a folder of models: each sub-folder holding a model.yaml (sections model, batching, shadow; paths relative to it) is one, named by the folder
    default: str | None = None  # the model of an event no route names, and of a command without --model; null: model.name (required without a model section, which is the default when given)
    max_loaded: int = 0  # the most models in memory at once online (the least recently used unloaded first, loaded again on demand); 0: no bound

    def __post_init__(self) -> None:
        check_types(self, "models")
        at_least(0, "models.max_loaded", self.max_loaded)
        for name, entry in self.named.items():
            if entry.model.name != name:
                raise ConfigError(f"models.named.{name}.model.name",
                                  f"is {entry.model.name!r}: a model's name is its entry's, {name!r}")
        if self.repository is not None and not self.repository.is_dir():
            raise ConfigError("models.repository", f"{self.repository} is not a folder")


@dataclass(frozen=True, slots=True)
class RouteConfig:
    """Which model scores an event: the value of one of its fields, looked up in ``map``."""

    field: str | None = None  # the event field (a dotted path) whose value picks the model, e.g. tenant; null: every event to the default model
    map: Mapping[str, str] = dataclasses.field(default_factory=dict)  # the field's value (as text) -> the model that scores it
    unknown: Unknown = "default"  # a value the map does not name (or no value): scored by the default model, or a dead letter

    def __post_init__(self) -> None:
        check_types(self, "route")
        if self.field is not None and (not self.field or "" in self.field.split(".")):
            raise ConfigError("route.field", f"{self.field!r} is not a field name")
        if self.field is None and self.map:
            raise ConfigError("route.field", "is required with route.map (the field its values are of)")
        if self.field is not None and not self.map:
            raise ConfigError("route.map", "maps no value to a model")


class HasModels(Protocol):
    """A :class:`~streamer.config.Config`, as the model sections' functions read it."""

    @property
    def model(self) -> ModelConfig: ...
    @property
    def models(self) -> ModelsConfig: ...
    @property
    def route(self) -> RouteConfig: ...
    @property
    def shadow(self) -> ShadowConfig: ...


def model_entries(cfg: HasModels) -> dict[str, ModelEntry]:
    """Every model of ``cfg`` by name: the ``model`` section's (its batching and challengers are
    the config's) and the repository's."""
    entries = dict(cfg.models.named)
    if cfg.model.name not in entries:
        entries[cfg.model.name] = ModelEntry(cfg.model)
    return entries


def default_model(cfg: HasModels) -> str:
    """The default model's name: ``models.default``, else the model section's."""
    return cfg.models.default or cfg.model.name


def under(found: str, key: str) -> str:
    """A model section's key (``model.inputs.x``, as a model's checks name it) under the model's
    own (``models.named.a.model``: ``models.named.a.model.inputs.x``); another key as it is."""
    return key + found[len("model"):] if found == "model" or found.startswith("model.") else found


def model_shadow(cfg: HasModels, name: str, entry: ModelEntry) -> ShadowConfig:
    """A model's challengers: its entry's, else the ``shadow`` section's for the model section's
    model (the default one without a model section), else none."""
    if entry.shadow is not None:
        return entry.shadow
    return cfg.shadow if name == cfg.model.name else replace(cfg.shadow, challengers=())


def route_models(cfg: HasModels) -> tuple[str, ...]:
    """The models the stream scores with, the default first: the default alone without a route,
    else the default (unless unknown values are dead letters and no value maps to it) and every
    model the route's map names."""
    default = default_model(cfg)
    if cfg.route.field is None:
        return (default,)
    named = list(dict.fromkeys(cfg.route.map.values()))
    first = [default] if cfg.route.unknown == "default" or default in named else []
    return tuple(dict.fromkeys(first + named))


def check_models(cfg: HasModels) -> None:
    """What the model sections cannot check alone: the default and the route's models exist, and a
    challenger is not named like a model."""
    entries = model_entries(cfg)
    if cfg.models.default is not None and cfg.models.default not in entries:
        raise ConfigError("models.default", f"no model {cfg.models.default!r}; the models are "
                                            f"{', '.join(sorted(entries))}")
    if cfg.models.default is not None and cfg.models.default != cfg.model.name:
        raise ConfigError("models.default", f"names {cfg.models.default!r}, but the model section's model "
                                            f"{cfg.model.name!r} is the default: name it, or leave one out")
    for value, name in cfg.route.map.items():
        if name not in entries:
            raise ConfigError(f"route.map.{value}", f"no model {name!r}; the models are {', '.join(sorted(entries))}")
    for name, entry in entries.items():
        for challenger in model_shadow(cfg, name, entry).challengers:
            if challenger.name in entries:
                raise ConfigError("shadow.challengers", f"a challenger cannot be named like a model "
                                                        f"({challenger.name!r})")
