"""Checking config values where the dataclasses are built: declared types, bounds, files.

Every check raises :class:`ConfigError` naming the dotted key and the reason, so a bad value is
refused the same way whether it came from YAML, an environment variable or ``replace()``.
"""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, Union, cast, get_args, get_origin

from streamer.errors import ConfigError


class Location(str):
    """A folder or an object store URL (``s3://bucket/prefix``). Loaded from a file, a relative
    folder is taken from the config file's directory, as a path is."""

    __slots__ = ()

    @property
    def remote(self) -> bool:
        return "://" in self and not self.startswith("file://")


def kind_of(value: Any) -> str:
    """How an error names a value's type: 'int', 'str', 'nothing'."""
    return "nothing" if value is None else type(value).__name__


def above(low: int, key: str, value: float) -> None:
    if not value > low:
        raise ConfigError(key, f"must be > {low}, got {value}")


def at_least(low: int, key: str, value: float) -> None:
    if value < low:
        raise ConfigError(key, f"must be >= {low}, got {value}")


def key_prefix(key: str, value: str) -> None:
    """A prefix of the key-value store's keys: non-empty, without spaces or a SCAN pattern's * ? [ ]."""
    if not value or any(c in value for c in " *?[]"):
        raise ConfigError(key, f"must be a non-empty key prefix without spaces or * ? [ ], got {value!r}")


def file_exists(key: str, what: str, path: Path | None) -> None:
    # Files are checked in the type too, not only when loading: a config that exists is valid, so
    # `replay --model missing.onnx` fails here, with the key named, not in ONNX Runtime later. No
    # caller builds a config ahead of its files, and a stat per copy is cheap.
    if path is not None and not path.is_file():
        raise ConfigError(key, f"no {what} file at {path}")


@functools.cache
def hints(cls: Any) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def check_types(obj: Any, section: str) -> None:
    """Each field holds its declared type: ``replace()`` and direct construction take anything."""
    for f in fields(obj):
        check_type(hints(cast(Any, type(obj)))[f.name], getattr(obj, f.name),
                    f"{section}.{f.name}" if section else f.name)


def check_type(tp: Any, value: Any, key: str) -> None:
    origin, args = get_origin(tp), get_args(tp)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return
        first: ConfigError | None = None
        for arg in (a for a in args if a is not type(None)):
            try:
                check_type(arg, value, key)
                return
            except ConfigError as exc:
                first = first or exc
        assert first is not None
        raise first
    if origin is Literal:
        if value not in args:
            raise ConfigError(key, f"must be one of {', '.join(map(repr, args))}, got {value!r}")
    elif origin is tuple:
        if not isinstance(value, tuple):
            raise ConfigError(key, f"expected a tuple, got {kind_of(value)}")
        for n, item in enumerate(value):
            check_type(args[0], item, f"{key}[{n}]")
    elif origin is not None and issubclass(origin, Mapping):
        if not isinstance(value, Mapping):
            raise ConfigError(key, f"expected a mapping, got {kind_of(value)}")
        for k, item in value.items():
            check_type(args[1], item, f"{key}.{k}")
    elif (isinstance(value, bool) and tp is not bool
          or not isinstance(value, (int, float) if tp is float else tp)):  # an int is a fine float
        got = kind_of(value) if value is None else f"{kind_of(value)} {value!r}"
        raise ConfigError(key, f"expected {TYPE_NAMES.get(tp, 'a ' + tp.__name__)}, got {got}")


TYPE_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false",
               Path: "a file path", Location: "a folder or an s3:// URL"}


@dataclass(frozen=True, slots=True)
class Secret:
    """A configuration value that must never be printed, logged or exported."""

    value: str = field(repr=False)

    def __repr__(self) -> str:
        return "***"

    __str__ = __repr__

    def hide_in(self, text: str) -> str:
        """``text`` with the value shown as ``***`` wherever it appears (for messages and logs)."""
        return text.replace(self.value, "***") if self.value else text
