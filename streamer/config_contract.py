"""The model contract's config entries: ``model.inputs`` and ``model.outputs`` values, parsed from YAML.

Each class parses its YAML forms in ``parse`` (config_file.py calls it for a mapping whose values
have one) and raises :class:`ConfigError` naming the dotted key; model/contract.py checks them
against the model's signature when the model is loaded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from streamer.errors import ConfigError

Scalar = float | int | str | bool  # a fill value for a null input field


@dataclass(frozen=True, slots=True)
class InputSource:
    """Where one model input's values come from (``model.inputs.<input>``).

    ``fields`` are dotted paths into the event (``card.country``). One field gives the input's
    row as it is: a scalar for a ``[N]`` or ``[N, 1]`` input, an array for ``[N, k]``; several
    fields are stacked into ``[N, len(fields)]``. A null (or missing) value takes ``fill``, or is
    a ``validate`` dead letter when there is none.

    In YAML: ``amount``, ``[amount, age_days]``, or ``{fields: [amount], fill: 0}``.
    """

    fields: tuple[str, ...]
    stacked: bool = False  # given as a list: each field is one column
    fill: Scalar | None = None

    @classmethod
    def parse(cls, raw: Any, key: str) -> InputSource:
        if isinstance(raw, str):
            return cls((raw,))
        if isinstance(raw, (list, tuple)):
            return cls(tuple(raw), stacked=True) if raw else cls(())
        if isinstance(raw, Mapping):
            unknown = set(raw) - {"field", "fields", "fill"}
            if unknown or ("field" in raw) == ("fields" in raw):
                raise ConfigError(key, "takes 'field' or 'fields', and optionally 'fill'"
                                       + (f"; unknown: {sorted(unknown)}" if unknown else ""))
            fill = raw.get("fill")
            if fill is not None and not isinstance(fill, (int, float, str, bool)):
                raise ConfigError(f"{key}.fill", f"must be a number, a string or a boolean, got {fill!r}")
            if "field" in raw:
                return cls((raw["field"],), fill=fill)
            fields_ = raw["fields"]
            return cls(tuple(fields_) if isinstance(fields_, (list, tuple)) else (fields_,), stacked=True,
                       fill=fill)
        raise ConfigError(key, f"expected a field name, a list of fields or a mapping, got {raw!r}")

    def check(self, key: str) -> None:
        if not self.fields:
            raise ConfigError(key, "names no field")
        for f in self.fields:
            if not isinstance(f, str) or not f or "" in f.split("."):
                raise ConfigError(key, f"{f!r} is not a field name (a dotted path such as card.country)")


@dataclass(frozen=True, slots=True)
class OutputTarget:
    """Which model output fills one prediction field (``model.outputs.<field>``).

    ``output`` is the model output's name; ``column`` picks one column of a ``[N, k]`` output (a
    probability row: ``column: 1`` is P(second class)), written as a single number.
    In YAML: ``output_label`` or ``{output: output_probability, column: 1}``.
    """

    output: str
    column: int | None = None

    @classmethod
    def parse(cls, raw: Any, key: str) -> OutputTarget:
        if isinstance(raw, str) and raw:
            return cls(raw)
        if isinstance(raw, Mapping) and set(raw) <= {"output", "column"} and isinstance(raw.get("output"), str):
            column = raw.get("column")
            if column is not None and (isinstance(column, bool) or not isinstance(column, int) or column < 0):
                raise ConfigError(f"{key}.column", f"must be a whole number >= 0, got {column!r}")
            return cls(raw["output"], column)
        raise ConfigError(key, f"expected a model output's name or {{output: NAME, column: K}}, got {raw!r}")
