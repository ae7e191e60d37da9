"""Producing through a full local queue, and refusals reported as failed deliveries."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from streamer.kafka.delivery import Deliveries, Output, produce


class FakeProducer:
    """Full for the first ``full`` calls; refuses values in ``refuse``; acks on poll()."""

    def __init__(self, full: int = 0, refuse: bytes | None = None) -> None:
        self.full, self.refuse = full, refuse
        self.sent: list[tuple[str, bytes | None, bytes | None]] = []
        self.pending: list[Any] = []

    def produce(self, topic: str, value: bytes | None, key: bytes | None = None, **kw: Any) -> None:
        if self.full:
            self.full -= 1
            raise BufferError("queue full")
        if value == self.refuse:
            raise KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
        self.sent.append((topic, value, key))
        self.pending.append(kw["on_delivery"])

    def poll(self, _timeout: float) -> int:
        served, self.pending = self.pending, []
        for callback in served:
            callback(None, SimpleNamespace(value=lambda: None))
        return len(served)


def test_produce_serves_the_full_queue_until_the_message_is_taken() -> None:
    producer, served = FakeProducer(full=3), []
    produce(producer, lambda: served.append(1), "t", b"v", b"k", on_delivery=lambda *a: None)
    assert served == [1, 1, 1] and producer.sent == [("t", b"v", b"k")]


def test_send_reports_a_refused_output_as_failed_and_sends_the_rest() -> None:
    producer = FakeProducer(full=2, refuse=b"huge")

    def serve_reports() -> None:
        producer.poll(0)

    deliveries = Deliveries(producer, on_full=serve_reports)
    outputs = [Output("t", None, v, None, source=None) for v in (b"a", b"huge", b"b")]
    deliveries.send(outputs)
    acked, failed = deliveries.collect(0)
    assert [o.value for o in acked.outputs] == [b"a", b"b"] and not acked.batches
    assert [(o.value, e.code()) for o, e in failed] == [(b"huge", KafkaError.MSG_SIZE_TOO_LARGE)]
    assert deliveries.in_flight == 0 and [o.attempts for o in outputs] == [1, 1, 1]


def test_predictions_keyed_by_a_field_and_an_empty_entity_is_a_null_key() -> None:
    from types import SimpleNamespace

    from streamer.kafka.delivery import Predictions

    p = Predictions("t", [b"a", b"b"], SimpleNamespace(entity_ids=["acct-1", ""], event_ids=["e1", "e2"]))  # type: ignore[arg-type]
    assert p.keyed("entity_id").keys == [b"acct-1", None]
    assert p.keyed("event_id").keys == [b"e1", b"e2"]
    assert p.keyed("input") is p
