"""Reading a config file: YAML, ``${ENV}`` interpolation, conversion to the typed :class:`Config`
(or to the part of it a tool reads, :func:`load_part`).

``${VAR}`` and ``${VAR:-default}`` are taken from the environment after the YAML is parsed, so a
value from the environment can never change the document's structure; a value that is exactly
one ``${...}`` takes the YAML type of what it expands to (``"8"`` becomes 8). Values of
secret-looking ``kafka:`` keys become :class:`Secret`. Relative paths are resolved against the
config file's folder. Validation is the types' own (config.py).
"""

from __future__ import annotations

import os
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import MISSING, fields, replace
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, cast, get_args, get_origin

import yaml

from streamer.config import KAFKA_NEEDS, SECRET_KEY, Config, ModelEntry, ModelsConfig, Secret, UnscoredConfig
from streamer.config_check import Location, kind_of
from streamer.config_models import MANIFEST
from streamer.errors import ConfigError, FileError
from streamer.kafka.clients import check_properties  # the one place librdkafka dicts are built

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
T = TypeVar("T")


def load_config(path: str | Path, env: Mapping[str, str] | None = None) -> Config:
    """Read, interpolate and validate a YAML config file."""
    path = Path(path)
    return config_from_dict(_read(path), base_dir=path.parent, env=os.environ if env is None else env)


def load_part(path: str | Path, cls: type[T], env: Mapping[str, str] | None = None) -> T:
    """Only the keys ``cls`` declares of a config file, read, interpolated and checked as
    :func:`load_config` does them; the rest of the file is never read.

    For a tool that needs a part of a processor's config: the lag exporter reads ``kafka``,
    ``input.group_id``, ``input.topics`` and ``metrics`` (observe/lag.py's ``LagConfig``), so the
    model and schema files the rest names need not exist where it runs, nor their ``${VAR}`` be set.
    """
    path = Path(path)
    raw = _read(path)
    if not isinstance(raw, Mapping):
        raise ConfigError("<root>", "the config must be a mapping of sections")
    part = _interpolate(_declared(cls, raw), "", os.environ if env is None else env)
    return cast(T, _build(cls, _with_secrets(part), "", path.parent))


def load_unscored(path: str | Path, env: Mapping[str, str] | None = None) -> UnscoredConfig:
    """A config file's sections but ``model`` (:class:`UnscoredConfig`), checked as :func:`load_config`
    checks them, ``kafka:`` by librdkafka too: for the commands that do not score, which start where
    the model's files are not."""
    cfg = _places(load_part(path, UnscoredConfig, env), Path(path).parent)
    check_properties(cfg)
    return cfg


def model_names(path: str | Path, env: Mapping[str, str] | None = None) -> frozenset[str] | None:
    """The names of a config file's models, read without loading them (``jobs submit`` runs where
    their files are not): the model section's, ``models.named``'s, and each folder of
    ``models.repository`` holding a model.yaml. None when that folder is not here: the worker,
    which loads the models, refuses an unknown name then."""
    path = Path(path)
    raw = _read(path)
    if not isinstance(raw, Mapping):
        raise ConfigError("<root>", "the config must be a mapping of sections")
    model, models = raw.get("model"), raw.get("models")
    names = {str(model["name"])} if isinstance(model, Mapping) and "name" in model else set()
    if isinstance(models, Mapping):
        names.update(map(str, models.get("named") or {}))
        if models.get("repository") is not None:
            folder = path.parent / str(_interpolate(models["repository"], "models.repository",
                                                    os.environ if env is None else env))
            if not folder.is_dir():
                return None
            names.update(manifest.parent.name for manifest in folder.glob(f"*/{MANIFEST}"))
    return frozenset(names)


def _read(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text())
    except OSError as exc:
        raise FileError(path, f"cannot read it: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)  # a syntax error says where; other YAML errors do not
        problem = getattr(exc, "problem", None)
        if mark is not None and problem:
            raise FileError(path, f"not valid YAML: {problem} (column {mark.column + 1})", line=mark.line + 1) from exc
        raise FileError(path, f"not valid YAML: {exc}") from exc


def _declared(cls: type, raw: Mapping[str, Any]) -> dict[str, Any]:
    """``raw`` cut down to the keys of ``cls``, section by section (a section's other keys dropped)."""
    hints = typing.get_type_hints(cls)
    out: dict[str, Any] = {}
    for f in fields(cls):
        if f.name in raw:
            value, tp = raw[f.name], hints[f.name]
            section = isinstance(tp, type) and hasattr(tp, "__dataclass_fields__") and isinstance(value, Mapping)
            out[f.name] = _declared(tp, value) if section else value
    return out


def _with_secrets(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The ``kafka:`` mapping's values as librdkafka takes them, secret-looking keys' as :class:`Secret`."""
    kafka = raw.get("kafka")
    if not isinstance(kafka, Mapping):
        return dict(raw)
    return {**raw, "kafka": {str(k): Secret(str(v)) if SECRET_KEY.search(str(k)) else _librdkafka_str(v)
                             for k, v in kafka.items()}}


def config_from_dict(raw: Any, base_dir: Path = Path("."),
                     env: Mapping[str, str] | None = None) -> Config:
    """Validate an already-parsed document (what :func:`load_config` does after reading YAML)."""
    env = os.environ if env is None else env
    if not isinstance(raw, Mapping):
        raise ConfigError("<root>", "the config must be a mapping of sections")
    raw = _interpolate(raw, "", env)
    if not isinstance(raw.get("kafka"), Mapping):
        raise ConfigError("kafka", KAFKA_NEEDS)
    given = _models(raw, base_dir, env)
    raw = {k: v for k, v in raw.items() if k not in given}
    cfg: Config = _places(_build(Config, _with_secrets(raw), "", base_dir, given), base_dir)  # each section validates itself
    check_properties(cfg)
    return cfg


C = TypeVar("C", Config, UnscoredConfig)


def _places(cfg: C, base_dir: Path) -> C:
    """``lake.warehouse`` and ``jobs.files`` (the defaults too) relative to the config's folder."""
    def here(place: Location) -> Location:
        return place if place.remote or Path(place).is_absolute() else Location((base_dir / place).resolve())

    return replace(cfg, lake=replace(cfg.lake, warehouse=here(cfg.lake.warehouse)),
                   jobs=replace(cfg.jobs, files=None if cfg.jobs.files is None else here(cfg.jobs.files)))


def _interpolate(value: Any, key: str, env: Mapping[str, str]) -> Any:
    if isinstance(value, Mapping):
        return {k: _interpolate(v, f"{key}.{k}" if key else str(k), env) for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate(v, f"{key}[{n}]", env) for n, v in enumerate(value)]
    if not isinstance(value, str) or "${" not in value:
        return value

    def sub(m: re.Match[str]) -> str:
        name, default = m.group(1), m.group(2)
        if name in env:
            return env[name]
        if default is not None:
            return default
        raise ConfigError(key, f"environment variable {name} is not set and has no default")

    result = _VAR.sub(sub, value)
    # A value that is one ${...} takes the YAML type of what it expands to ("8" -> 8), so that
    # numbers and booleans can come from the environment. Secrets stay strings (see above).
    if _VAR.fullmatch(value) and result and not SECRET_KEY.search(key):
        try:
            parsed = yaml.safe_load(result)
        except yaml.YAMLError:
            return result
        return parsed if isinstance(parsed, (int, float, bool)) else result
    return result


def _librdkafka_str(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _models(raw: Mapping[str, Any], base_dir: Path, env: Mapping[str, str]) -> dict[str, Any]:
    """The ``models`` section built first, with the models of its repository folder, and the
    ``model`` section it stands for when the file has none (its default model): as ``_build``'s
    given fields. Empty without a ``models`` section."""
    if "models" not in raw:
        return {}
    models = cast(ModelsConfig, _convert(ModelsConfig, raw["models"], "models", base_dir))
    if models.repository is not None:
        found = _repository(models.repository, env)
        for name in found.keys() & models.named.keys():
            raise ConfigError(f"models.named.{name}", f"is also a model of models.repository ({models.repository})")
        models = replace(models, named={**models.named, **found})
    given: dict[str, Any] = {"models": models}
    if "model" not in raw:
        if models.default is None:
            raise ConfigError("models.default", "is required without a model section (the default model's name)")
        if models.default not in models.named:
            raise ConfigError("models.default", f"no model {models.default!r}; the models are "
                                                f"{', '.join(sorted(models.named)) or 'none'}")
        given["model"] = models.named[models.default].model
    return given


def _repository(folder: Path, env: Mapping[str, str]) -> dict[str, ModelEntry]:
    """The models of a repository folder: each sub-folder holding a ``model.yaml`` (the sections
    ``model``, ``batching`` and ``shadow``, paths relative to the sub-folder; ``model.path``
    defaults to the sub-folder, a folder of versions) is one, named by the sub-folder."""
    found: dict[str, ModelEntry] = {}
    for manifest in sorted(folder.glob(f"*/{MANIFEST}")):
        name, here = manifest.parent.name, manifest.parent
        raw = _read(manifest)
        key = f"models.repository.{name}"
        if not isinstance(raw, Mapping):
            raise ConfigError(key, f"{manifest} must be a mapping of sections (model, batching, shadow)")
        raw = _interpolate(raw, key, env)
        section = raw.get("model", {})
        if isinstance(section, Mapping):
            raw = {**raw, "model": {"path": ".", **section}}
        found[name] = _convert(ModelEntry, _named(raw, name), key, here)
    return found


def _named(raw: Any, name: str) -> Any:
    """A model entry's raw mapping with its model section named like the entry (unless it names
    itself, which ModelsConfig then checks)."""
    if isinstance(raw, Mapping) and isinstance(raw.get("model"), Mapping) and "name" not in raw["model"]:
        return {**raw, "model": {**raw["model"], "name": name}}
    return raw


def _build(cls: type, raw: Any, prefix: str, base_dir: Path, given: Mapping[str, Any] | None = None) -> Any:
    """``cls`` from its raw mapping at ``prefix``; ``given``: fields already built."""
    if not isinstance(raw, Mapping):
        raise ConfigError(prefix or "<root>", f"must be a mapping, got {kind_of(raw)}")
    given = given or {}
    hints = typing.get_type_hints(cls)
    names = {f.name for f in fields(cls)}
    for k in raw:
        if k not in names:
            raise ConfigError(f"{prefix}{k}", f"unknown key (expected one of: {', '.join(sorted(names))})")
    kwargs: dict[str, Any] = dict(given)
    for f in fields(cls):
        key = f"{prefix}{f.name}"
        if f.name in given:
            continue
        if f.name not in raw:
            if f.default is MISSING and f.default_factory is MISSING:
                raise ConfigError(key, "is required but missing")
            continue
        kwargs[f.name] = _convert(hints[f.name], raw[f.name], key, base_dir)
    try:
        return cls(**kwargs)
    except ConfigError as exc:
        raise _nested(exc, prefix) from exc.__cause__


def _nested(exc: ConfigError, prefix: str) -> ConfigError:
    """A section's refusal keyed where the section sits: a model entry's ``model`` section
    refuses ``model.path``, which is ``models.named.<name>.model.path`` there."""
    parts = prefix.rstrip(".").split(".")
    own = parts[-1] + "."
    if len(parts) < 2 or type(exc) is not ConfigError or not exc.key.startswith(own):
        return exc
    return ConfigError(".".join(parts[:-1]) + "." + exc.key, exc.reason)


def _convert(tp: Any, value: Any, key: str, base_dir: Path) -> Any:
    origin, args = get_origin(tp), get_args(tp)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _convert(inner, value, key, base_dir)
    if origin is Literal:
        if value not in args:
            raise ConfigError(key, f"must be one of {', '.join(map(repr, args))}, got {value!r}")
        return value
    if origin is tuple:
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list):
            raise ConfigError(key, f"expected a list, got {kind_of(value)}")
        return tuple(_convert(args[0], v, f"{key}[{n}]", base_dir) for n, v in enumerate(items))
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(key, f"expected true or false, got {kind_of(value)} {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(key, f"expected an integer, got {kind_of(value)} {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(key, f"expected a number, got {kind_of(value)} {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise ConfigError(key, f"expected a string, got {kind_of(value)}")
        return str(value)
    if tp is Path:
        if not isinstance(value, str) or not value:
            raise ConfigError(key, f"expected a file path, got {kind_of(value)}")
        p = Path(value).expanduser()
        return p if p.is_absolute() else (base_dir / p).resolve()
    if tp is Secret:
        return Secret(str(value))
    if tp is Location:
        if not isinstance(value, str) or not value:
            raise ConfigError(key, f"expected a folder or an s3:// URL, got {kind_of(value)}")
        place = Location(value)
        return place if place.remote else Location(_convert(Path, value.removeprefix("file://"), key, base_dir))
    if isinstance(tp, type) and hasattr(tp, "__dataclass_fields__"):
        return _build(tp, value, f"{key}.", base_dir)
    if origin is not None and issubclass(origin, Mapping):
        if args and args[1] is ModelEntry:  # models.named: name -> a model's sections
            if not isinstance(value, Mapping):
                raise ConfigError(key, f"expected a mapping, got {kind_of(value)}")
            return {str(k): _convert(ModelEntry, _named(v, str(k)), f"{key}.{k}", base_dir) for k, v in value.items()}
        if args and hasattr(args[1], "parse"):  # model.inputs, model.outputs: name -> spec
            if not isinstance(value, Mapping):
                raise ConfigError(key, f"expected a mapping, got {kind_of(value)}")
            return {str(k): args[1].parse(v, f"{key}.{k}") for k, v in value.items()}
        return value
    raise TypeError(f"config field {key} has an unsupported type {tp!r}")  # a bug here, not in YAML


