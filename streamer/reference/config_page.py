"""docs/configuration.md from the config's own dataclasses: key, type and default from each field,
the description from the comment beside it in the source."""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import MISSING, Field, dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from streamer import config_file
from streamer.config import SECRET_KEY, Config, Secret, UnscoredConfig
from streamer.config_check import Location
from streamer.config_contract import InputSource, OutputTarget
from streamer.kafka import clients
from streamer.observe.lag import LagConfig
from streamer.reference.comments import described_names, plain

COMMAND = "python -m streamer.reference config > docs/configuration.md"
_YAML_WORDS = re.compile(r"\b(None|True|False)\b")
SIMPLE = {int: "integer", float: "number", str: "string", bool: "boolean", Path: "path",
          Secret: "string, secret (shown as `***`)", Location: "folder or `s3://` URL"}


@dataclass(frozen=True, slots=True)
class Key:
    """One row of a section's table."""

    key: str  # the dotted path, e.g. input.registry.url
    type: str
    default: str
    description: str


@dataclass(frozen=True, slots=True)
class Section:
    """One table: a dataclass's fields under a dotted prefix."""

    name: str  # 'input', 'input.registry', 'shadow.challengers[]'
    doc: str  # the class's docstring, when it has one
    keys: tuple[Key, ...]


def _optional(tp: Any) -> tuple[Any, bool]:
    if get_origin(tp) in (Union, types.UnionType) and type(None) in get_args(tp):
        rest = [a for a in get_args(tp) if a is not type(None)]
        return (rest[0] if len(rest) == 1 else Union[tuple(rest)]), True
    return tp, False


def type_name(tp: Any) -> str:
    """How the page names a field's type: 'integer', 'list of string', 'one of `cuda`, `cpu`'."""
    inner, optional = _optional(tp)
    if optional:
        return f"{type_name(inner)} or null"
    origin, args = get_origin(tp), get_args(tp)
    if origin in (Union, types.UnionType):
        return " or ".join(type_name(a) for a in args)
    if origin is Literal:
        return "one of " + ", ".join(f"`{a}`" for a in args)
    if origin is tuple:
        return f"list of {type_name(args[0])}"
    if origin is not None and issubclass(origin, Mapping):
        return f"mapping of name to {type_name(args[1])}"
    if tp in SIMPLE:
        return SIMPLE[tp]
    if is_dataclass(tp) or hasattr(tp, "parse"):
        return f"{tp.__name__} (below)"
    return getattr(tp, "__name__", str(tp))


def yaml_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return "[" + ", ".join(yaml_value(v) for v in value) + "]"
    return str(value)


def _default(f: Field[Any]) -> str:
    if f.default is not MISSING:
        return f"`{yaml_value(f.default)}`"
    return "section" if f.default_factory is not MISSING else "required"


def _described(cls: type) -> dict[str, str]:
    """The field comments of ``cls``, with Python's None, True and False as YAML writes them."""
    found = described_names(Path(inspect.getfile(cls)), cls.__name__)
    return {name: _YAML_WORDS.sub(lambda m: m.group(0).lower().replace("none", "null"), text)
            for name, text in found.items()}


def section_of(tp: Any) -> type | None:
    """The dataclass a field's value is a section (or a list, or a mapping of names to sections)
    of; None for a leaf."""
    inner, _ = _optional(tp)
    origin = get_origin(inner)
    item = get_args(inner)[0] if origin is tuple else get_args(inner)[1] if origin is Mapping else inner
    leaf = item is Secret or hasattr(item, "parse")  # a value parsed from YAML's short forms: its own page part
    return typing.cast(type, item) if is_dataclass(item) and not leaf else None


def _top_sections() -> dict[type, str]:
    """The top-level sections by their dataclass: a section nested again (a model entry's
    ``model``) has the top-level one's keys, and no table of its own."""
    hints = typing.get_type_hints(Config)
    return {typing.cast(type, s): f.name for f in fields(Config) if (s := section_of(hints[f.name])) is not None}


def sections(cls: type = Config, prefix: str = "") -> list[Section]:
    """The tables of ``cls`` and of every section inside it, in field order."""
    hints = typing.get_type_hints(cls)
    notes = _described(cls)
    rows: list[Key] = []
    below: list[Section] = []
    top = _top_sections()
    for f in fields(cls):
        tp, key = hints[f.name], f"{prefix}{f.name}"
        inner = section_of(tp)
        again = prefix and inner in top  # the keys of a top-level section, nested
        if prefix or inner is None:  # a top-level section has its own table, and no row
            kind = f"the keys of `{top[typing.cast(type, inner)]}`" if again else type_name(tp)
            rows.append(Key(key, kind, _default(f), notes.get(f.name, "")))
        if inner is not None and not again:
            many = {tuple: "[].", Mapping: ".<name>."}.get(get_origin(_optional(tp)[0]), ".")
            below.extend(sections(inner, key + many))
    written = cls.__doc__ or ""
    doc = "" if written.startswith(f"{cls.__name__}(") else plain(inspect.cleandoc(written))  # dataclass's own
    own = Section(prefix.rstrip(".") or "kafka", doc if prefix else "", tuple(rows))
    return [own, *below] if rows else below


def leaf_keys() -> dict[str, str]:
    """Every key of every section (the processor's and the lag exporter's) -> its description."""
    out: dict[str, str] = {}
    for section in sections(Config) + sections(LagConfig):
        for key in section.keys:
            out[key.key] = key.description or out.get(key.key, "")
    return out


def markdown(text: str) -> str:
    """``text`` on one line, with ``<`` outside code spans escaped: MkDocs reads `<topic>` as HTML."""
    parts = " ".join(text.split()).split("`")
    return "`".join(p if n % 2 else p.replace("<", "&lt;") for n, p in enumerate(parts))


def _cell(text: str) -> str:
    return markdown(text).replace("|", "\\|")


def _table(section: Section) -> list[str]:
    out = ["| key | type | default | description |", "| --- | --- | --- | --- |"]
    for k in section.keys:
        out.append(f"| `{k.key}` | {_cell(k.type)} | {_cell(k.default)} | {_cell(k.description)} |")
    return out


def _kafka_settings() -> list[str]:
    out = ["| property | client | value | |", "| --- | --- | --- | --- |"]
    for settings, client, how in ((clients.CONSUMER_FORCED, "consumer", "fixed: another value is a config error"),
                                  (clients.PRODUCER_FORCED, "producer", "fixed: another value is a config error"),
                                  (clients.CONSUMER_DEFAULTS, "consumer", "default: `kafka:` may change it"),
                                  (clients.PRODUCER_DEFAULTS, "producer", "default: `kafka:` may change it")):
        out += [f"| `{k}` | {client} | `{v}` | {how} |" for k, v in settings.items()]
    out.append("| `group.id` | consumer | `input.group_id` | from the config |")
    return out


def _paragraph(doc: str | None, index: int) -> str:
    return plain(inspect.cleandoc(doc or "").split("\n\n")[index])


def page() -> str:
    """The whole of docs/configuration.md."""
    found = sections(Config)
    kafka = found[0]
    lag = [k.key for s in sections(LagConfig) for k in s.keys]
    lines = [
        "# Configuration reference",
        "",
        f"<!-- Generated from streamer/config.py by `{COMMAND}`: edit the field comments there. -->",
        "",
        "A config file is YAML with one mapping per section below. A key left out takes its default;",
        "a key marked *required* must be given. Every value is checked when the config is built, and",
        "a bad one is refused naming its dotted key (see [errors](errors.md)).",
        "",
        markdown(_paragraph(config_file.__doc__, 1)),
        "",
        "## kafka",
        "",
        markdown(kafka.keys[0].description.capitalize()) + ". Values of keys matching "
        f"`{SECRET_KEY.pattern}` are secrets: they print as `***` and reach only the clients.",
        "streamer sets these properties itself:",
        "",
        *_kafka_settings(),
        "",
    ]
    for section in found[1:]:
        lines += [f"## {section.name}", ""]
        if section.doc:
            lines += [markdown(section.doc), ""]
        lines += [*_table(section), ""]
    for cls, key in ((InputSource, "model.inputs.<input>"), (OutputTarget, "model.outputs.<field>")):
        lines += [f"## `{key}`", "", markdown(plain(inspect.cleandoc(cls.__doc__ or ""))), ""]
    lines += ["## lag-exporter", "",
              "`streamer lag-exporter` reads only these keys of a processor's config file: "
              + ", ".join(f"`{k}`" for k in lag) + ".", "",
              "## topics create, produce, dlq", "",
              "`streamer topics create`, `produce`, `dlq inspect` and `dlq redrive` read these sections of "
              "the config file and no other: " + ", ".join(f"`{f.name}`" for f in fields(UnscoredConfig))
              + ". They neither score nor read the prediction schema, so they run where the file of "
              "`model.path` is not.", ""]
    return "\n".join(lines)
