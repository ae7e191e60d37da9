"""A sink that writes an evaluation's side-by-side rows to a Kafka topic, a record per event.

The records are encoded in ``output.format`` with the side-by-side schema (evaluate/pair.py):
plain Avro, Avro framed with the schema's id under the topic's subject, or JSON. Keyed by the
event's entity id, like predictions. The topic is created like the output topic when missing.
They go out through the stream's delivery code (kafka/delivery.py), a unit per write. An
evaluation is an analysis run, not a checkpoint: it starts from its range's beginning every time
and redoes nothing, so any record that fails, whatever its verdict (kafka/messages.py: refused
for good, or failed otherwise), fails the run as soon as its report is collected, and a commit
waits up to ``output.ack_timeout_ms`` for every record's acknowledgement (one unacknowledged fails
the run too). Rejects are counted in the report, not written here: they are the stream's dead
letters.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, cast

import fastavro
import pyarrow as pa
import pyarrow.compute as pc

from streamer.config import Config
from streamer.errors import BrokerError
from streamer.formats.avro import AvroCodec
from streamer.formats.codec import Codec
from streamer.formats.json_events import JsonCodec
from streamer.formats.subjects import confluent_output_codec
from streamer.kafka.delivery import Deliveries, Producer
from streamer.kafka.messages import Failure, Output
from streamer.kafka.ranges import Ranges
from streamer.lake.sink import Resume, Shard

FULL_QUEUE_POLL_S = 0.1  # while the producer's local queue is full: serve reports this long, then try again
NAMED = 3  # failed records named in the error, the first ones


def topic_codec(cfg: Config, topic: str, schema: dict[str, Any]) -> Codec:
    """The side-by-side records' codec, in ``output.format``, for ``topic``."""
    if cfg.output.format == "json":
        return JsonCodec()
    if cfg.output.format == "avro-confluent":
        return confluent_output_codec(replace(cfg, output=replace(cfg.output, topic=topic)),
                                      cast(dict[str, Any], fastavro.parse_schema(schema)))
    return AvroCodec(schema)


class TopicSink:
    """Side-by-side rows to ``topic`` through ``producer``, a delivery unit per write; a commit
    waits up to ``ack_timeout_s`` for every record's acknowledgement."""

    def __init__(self, topic: str, codec: Codec, producer: Producer, ack_timeout_s: float) -> None:
        self.name = f"topic {topic}"
        self.topic, self.codec, self.ack_timeout_s = topic, codec, ack_timeout_s
        self._deliveries = Deliveries(producer, on_full=lambda: self._collect(FULL_QUEUE_POLL_S))
        self.written = 0  # records sent
        self._refused: list[Failure] = []  # verdict refused: the broker takes them in no case
        self._failed: list[Failure] = []  # verdict retry (the stream would send them again): not written

    @property
    def rejects_at(self) -> str:
        return "the report's count of rows not compared (a topic keeps no rejects)"

    @property
    def committed_rows(self) -> tuple[int, int]:
        return self.written, 0

    def resume(self, run_id: str, shard: Shard, plan: Ranges | None, force: bool) -> Resume:
        return Resume(dict(plan or {}), {}, 0)

    def write(self, predictions: pa.Table | None, rejects: pa.Table | None) -> int:
        if predictions is None:
            return 0
        outputs = []
        for row in _millis(predictions).to_pylist():
            key = row.get("entity_id")
            # the source names the record in an error: its event and where the event was read
            source = (row.get("event_id"), row.get("source_topic"), row.get("source_partition"),
                      row.get("source_offset"))
            outputs.append(Output(self.topic, None if key is None else str(key).encode(), self.codec.encode(row),
                                  None, source))
        self._deliveries.send(outputs)
        self.written += len(outputs)
        self._collect(0.0)  # the reports already in: memory holds only the units in flight
        self._check(None)
        return 0

    def _collect(self, timeout_s: float) -> None:
        _, failed = self._deliveries.collect(timeout_s)
        self._refused += failed.refused
        self._failed += failed.retry  # (shrink is a dead letter's verdict: never one of these)

    def due(self) -> bool:
        return False

    def commit(self, covered: Ranges) -> None:
        """Wait for every record's report; any record refused, failed or unacknowledged fails the run."""
        self._deliveries.flush(self.ack_timeout_s)
        self._collect(0.0)
        self._check(self.ack_timeout_s)

    def finish(self) -> None:
        self.commit({})

    def _check(self, waited_s: float | None) -> None:
        """A BrokerError naming the first failed records, if any record failed, or after a wait of
        ``waited_s`` (a commit; None: mid-run) is still unreported."""
        unacked = len(self._deliveries.producer)
        if not (self._refused or self._failed or (waited_s is not None and unacked)):
            return
        first = "; ".join(f"{_event(out.source)}: {err.str()}" for out, err in [*self._refused, *self._failed][:NAMED])
        when = "yet" if waited_s is None else f"after {waited_s:.0f} s (output.ack_timeout_ms)"
        raise BrokerError(f"{self.name}: of {self.written} records sent, {len(self._refused)} were refused by the "
                          f"broker for good (too large, invalid), {len(self._failed)} failed otherwise, {unacked} "
                          f"are not acknowledged {when} (first failed: {first or 'none'})")


def _event(source: tuple[Any, Any, Any, Any]) -> str:
    """``event evt-7 (features[2] offset 41)``: a side-by-side record by the event it holds."""
    event_id, topic, partition, offset = source
    return f"event {event_id} ({topic}[{partition}] offset {offset})"


def _millis(table: pa.Table) -> pa.Table:
    """Timestamps as the records hold them: milliseconds since the epoch."""
    for i, field in enumerate(table.schema):
        if pa.types.is_timestamp(field.type):
            ms = pc.divide(table.column(i).cast(pa.int64()), 1000)
            table = table.set_column(i, field.name, ms)
    return table
