"""The exactly-once checkpoint on a fake clock, with fake clients: no broker, no loop.

The test plays the loop: it sends outputs through the deliveries (the first one opens the
transaction), collects their reports, hands them to the checkpoint, and commits when it is due.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from streamer.config import with_overrides
from streamer.config_file import load_config
from streamer.kafka.checkpoint import Transactional
from streamer.kafka.delivery import Deliveries
from streamer.kafka.messages import Output
from streamer.kafka.offsets import OffsetTracker
from streamer.kafka.side import KafkaSide
from streamer.testing import FakeClock
from tests.support.fakes import FakeConsumer, FakeMessage, FakeProducer

ROOT = Path(__file__).resolve().parents[2]
P0 = ("features", 0)


def exactly_once() -> tuple[FakeClock, FakeProducer, Deliveries, OffsetTracker, Transactional]:
    """A transactional checkpoint committing every second; P0's offsets 0-9 consumed."""
    cfg = load_config(ROOT / "deploy" / "config" / "example.yaml",
                      env={"KAFKA_BOOTSTRAP": "fake:9092", "INPUT_TOPIC": P0[0], "OUTPUT_TOPIC": "scores",
                           "GROUP_ID": "g"})
    cfg = with_overrides(cfg, processing={"guarantee": "exactly_once", "commit_interval_ms": 1000})
    clock, producer, tracker = FakeClock(), FakeProducer(), OffsetTracker()
    tracker.consumed(P0, np.arange(10))
    deliveries = Deliveries(producer, on_full=lambda: None)
    checkpoint = Transactional(cfg, tracker, FakeConsumer(), deliveries, clock, None)
    return clock, producer, deliveries, tracker, checkpoint


def outputs(offsets: range) -> list[Output]:
    return [Output("scores", None, f"p{o}".encode(), None, FakeMessage(*P0, o, b"")) for o in offsets]


def send(deliveries: Deliveries, checkpoint: Transactional, sent: list[Output]) -> None:
    """The loop's send: through its Kafka side, which tells the checkpoint first."""
    KafkaSide(FakeConsumer(), deliveries, checkpoint).send(sent)


def collect(deliveries: Deliveries, checkpoint: Transactional) -> None:
    """The loop's pass: reports served, acknowledged and failed outputs handed over."""
    acked, failed = deliveries.collect(0)
    assert not checkpoint.acknowledged(acked)  # nothing is final before its transaction commits
    assert not checkpoint.failed(failed)  # a failure aborts the transaction: nothing for the loop


def test_outputs_become_final_with_their_offsets_in_one_transaction_each_interval() -> None:
    clock, producer, deliveries, tracker, checkpoint = exactly_once()
    assert producer.transactions == ["init"] and not checkpoint.commit_due()  # nothing open
    send(deliveries, checkpoint, outputs(range(10)))  # the first output opens the transaction
    collect(deliveries, checkpoint)
    assert producer.transactions == ["init", "begin"]
    clock.advance(0.999)
    assert not checkpoint.commit_due(read=True)  # the interval is not over
    clock.advance(0.001)
    assert checkpoint.commit_due(read=True)
    commit = checkpoint.commit()
    assert producer.transactions == ["init", "begin", "send_offsets", "commit"]
    assert producer.sent_offsets == [{P0: 10}] and commit.committed == {P0: 10}  # the next to read
    assert len(commit.counted.outputs) == 10 and commit.rewind is None
    assert not checkpoint.commit_due() and tracker.in_flight() == 0


def test_a_failed_output_aborts_the_transaction_at_once_and_reads_again_from_the_last_commit() -> None:
    clock, producer, deliveries, tracker, checkpoint = exactly_once()
    send(deliveries, checkpoint, outputs(range(5)))
    collect(deliveries, checkpoint)
    clock.advance(1.0)
    checkpoint.commit()  # offsets 0-4 committed
    send(deliveries, checkpoint, outputs(range(5, 10)))
    producer.fail_next = 1  # the broker times one of them out
    collect(deliveries, checkpoint)
    assert checkpoint.commit_due()  # at once: not an interval later
    commit = checkpoint.commit()
    assert producer.transactions[-2:] == ["begin", "abort"]
    assert commit.rewind == {P0: 5} and not commit.committed  # read again from the last commit
    assert commit.write_failure is not None and "cannot write to scores" in commit.write_failure
    assert deliveries.in_flight == 0  # what the aborted transaction held is written off


def test_a_failing_loop_aborts_instead_of_committing_and_an_empty_interval_commits_nothing() -> None:
    clock, producer, deliveries, tracker, checkpoint = exactly_once()
    clock.advance(5.0)
    assert not checkpoint.commit().attempted and producer.transactions == ["init"]  # no transaction open
    send(deliveries, checkpoint, outputs(range(3)))
    collect(deliveries, checkpoint)
    commit = checkpoint.commit(failing=True)  # the loop died: commit only what is safe
    assert producer.transactions[-1] == "abort" and commit.rewind == {P0: 0} and not producer.sent_offsets
