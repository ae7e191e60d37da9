"""JSON: one UTF-8 object per message; checked against a JSON Schema from a file
(``input.json_schema``) or, in Confluent's framing, the schema each message's id names
(``input.format: json-schema-confluent``).

The check is the ``jsonschema`` library's, with the validator the schema's own ``$schema`` names
(draft 2020-12 when it names none), as confluent-kafka's ``JSONDeserializer`` checks. A violation
is a ``validate`` dead letter whose message says where (a JSON path) and what, e.g.
``JSON Schema: $.features[3]: 'x' is not of type 'number'``. A schema that is not a valid JSON
Schema is refused at start (``input.json_schema``) or, for a registry id, is a ``deserialize``
dead letter of that id's rows.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from jsonschema import exceptions as js_errors
from jsonschema.exceptions import best_match
from jsonschema.validators import validator_for

from streamer.errors import ConfigError, DeserializeError, SerializeError, ValidationError
from streamer.formats.codec import DEFAULT_MAX_BYTES, check_size
from streamer.formats.confluent import SchemaIds, confluent_header, framed_id, register

_TOLIST = operator.methodcaller("tolist")  # lets JSON encode numpy arrays and scalars


class JsonCodec:
    """One UTF-8 JSON object per message; encoding writes compact JSON (numpy arrays become lists)."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self._max_bytes = max_bytes

    def decode(self, data: bytes) -> Mapping[str, Any]:
        check_size(data, self._max_bytes)
        try:
            value = json.loads(data.decode("utf-8"))  # NaN and Infinity pass here; validation refuses them
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise DeserializeError(f"invalid JSON: {exc}") from exc
        if not isinstance(value, dict):
            raise DeserializeError(f"JSON message is a {type(value).__name__}, not an object")
        return value

    def encode(self, record: Mapping[str, Any]) -> bytes:
        try:
            return json.dumps(record, separators=(",", ":"), allow_nan=False, default=_TOLIST).encode("utf-8")
        except (TypeError, ValueError, AttributeError, RecursionError) as exc:  # AttributeError: no .tolist()
            raise SerializeError(f"record cannot be written as JSON: {exc}") from exc


_SHOWN = 200  # characters of a violation's message: the instance it quotes can be large


class JsonSchemaCheck:
    """One JSON Schema's validator; ``check`` raises :class:`ValidationError` on a violation."""

    def __init__(self, schema: Any) -> None:
        cls = validator_for(schema) if isinstance(schema, Mapping) else None
        if cls is None:
            raise ValueError(f"a JSON Schema is an object, not {type(schema).__name__}")
        cls.check_schema(schema)  # SchemaError: not a valid schema of its draft
        self.schema = schema
        self._validator = cls(schema)

    @classmethod
    def from_file(cls, path: Path, key: str = "input.json_schema") -> JsonSchemaCheck:
        try:
            return cls(json.loads(path.read_text(encoding="utf-8")))
        except OSError as exc:
            raise ConfigError(key, f"cannot read {str(path)!r}: {exc.strerror or exc}") from exc
        except (ValueError, js_errors.SchemaError) as exc:
            message = exc.message if isinstance(exc, js_errors.SchemaError) else str(exc)
            raise ConfigError(key, f"{str(path)!r} is not a valid JSON Schema: {message}") from exc

    def check(self, value: Any) -> None:
        try:
            error = best_match(self._validator.iter_errors(value))
        except Exception as exc:  # a $ref the schema cannot resolve (referencing's errors)
            why = f"the JSON Schema cannot be applied to this event: {exc!r}"
            raise DeserializeError(why[:_SHOWN * 2]) from exc
        if error is not None:
            where = error.json_path
            message = error.message if len(error.message) <= _SHOWN else error.message[:_SHOWN] + "..."
            raise ValidationError(f"JSON Schema: {where}: {message}")


class CheckedJsonCodec:
    """:class:`JsonCodec` whose objects must satisfy one JSON Schema (not a JsonCodec: the JSON
    fast path, which does not check, must not take it)."""

    def __init__(self, check: JsonSchemaCheck, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self._json = JsonCodec(max_bytes)
        self.check = check

    def decode(self, data: bytes) -> Mapping[str, Any]:
        value = self._json.decode(data)
        self.check.check(value)
        return value

    def encode(self, record: Mapping[str, Any]) -> bytes:
        try:
            self.check.check(record)
        except ValidationError as exc:
            raise SerializeError(str(exc)) from exc
        return self._json.encode(record)


class ConfluentJsonCodec:
    """JSON in Confluent framing, checked against the JSON Schema the id names (looked up once per
    id, with the 404 hold of :class:`SchemaIds`). Encoding (``streamer produce``, the tests) needs
    ``check`` and registers its schema under ``subject`` once."""

    def __init__(self, registry: SchemaRegistryClient, subject: str, check: JsonSchemaCheck | None = None,
                 max_bytes: int = DEFAULT_MAX_BYTES, ids: SchemaIds | None = None) -> None:
        self._registry, self._subject, self._writer = registry, subject, check
        self._json = JsonCodec(max_bytes)
        self._max_bytes = max_bytes
        self._ids = ids or SchemaIds(registry)
        self._writer_id: int | None = None

    def decode(self, data: bytes) -> Mapping[str, Any]:
        check = self._ids.get(framed_id(data, self._max_bytes), _checker)
        value = self._json.decode(data[5:])  # after the magic byte and the schema id
        check.check(value)
        return value

    def encode(self, record: Mapping[str, Any]) -> bytes:
        if self._writer is None:
            raise SerializeError(f"the codec for subject {self._subject!r} has no schema to encode with")
        try:
            self._writer.check(record)
        except ValidationError as exc:
            raise SerializeError(str(exc)) from exc
        if self._writer_id is None:
            self._writer_id = register(self._registry, self._subject, Schema(json.dumps(self._writer.schema), "JSON"))
        return confluent_header(self._writer_id) + self._json.encode(record)


def _checker(registered: Any) -> JsonSchemaCheck:
    """The check of a registered schema; one that is not a plain JSON Schema is refused for good."""
    if (registered.schema_type or "AVRO") != "JSON" or registered.references:
        raise DeserializeError("is not a plain JSON Schema (no references)")
    try:
        return JsonSchemaCheck(json.loads(registered.schema_str or ""))
    except (ValueError, js_errors.SchemaError) as exc:
        raise DeserializeError(f"is not a usable JSON Schema: {exc}") from exc

