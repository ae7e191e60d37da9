"""`streamer produce` and `streamer tail`: the input and output topics as files, for the teams
upstream and downstream of a processor.

``produce`` publishes events from JSON Lines (``.jsonl``, ``.ndjson``: one object a line), CSV
(a header row of field names) or Parquet (``.parquet``, typed by its own schema; needs pyarrow) to ``input.topics[0]`` in the configured ``input.format``: plain
Avro or JSON as the processor reads it (JSON checked against ``input.json_schema`` when set), or
avro-confluent (json-schema-confluent) with ``input.schema`` (``input.json_schema``) registered
under ``input.registry.subject`` (default ``<topic>-value``). CSV cells are typed by ``input.schema``
(int and long, float and double, boolean as true/false or 1/0, an empty cell in a nullable
field as null, arrays, maps and records as JSON); with JSON input, a cell that parses as JSON
takes that type. Keys are ``--key-field`` (default ``input.entity_field``) as UTF-8. A row that
does not fit the input schema as it is (nothing is converted: 4.5 into a long, 1 into a boolean,
"7" into a number are refused; an integer into a double is taken) is refused with its file,
line, field and reason (exit 2) before anything is sent. ``--skip N`` leaves out the file's first
N events (rows: a CSV's header and blank lines are not counted). The file is read twice, once to
check every row and once to send them, and never held whole in memory. A stop (SIGTERM, Ctrl+C)
ends the reading: what was sent is flushed and acknowledged, and the summary says how many events
were produced and the ``--skip`` that produces the rest.

``tail`` prints the predictions of ``output.topic`` as JSON lines, read_committed (no aborted
transaction's output), from the start of every partition to the end offsets when it starts, in a
group of its own that commits nothing: avro-confluent values by the schema id each carries,
plain Avro by the prediction schema the config makes (from the outputs the model file declares,
read without loading it), JSON as it is. ``--topic`` reads another prediction topic, such as a
replay's ``<output.topic>.backfill``.
"""

from __future__ import annotations

import csv
import json
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from itertools import islice
from pathlib import Path
from typing import Any, TextIO, cast

from confluent_kafka import Consumer, Producer
from jsonschema.exceptions import best_match
from jsonschema.validators import validator_for

from streamer.config import Config, Sections, output_registry
from streamer.errors import BrokerError, ConfigError, FileError, InferenceError, NoSuchTopic, SerializeError
from streamer.formats.avro import AvroCodec, Mismatch, load_schema, mismatch
from streamer.formats.codec import Codec
from streamer.formats.configured import input_codec, input_schema, prediction_schema
from streamer.formats.confluent import ConfluentAvroCodec
from streamer.formats.json_events import JsonCodec, JsonSchemaCheck
from streamer.formats.subjects import registry_client
from streamer.kafka import clients
from streamer.kafka.delivery import produce
from streamer.model.contract import Contract
from streamer.model.onnx_file import read_signature
from streamer.pipeline.reload import served_file

_TRUE, _FALSE = ("true", "1"), ("false", "0")


@dataclass(frozen=True, slots=True)
class Produced:
    """What ``produce`` did: ``sent`` events acknowledged of the ``total`` after the ``skip`` first
    (None: stopped before the file was checked through); ``stopped``: a stop ended it before the
    file's end."""

    topic: str
    sent: int
    total: int | None
    skip: int = 0
    stopped: bool = False

    def lines(self, fmt: str) -> list[str]:
        if not self.stopped:
            return [f"produced {self.sent} events to {self.topic} ({fmt})"]
        of = "before the file was checked through" if self.total is None else f"of {self.total}"
        return [f"produce stopped: produced {self.sent} events {of} to {self.topic} ({fmt})",
                f"produce the rest with --skip {self.skip + self.sent}"]


def produce_file(cfg: Sections, path: Path, key_field: str | None = None, *, skip: int = 0,
                 stop: threading.Event | None = None) -> Produced:
    """Publish every row of ``path`` after the ``skip`` first to the input topic, until ``stop``
    is set; every row sent is acknowledged by the broker when it returns."""
    if skip < 0:
        raise ConfigError("--skip", f"must be >= 0, got {skip}")
    topic = cfg.input.topics[0]
    if cfg.input.format == "avro-confluent" and cfg.input.schema is None:
        raise ConfigError("input.schema", "is needed to produce avro-confluent events (it is registered)")
    if cfg.input.format == "protobuf-confluent":
        raise ConfigError("input.format", "protobuf-confluent events are written with your generated classes "
                                          "(confluent-kafka's ProtobufSerializer); streamer only reads them")
    if cfg.input.format == "json-schema-confluent" and cfg.input.json_schema is None:
        raise ConfigError("input.json_schema", "is needed to produce json-schema-confluent events (it is registered)")
    check, codec, key_field = row_check(cfg), input_codec(cfg.input), key_field or cfg.input.entity_field

    def message(line: int, row: dict[str, Any]) -> tuple[bytes | None, bytes]:
        found = check(row)
        if found is not None:
            raise FileError(path, found[1], line=line, field=found[0] or None)
        try:
            value = codec.encode(row)
        except SerializeError as exc:
            raise FileError(path, f"the row does not fit input.format {cfg.input.format}: {exc}", line=line) from exc
        key = row.get(key_field)
        return None if key is None else str(key).encode(), value

    total = 0
    for line, row in islice(rows(path, cfg), skip, None):  # every row, before the first is sent: a bad file
        if stop is not None and stop.is_set():  # sends nothing; the file is read twice, never held
            return Produced(topic, 0, None, skip, True)
        message(line, row)
        total += 1
    failed: list[str] = []

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(str(err))

    producer = Producer(clients.producer_config(cfg))
    sent = 0
    for line, row in islice(rows(path, cfg), skip, None):
        if stop is not None and stop.is_set():
            break
        key, value = message(line, row)
        produce(producer, lambda: producer.poll(0.5), topic, value, key, on_delivery=report)  # a full queue: waits
        sent += 1
    left = producer.flush(60)  # a stop too: what was sent is acknowledged before the count is told
    if failed or left:
        raise BrokerError(f"producing to {topic}: {len(failed)} refused ({failed[:1]}), {left} not acknowledged")
    return Produced(topic, sent, total, skip, sent < total)


def rows(path: Path, cfg: Sections) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, event)`` for each row of a JSON Lines, CSV or Parquet file."""
    suffix = path.suffix.lower()
    if suffix == ".parquet":  # binary: pyarrow opens it
        yield from _parquet_rows(path)
        return
    try:
        text = path.open(encoding="utf-8", newline="")
    except OSError as exc:
        raise FileError(path, f"cannot read it: {exc.strerror or exc}") from exc
    with text:
        if suffix in (".jsonl", ".ndjson", ".json"):
            for n, line in enumerate(text, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError as exc:
                    raise FileError(path, f"not a JSON object: {exc}", line=n) from exc
                if not isinstance(row, dict):
                    raise FileError(path, f"not a JSON object but {type(row).__name__}", line=n)
                yield n, row
        elif suffix == ".csv":
            types = _field_types(cfg)
            for n, cells in enumerate(csv.DictReader(text), 2):
                yield n, {k: _cell(v, types.get(k), path, n, k) for k, v in cells.items() if k is not None}
        else:
            raise FileError(path, "is neither JSON Lines (.jsonl, .ndjson), CSV (.csv) nor Parquet (.parquet)")


def _parquet_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Parquet rows (their number from 1), typed by the file's own schema; needs pyarrow."""
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise FileError(path, "reading Parquet needs pyarrow (pip install pyarrow)") from exc
    try:
        file = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises its own hierarchy on a bad file
        raise FileError(path, f"is not a Parquet file pyarrow can read: {exc}") from exc
    n = 0
    for batch in file.iter_batches():
        for row in batch.to_pylist():
            n += 1
            yield n, row


def row_check(cfg: Sections) -> Callable[[Mapping[str, Any]], Mismatch | None]:
    """Where and why an event does not fit the input as it is (None: it fits), for every format
    ``produce`` writes: Avro by ``input.schema`` with no conversion (formats/avro.py's
    :func:`mismatch`: fastavro's writer would turn 4.5 into 4 for a long), JSON by
    ``input.json_schema`` when set (JSON is written as it is, so nothing else can change it)."""
    if cfg.input.format in ("avro", "avro-confluent") and cfg.input.schema is not None:
        return partial(mismatch, load_schema(cfg.input.schema, key="input.schema"))
    if cfg.input.format in ("json", "json-schema-confluent") and cfg.input.json_schema is not None:
        schema = JsonSchemaCheck.from_file(cfg.input.json_schema).schema
        validator = validator_for(schema)(schema)
        return partial(_json_mismatch, validator)
    return lambda _row: None


def _json_mismatch(validator: Any, row: Mapping[str, Any]) -> Mismatch | None:
    error = best_match(validator.iter_errors(row))
    if error is None:
        return None
    field = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path).lstrip(".")
    return field, f"JSON Schema: {error.message[:200]}"


def _field_types(cfg: Sections) -> dict[str, Any]:
    if cfg.input.schema is None:
        return {}
    return {f["name"]: f["type"] for f in load_schema(cfg.input.schema, key="input.schema")["fields"]}


def _cell(text: str, avro: Any, path: Path, line: int, name: str) -> Any:
    """A CSV cell as the field's Avro type takes it (no schema: JSON when it parses, else the text)."""
    if avro is None:
        try:
            return json.loads(text)
        except ValueError:
            return text
    branches = avro if isinstance(avro, list) else [avro]
    kinds = [b if isinstance(b, str) else b.get("type") for b in branches]
    if text == "" and "null" in kinds:
        return None
    kind = next((k for k in kinds if k != "null"), "null")
    try:
        if kind in ("int", "long"):
            return int(text)
        if kind in ("float", "double"):
            return float(text)
        if kind == "boolean":
            if text.lower() not in _TRUE + _FALSE:
                raise ValueError(f"{text!r} is not true/false or 1/0")
            return text.lower() in _TRUE
        if kind in ("array", "map", "record"):
            return json.loads(text)
    except ValueError as exc:
        raise FileError(path, f"expected {kind}: {exc}", line=line, field=name) from exc
    return text


def prediction_decoder(cfg: Config) -> Codec:
    """What reads the predictions of ``cfg`` back (see the module docstring)."""
    if cfg.output.format == "json":
        return JsonCodec()
    if cfg.output.format == "avro-confluent":
        reg = output_registry(cfg)
        assert reg is not None  # the config refuses avro-confluent output without one
        return ConfluentAvroCodec(registry_client(reg), cfg.output.topic)
    return AvroCodec(prediction_schema(cfg.output, declared_contract(cfg), input_schema(cfg.input)))


def declared_contract(cfg: Config) -> Contract:
    """The served model's contract from the signature its file declares (model/onnx_file.py): the
    prediction schema without an ONNX Runtime session, for a command that never scores."""
    m = cfg.model
    path = served_file(m)[0]
    try:
        signature = read_signature(path)
    except InferenceError as exc:
        raise ConfigError("model.path", str(exc)) from exc
    try:
        return Contract.of(signature, m.inputs, m.outputs, cfg.input.features_field)
    except ConfigError as exc:
        raise ConfigError(exc.key, f"model {path.name}: {exc.reason}") from exc


def tail(cfg: Config, out: TextIO, limit: int | None = None, topic: str | None = None) -> int:
    """Print the predictions of ``topic`` (default ``output.topic``) as JSON lines (see the module
    docstring); returns how many."""
    decoder = prediction_decoder(cfg)
    consumer = Consumer(clients.consumer_config(cfg, **{"group.id": f"streamer-tail-{uuid.uuid4().hex[:8]}",
                                                        "isolation.level": "read_committed"}))
    n = 0
    try:
        for m in clients.read_to_end(consumer, topic or cfg.output.topic, from_committed=False):
            if m.value() is None:
                continue  # a tombstone holds no prediction
            out.write(json.dumps(dict(decoder.decode(cast(bytes, m.value()))), separators=(",", ":")) + "\n")
            n += 1
            if limit is not None and n >= limit:
                break
    except NoSuchTopic as exc:  # the name asked for is wrong: exit 2
        raise ConfigError("--topic" if topic else "output.topic", str(exc)) from exc
    finally:
        consumer.close()
    return n
