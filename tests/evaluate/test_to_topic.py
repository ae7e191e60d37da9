"""An evaluation's side-by-side records to a topic (streamer/evaluate/to_topic.py), on a fake producer:
each write one delivery unit keyed by entity id; any record refused, failed or unacknowledged fails
the run, naming it."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import KafkaError

from streamer.errors import BrokerError
from streamer.evaluate.to_topic import TopicSink
from streamer.formats.json_events import JsonCodec
from tests.support.fakes import FakeProducer


class KeyedProducer(FakeProducer):
    """The fake producer, noting each message's key as it is produced."""

    def __init__(self) -> None:
        super().__init__()
        self.keys: list[bytes | None] = []

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None,
                headers: Any = None, on_delivery: Callable[..., None] | None = None) -> None:
        self.keys.append(key)
        super().produce(topic, value, key, headers=headers, on_delivery=on_delivery)


class SilentProducer(FakeProducer):
    """A producer whose broker never answers: nothing is ever reported."""

    def poll(self, timeout: float = 0) -> int:
        return 0

    def flush(self, timeout: float = 0) -> int:
        return len(self.pending)


def side_by_side(first: int, n: int) -> pa.Table:
    """``n`` side-by-side rows, events ``first`` on, read from features[1]; event 2 has no entity."""
    ids = range(first, first + n)
    return pa.table({
        "event_id": [f"evt-{i}" for i in ids],
        "entity_id": [None if i == 2 else f"acct-{i % 3}" for i in ids],
        "source_topic": ["features"] * n, "source_partition": [1] * n, "source_offset": [40 + i for i in ids],
        "champion_score": [0.25] * n, "candidate_score": [0.5] * n,
    })


def sink(producer: FakeProducer) -> TopicSink:
    return TopicSink("evaluation", JsonCodec(), producer, ack_timeout_s=30.0)


def test_every_record_is_sent_keyed_by_entity_and_acknowledged_at_commit() -> None:
    producer = KeyedProducer()
    producer.hold = True  # nothing is reported before the commit waits for it
    out = sink(producer)
    out.write(side_by_side(0, 4), None)
    out.write(None, pa.table({"reason": ["bad"]}))  # rejects are the stream's dead letters: not written here
    out.write(side_by_side(4, 3), None)
    assert out.written == 7 and producer.written == []
    out.commit({("features", 1): (40, 47)})
    assert [json.loads(v or b"")["event_id"] for _, v in producer.written] == [f"evt-{i}" for i in range(7)]
    assert {t for t, _ in producer.written} == {"evaluation"}
    assert producer.keys == [b"acct-0", b"acct-1", None, b"acct-0", b"acct-1", b"acct-2", b"acct-0"]
    out.finish()  # nothing left to wait for


def test_a_record_the_broker_refuses_for_good_fails_the_run_naming_its_event() -> None:
    producer = FakeProducer()
    producer.error, producer.fail_next = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), 1
    out = sink(producer)
    with pytest.raises(BrokerError) as caught:
        out.write(side_by_side(0, 3), None)  # its report comes back as the write collects
    message = str(caught.value)
    assert "topic evaluation: of 3 records sent, 1 were refused by the broker for good" in message, message
    assert "0 failed otherwise" in message and "event evt-0 (features[1] offset 40)" in message, message
    assert len(producer.written) == 2  # the others were acknowledged


def test_a_record_that_failed_otherwise_fails_the_commit() -> None:
    producer = FakeProducer()
    producer.hold = True
    producer.fail_next = 1  # a timed-out delivery: the stream would send it again, an evaluation fails
    out = sink(producer)
    out.write(side_by_side(5, 2), None)
    with pytest.raises(BrokerError, match=r"0 were refused .*, 1 failed otherwise, 0 are not acknowledged after "
                                          r"30 s .*event evt-5 \(features\[1\] offset 45\): Local: Message timed out"):
        out.commit({})


def test_records_never_acknowledged_fail_the_commit() -> None:
    out = sink(SilentProducer())
    out.write(side_by_side(0, 2), None)  # no report yet: not a failure mid-run
    with pytest.raises(BrokerError, match=r"of 2 records sent, 0 were refused .* 2 are not acknowledged after 30 s "
                                          r"\(output.ack_timeout_ms\) \(first failed: none\)"):
        out.commit({})


def test_a_full_local_queue_is_served_and_nothing_is_lost() -> None:
    producer = FakeProducer()
    full = [True, False]  # the first produce finds the queue full

    def produce(topic: str, value: bytes | None = None, key: bytes | None = None,
                headers: Any = None, on_delivery: Callable[..., None] | None = None) -> None:
        if full and full.pop(0):
            raise BufferError("queue full")
        FakeProducer.produce(producer, topic, value, key, headers=headers, on_delivery=on_delivery)

    producer.produce = produce  # type: ignore[method-assign]
    out = sink(producer)
    out.write(side_by_side(0, 3), None)
    out.commit({})
    assert [json.loads(v or b"")["event_id"] for _, v in producer.written] == ["evt-0", "evt-1", "evt-2"]
