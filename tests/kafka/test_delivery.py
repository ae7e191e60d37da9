"""Producing through a full local queue, and refusals reported as failed deliveries."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from streamer.kafka.deadletter import is_cut_short
from streamer.kafka.delivery import Deliveries, produce, verdicts
from streamer.kafka.messages import Output


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
    assert [(o.value, e.code()) for o, e in failed.refused] == [(b"huge", KafkaError.MSG_SIZE_TOO_LARGE)]
    assert not failed.retry and not failed.shrink  # a prediction too large: refused for good
    assert deliveries.in_flight == 0
    assert [o.attempts for o in (*acked.outputs, *(o for o, _ in failed.refused))] == [1, 1, 1]


def test_predictions_keyed_by_a_field_and_an_empty_entity_is_a_null_key() -> None:
    from types import SimpleNamespace

    from streamer.kafka.messages import Predictions

    p = Predictions("t", [b"a", b"b"], SimpleNamespace(entity_ids=["acct-1", ""], event_ids=["e1", "e2"]))  # type: ignore[arg-type]
    assert p.keyed("entity_id").keys == [b"acct-1", None]
    assert p.keyed("event_id").keys == [b"e1", b"e2"]
    assert p.keyed("input") is p


class BatchProducer(FakeProducer):
    """With produce_batch, as confluent-kafka binds rd_kafka_produce_batch: a refused message gets
    an ``_error`` and is not queued, the others are, in order; the count queued is returned."""

    def __init__(self, queued: int = 0, **kw: Any) -> None:
        super().__init__(**kw)
        self.queued, self.batch_calls = queued, 0  # queued: messages already in the local queue

    def __len__(self) -> int:
        return self.queued + len(self.pending)

    def produce_batch(self, topic: str, messages: list[dict[str, Any]], on_delivery: Any) -> int:
        self.batch_calls += 1
        for m in messages:
            if m["value"] == self.refuse:
                m["_error"] = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)
                continue
            self.sent.append((topic, m["value"], m["key"]))
            self.pending.append(on_delivery)
        return sum("_error" not in m for m in messages)


def predictions(values: list[bytes]) -> Any:
    from streamer.kafka.messages import Predictions

    items = [SimpleNamespace(key=lambda i=i: f"k{i}".encode()) for i in range(len(values))]
    rows = SimpleNamespace(source=SimpleNamespace(items=items), event_times=list(range(len(values))),
                           take=lambda ok: SimpleNamespace(kept=[v for v, k in zip(values, ok) if k]))
    return Predictions("scores", values, rows)  # type: ignore[arg-type]


def test_a_batch_of_predictions_goes_out_in_one_call_in_order_and_a_refusal_is_its_failure() -> None:
    producer = BatchProducer(refuse=b"huge")
    deliveries = Deliveries(producer, on_full=lambda: None)
    deliveries.send(predictions([b"a", b"huge", b"b"]))
    assert producer.batch_calls == 1
    assert producer.sent == [("scores", b"a", b"k0"), ("scores", b"b", b"k2")]
    acked, failed = deliveries.collect(0)
    assert acked.batches[0].kept == [b"a", b"b"]
    assert [(o.value, o.key, e.code()) for o, e in failed.refused] == [(b"huge", b"k1", KafkaError.MSG_SIZE_TOO_LARGE)]
    assert deliveries.in_flight == 0


def test_without_room_for_the_whole_batch_each_prediction_is_produced_alone() -> None:
    """A full queue could refuse one message of a batch call and queue the next: out of order.
    So with less room than the batch, one produce each (which waits for room, in order)."""
    producer = BatchProducer(queued=99_999)
    deliveries = Deliveries(producer, on_full=lambda: producer.poll(0), queue_limit=100_000)
    deliveries.send(predictions([b"a", b"b"]))
    assert producer.batch_calls == 0 and [v for _, v, _ in producer.sent] == [b"a", b"b"]
    producer.queued = 0
    deliveries.send(predictions([b"c", b"d"]))
    assert producer.batch_calls == 1 and [v for _, v, _ in producer.sent] == [b"a", b"b", b"c", b"d"]


def test_a_batch_call_refused_whole_falls_back_to_one_produce_each() -> None:
    class Refusing(BatchProducer):
        def produce_batch(self, topic: str, messages: list[dict[str, Any]], on_delivery: Any) -> int:
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG, "Invalid topic"))

    producer = Refusing()
    deliveries = Deliveries(producer, on_full=lambda: None)
    deliveries.send(predictions([b"a", b"b"]))
    assert [v for _, v, _ in producer.sent] == [b"a", b"b"]
    acked, failed = deliveries.collect(0)
    assert acked.batches and not failed and deliveries.units_in_flight == 0


def test_each_failed_delivery_gets_one_verdict() -> None:
    """Refused: a prediction the broker refuses for good; shrink: a dead letter too large for its
    topic, cut short once; retry: everything else, a cut-short letter refused again included."""
    source = SimpleNamespace(topic=lambda: "in", partition=lambda: 0, offset=lambda: 7)
    prediction = Output("out", None, b"p", None, source)
    letter = Output("out.dlq", None, b"x" * 5000, [], source, stage="decode")
    too_large, timed_out = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), KafkaError(KafkaError._MSG_TIMED_OUT)
    got = verdicts([(prediction, too_large), (letter, too_large), (prediction, timed_out), (letter, timed_out)])
    assert got.refused == ((prediction, too_large),)
    (short,) = got.shrink
    assert is_cut_short(short.headers) and len(short.value or b"") < len(letter.value or b"")
    assert got.retry == ((prediction, timed_out), (letter, timed_out))
    again = verdicts([(short, too_large)])
    assert again.retry == ((short, too_large),) and not again.shrink  # cut short once, never twice
    assert not got.within(set()) and got.within({("in", 0)}) is got  # another owner's: dropped
