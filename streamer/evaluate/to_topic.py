"""A sink that writes an evaluation's side-by-side rows to a Kafka topic, a record per event.

The records are encoded in ``output.format`` with the side-by-side schema (evaluate/pair.py):
plain Avro, Avro framed with the schema's id under the topic's subject, or JSON. Keyed by the
event's entity id, like predictions. The topic is created like the output topic when missing.
An evaluation is an analysis run, not a checkpoint: it starts from its range's beginning every
time, and a commit waits for every record's acknowledgement (an unacknowledged one fails the
run). Rejects are counted in the report, not written here: they are the stream's dead letters.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, cast

import pyarrow as pa
import pyarrow.compute as pc

from streamer.config import Config
from streamer.errors import BrokerError
from streamer.formats.codec import Codec
from streamer.kafka.ranges import Ranges
from streamer.lake.sink import Resume, Shard

FLUSH_TIMEOUT_S = 60.0


def topic_codec(cfg: Config, topic: str, schema: dict[str, Any]) -> Codec:
    """The side-by-side records' codec, in ``output.format``, for ``topic``."""
    import fastavro

    from streamer.formats.avro import AvroCodec
    from streamer.formats.json_events import JsonCodec

    if cfg.output.format == "json":
        return JsonCodec()
    if cfg.output.format == "avro-confluent":
        from streamer.formats.subjects import confluent_output_codec

        return confluent_output_codec(replace(cfg, output=replace(cfg.output, topic=topic)),
                                      cast(dict[str, Any], fastavro.parse_schema(schema)))
    return AvroCodec(schema)


class TopicSink:
    """Side-by-side rows to ``topic``; what was produced is acknowledged at each commit."""

    def __init__(self, cfg: Config, topic: str, codec: Codec, producer: Any) -> None:
        self.name = f"topic {topic}"
        self.topic, self.codec, self._producer = topic, codec, producer
        self.written = 0
        self._errors: list[str] = []

    def resume(self, run_id: str, shard: Shard, plan: Ranges | None, force: bool) -> Resume:
        return Resume(dict(plan or {}), {}, 0)

    def write(self, predictions: pa.Table | None, rejects: pa.Table | None) -> None:
        if predictions is None:
            return
        for row in _millis(predictions).to_pylist():
            key = row.get("entity_id")
            self._send(self.codec.encode(row), None if key is None else str(key).encode())
        self.written += predictions.num_rows

    def _send(self, value: bytes, key: bytes | None) -> None:
        while True:
            try:
                self._producer.produce(self.topic, value, key, on_delivery=self._ack)
                break
            except BufferError:  # the local queue is full: let it drain
                self._producer.poll(0.1)
        self._producer.poll(0)

    def _ack(self, err: Any, _msg: Any) -> None:
        if err is not None:
            self._errors.append(str(err))

    def due(self) -> bool:
        return False

    def commit(self, covered: Ranges) -> None:
        left = self._producer.flush(FLUSH_TIMEOUT_S)
        if left or self._errors:
            raise BrokerError(f"{self.name}: {left} records not acknowledged in {FLUSH_TIMEOUT_S:.0f} s, "
                              f"{len(self._errors)} refused ({'; '.join(self._errors[:3])})")

    def finish(self) -> None:
        self.commit({})


def _millis(table: pa.Table) -> pa.Table:
    """Timestamps as the records hold them: milliseconds since the epoch."""
    for i, field in enumerate(table.schema):
        if pa.types.is_timestamp(field.type):
            ms = pc.divide(table.column(i).cast(pa.int64()), 1000)
            table = table.set_column(i, field.name, ms)
    return table
