"""The at-least-once checkpoint's background commits, on a fake clock: no broker, no loop.

The test plays the loop (``settled`` then, when due, ``commit(background=True)``) and decides
when librdkafka answers: a fake consumer hands its answers to ``on_commit`` only inside
``consume()``, so an answer the test never consumes is one that never came.
"""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from confluent_kafka import OFFSET_INVALID, KafkaError, TopicPartition

from streamer.config import with_overrides
from streamer.config_file import load_config
from streamer.kafka import watchdog
from streamer.kafka.checkpoint import AtLeastOnce
from streamer.kafka.offsets import OffsetTracker
from streamer.kafka.pending import OnItsWay
from streamer.testing import FakeClock
from tests.support.fakes import FakeConsumer

ROOT = Path(__file__).resolve().parents[2]
P0 = ("features", 0)
DEADLINE_S = 30.0  # the ack timeout below; more than two commit intervals


def at_least_once() -> tuple[FakeClock, FakeConsumer, AtLeastOnce]:
    """A checkpoint committing every second, P0 done up to 10 (the position to commit)."""
    cfg = load_config(ROOT / "deploy" / "config" / "example.yaml",
                      env={"KAFKA_BOOTSTRAP": "fake:9092", "INPUT_TOPIC": P0[0], "OUTPUT_TOPIC": "scores",
                           "GROUP_ID": "g"})
    cfg = with_overrides(cfg, processing={"commit_interval_ms": 1000}, output={"ack_timeout_ms": 30_000})
    clock, consumer, tracker = FakeClock(), FakeConsumer(), OffsetTracker()
    tracker.consumed(P0, np.arange(10))
    tracker.done(P0, np.arange(10))
    checkpoint = AtLeastOnce(cfg, tracker, consumer, None, clock, None)  # type: ignore[arg-type]
    consumer.configure(on_commit=checkpoint.commit_reported)
    return clock, consumer, checkpoint


def due_commit(clock: FakeClock, checkpoint: AtLeastOnce) -> None:
    """One commit interval later: the loop's settle and background commit."""
    clock.advance(1.0)
    checkpoint.settled()
    assert checkpoint.commit_due()
    checkpoint.commit(background=True)


class GaveUp(Exception):
    pass


def test_an_unanswered_background_commit_is_sent_again_after_its_deadline_not_before(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sent again at the deadline; the resend unanswered for a deadline more: the consumer is
    wedged (seen after a coordinator's broker came back), and the process exits 70."""
    gave_up: list[tuple[str, float]] = []

    def give_up(what: str, seconds: float) -> None:
        gave_up.append((what, seconds))
        raise GaveUp

    monkeypatch.setattr(watchdog, "give_up", give_up)
    clock, consumer, checkpoint = at_least_once()
    assert checkpoint.commit(background=True).attempted
    # Its answer never comes (a coordinator that moved): nothing is consumed, nothing reported.
    for _ in range(int(DEADLINE_S) - 1):
        due_commit(clock, checkpoint)
    assert consumer.commits == [{P0: 10}]  # on its way: not sent again yet
    with caplog.at_level(logging.WARNING, logger="streamer.kafka.pending"):
        for _ in range(int(DEADLINE_S)):  # at the deadline it goes again, then waits a deadline more
            due_commit(clock, checkpoint)
    assert consumer.commits == [{P0: 10}, {P0: 10}]
    lost = [r.getMessage() for r in caplog.records if "no answer" in r.getMessage()]
    assert lost == ["no answer to the background commit of features[0] at 10 within 30 s: sending the "
                    "position again"]
    assert gave_up == []
    with pytest.raises(GaveUp):
        due_commit(clock, checkpoint)
    assert gave_up == [("the commit of features[0] at 10", 2 * DEADLINE_S)]
    assert consumer.commits == [{P0: 10}, {P0: 10}]


def test_an_answered_background_commit_is_not_sent_again() -> None:
    clock, consumer, checkpoint = at_least_once()
    checkpoint.commit(background=True)
    clock.advance(DEADLINE_S - 1)
    consumer.consume(1, 0)  # late, but inside the deadline: the answer reaches on_commit
    assert checkpoint.settled().committed == {P0: 10}
    for _ in range(3 * int(DEADLINE_S)):
        due_commit(clock, checkpoint)
    assert consumer.commits == [{P0: 10}]


@pytest.mark.parametrize("partitions", [[], None, [TopicPartition(P0[0], P0[1], OFFSET_INVALID)]],
                         ids=["no-partitions", "partitions-none", "invalid-offset"])
def test_a_failed_answer_that_does_not_name_the_offset_lets_the_position_go_again(
        partitions: list[TopicPartition] | None) -> None:
    clock, consumer, checkpoint = at_least_once()
    checkpoint.commit(background=True)
    checkpoint.commit_reported(KafkaError(KafkaError.NOT_COORDINATOR), partitions)  # type: ignore[arg-type]
    clock.advance(1.0)
    settled = checkpoint.settled()
    checkpoint.commit(background=True)  # the next due commit, long before the deadline
    assert consumer.commits == [{P0: 10}, {P0: 10}]
    assert settled.error is not None and settled.committed == {}  # reported, not swallowed


def test_a_lost_partition_is_not_held_as_on_its_way_when_it_comes_back() -> None:
    """Its unanswered background commit is forgotten with it: given back, the position goes out
    at the next commit, not only once the old one is overdue."""
    clock, consumer, checkpoint = at_least_once()
    assert checkpoint.commit(background=True).attempted
    checkpoint.lost({P0})
    due_commit(clock, checkpoint)
    assert consumer.commits == [{P0: 10}, {P0: 10}]


def done_up_to(checkpoint: AtLeastOnce, start: int, end: int) -> None:
    checkpoint.tracker.consumed(P0, np.arange(start, end))
    checkpoint.tracker.done(P0, np.arange(start, end))


def test_a_newer_position_waits_for_the_answer_to_the_one_on_its_way() -> None:
    """The broker keeps the last commit it applies: two commits of one partition in flight can
    land in either order across a coordinator's failover, so the second waits for the first."""
    clock, consumer, checkpoint = at_least_once()
    checkpoint.commit(background=True)
    done_up_to(checkpoint, 10, 25)
    for _ in range(3):  # the interval passes, the answer has not come: 25 is held back
        due_commit(clock, checkpoint)
    assert consumer.commits == [{P0: 10}]
    consumer.consume(1, 0)  # the answer to 10
    due_commit(clock, checkpoint)
    assert consumer.commits == [{P0: 10}, {P0: 25}]


def test_an_overdue_commit_is_followed_by_the_partition_s_current_position() -> None:
    clock, consumer, checkpoint = at_least_once()
    checkpoint.commit(background=True)
    done_up_to(checkpoint, 10, 25)
    for _ in range(int(DEADLINE_S)):
        due_commit(clock, checkpoint)
    assert consumer.commits == [{P0: 10}, {P0: 25}]


def test_an_older_position_answered_after_a_newer_one_sends_the_newer_again() -> None:
    """What the cluster test caught: the new coordinator applied 25, then a retried request of
    10; holding 25 as committed (the highest answer), the processor sent nothing more and the
    group stayed behind once the input ended. The last answer is the broker's offset."""
    clock, consumer, checkpoint = at_least_once()
    done_up_to(checkpoint, 10, 25)
    checkpoint.commit_reported(None, [TopicPartition(P0[0], P0[1], 25)])
    assert checkpoint.settled().committed == {P0: 25}
    assert checkpoint.tracker.committable() == {}
    checkpoint.commit_reported(None, [TopicPartition(P0[0], P0[1], 10)])  # a later pass
    assert checkpoint.settled().committed == {P0: 10}
    assert checkpoint.tracker.committable() == {P0: 25}
    due_commit(clock, checkpoint)
    assert consumer.commits == [{P0: 25}]


def test_a_stale_failed_answer_leaves_the_newer_commit_on_its_way() -> None:
    clock, consumer, checkpoint = at_least_once()
    checkpoint.commit(background=True)  # 10, never answered
    done_up_to(checkpoint, 10, 25)
    for _ in range(int(DEADLINE_S)):  # overdue: 25 goes
        due_commit(clock, checkpoint)
    stale = KafkaError(KafkaError.NOT_COORDINATOR)  # the answer to 10, at last, failed
    checkpoint.commit_reported(stale, [SimpleNamespace(topic=P0[0], partition=P0[1], offset=10, error=stale)])
    done_up_to(checkpoint, 25, 40)
    due_commit(clock, checkpoint)
    assert consumer.commits == [{P0: 10}, {P0: 25}]  # 40 waits for 25's answer


def test_the_partitions_a_partly_failed_commit_accepted_count_as_committed() -> None:
    """librdkafka reports a partition's failure as the whole report's error too: the partitions
    without an error of their own were committed."""
    clock, consumer, checkpoint = at_least_once()
    p1 = (P0[0], 1)
    checkpoint.tracker.consumed(p1, np.arange(5))
    checkpoint.tracker.done(p1, np.arange(5))
    consumer.commit_errors.append({p1: KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)})
    checkpoint.commit(background=True)
    consumer.consume(1, 0)  # the answer: the report's error is p1's
    settled = checkpoint.settled()
    assert settled.committed == {P0: 10}
    assert settled.error is not None and settled.failed_partitions == 1
    assert checkpoint.tracker.committable() == {p1: 5}


def test_a_moved_position_resent_and_unanswered_too_gives_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watchdog, "give_up", lambda what, seconds: (_ for _ in ()).throw(GaveUp(what)))
    clock, consumer, checkpoint = at_least_once()
    checkpoint.commit(background=True)
    done_up_to(checkpoint, 10, 25)
    for _ in range(2 * int(DEADLINE_S) - 1):
        due_commit(clock, checkpoint)
    assert consumer.commits == [{P0: 10}, {P0: 25}]
    with pytest.raises(GaveUp, match="at 25"):
        due_commit(clock, checkpoint)


def test_a_partition_waiting_for_an_answer_is_not_unsent() -> None:
    """So a quiet spell does not spend its one commit on a position that cannot go yet."""
    clock = FakeClock()
    on_its_way = OnItsWay(DEADLINE_S, clock)
    on_its_way.sent({P0: 10})
    assert not on_its_way.unsent({P0: 25})
    assert on_its_way.sendable({P0: 25}) == {}
    on_its_way.answered(P0, 10, ok=True)
    assert on_its_way.unsent({P0: 25})
    assert on_its_way.sendable({P0: 25}) == {P0: 25}
