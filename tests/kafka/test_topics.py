"""Listing partitions and creating topics, against a fake admin client."""

from __future__ import annotations

import logging
from concurrent.futures import Future
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import NewTopic

from streamer.errors import BrokerError
from streamer.kafka.topics import TopicWait, create, create_each, ensure_like, partitions


@dataclass
class _Partition:
    leader: int = 1


@dataclass
class _Topic:
    partitions: dict[int, _Partition]
    error: KafkaError | None = None


@dataclass
class FakeAdmin:
    """Topics by name; ``refuse`` maps a name to the error code its creation fails with."""

    topics: dict[str, _Topic] = field(default_factory=dict)
    refuse: dict[str, int] = field(default_factory=dict)
    created: list[tuple[str, int, int]] = field(default_factory=list)

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        if topic is not None and topic not in self.topics:
            return SimpleNamespace(topics={topic: _Topic({}, KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))})
        return SimpleNamespace(topics=dict(self.topics))

    def create_topics(self, new_topics: list[NewTopic], **_kwargs: Any) -> dict[str, Future[Any]]:
        futures = {}
        for t in new_topics:
            future: Future[Any] = Future()
            if t.topic in self.refuse:
                future.set_exception(KafkaException(KafkaError(self.refuse[t.topic])))
            else:
                self.created.append((t.topic, t.num_partitions, t.replication_factor))
                self.topics[t.topic] = _Topic({p: _Partition() for p in range(t.num_partitions)})
                future.set_result(None)
            futures[t.topic] = future
        return futures


def test_partitions_are_sorted_and_a_missing_topic_is_named() -> None:
    admin = FakeAdmin({"in": _Topic({2: _Partition(), 0: _Partition(), 1: _Partition()})})
    assert partitions(admin, "in") == [0, 1, 2]
    with pytest.raises(BrokerError, match="'nope' does not exist"):
        partitions(admin, "nope")


def test_a_topic_the_broker_lists_without_partitions_is_an_error_naming_it() -> None:
    admin = FakeAdmin({"secret": _Topic({}, KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))})
    with pytest.raises(BrokerError, match="'secret'"):
        partitions(admin, "secret")


def test_create_makes_only_the_missing_topics() -> None:
    admin = FakeAdmin({"in": _Topic({0: _Partition()})})
    create(admin, {"in": 3, "out": 3, "dlq": 1}, replication_factor=1)
    assert admin.created == [("out", 3, 1), ("dlq", 1, 1)]


def test_a_concurrent_creator_is_fine_any_other_refusal_names_the_topic() -> None:
    admin = FakeAdmin(refuse={"raced": KafkaError.TOPIC_ALREADY_EXISTS})
    create(admin, {"raced": 3})
    admin = FakeAdmin(refuse={"bad": KafkaError.INVALID_PARTITIONS})
    with pytest.raises(BrokerError, match="cannot create topic 'bad'"):
        create(admin, {"bad": 0})


def test_ensure_like_copies_the_partition_count_or_takes_one() -> None:
    admin = FakeAdmin({"in": _Topic({p: _Partition() for p in range(4)})})
    ensure_like(admin, "in.dlq", like="in")
    ensure_like(admin, "in.dlq", like="in")  # it exists now: nothing to do
    ensure_like(admin, "other.dlq", like="other")
    assert admin.created == [("in.dlq", 4, -1), ("other.dlq", 1, -1)]


class Appearing(FakeAdmin):
    """A cluster where each topic of ``after`` appears at that listing (1: the first), and whose
    listings in ``unanswered`` fail with a timeout."""

    def __init__(self, after: dict[str, int], unanswered: tuple[int, ...] = ()) -> None:
        super().__init__()
        self.after, self.unanswered, self.asked = after, unanswered, 0

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        self.asked += 1
        if self.asked in self.unanswered:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
        for name, at in self.after.items():
            if self.asked >= at:
                self.topics.setdefault(name, _Topic({0: _Partition()}))
        return super().list_topics(topic, timeout)


def test_the_wait_backs_off_warns_once_per_change_and_names_topic_and_key(caplog: pytest.LogCaptureFixture) -> None:
    admin = Appearing({"in": 3, "out": 6}, unanswered=(4,))
    slept: list[float] = []
    seen: list[str] = []

    def sleep(s: float) -> None:
        if not slept or seen[-1] != wait.reason:
            seen.append(wait.reason)
        slept.append(s)

    wait = TopicWait(lambda: admin, [("input.topics[0]", "in"), ("output.topic", "out")], "k:9092",
                     first_s=0.5, max_s=2.0, sleep=sleep)
    caplog.set_level(logging.INFO, logger="streamer")
    assert wait.wait(lambda: False) is True
    assert admin.asked == 6 and wait.reason == ""
    # back-offs of 0.5, 1, 2, 2, 2 s (in 0.1 s steps) between the six listings
    assert round(sum(slept), 6) == 7.5 and len(slept) == 75
    assert seen == ["topic 'in' (input.topics[0]) does not exist on k:9092; topic 'out' (output.topic) "
                    "does not exist on k:9092: waiting for it to be created",
                    "topic 'out' (output.topic) does not exist on k:9092: waiting for it to be created"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings  # both missing; 'out' alone (still, while the cluster did not answer)
    assert all("`streamer topics create` creates it" in w for w in warnings)
    assert "'out' exists: starting" in caplog.text


def test_a_stop_ends_the_wait_and_nothing_missing_returns_at_once() -> None:
    admin = Appearing({})
    slept: list[float] = []
    wait = TopicWait(lambda: admin, [("output.topic", "out")], "k:9092", sleep=slept.append)
    assert wait.wait(lambda: len(slept) >= 3) is False
    assert len(slept) == 3 and "'out' (output.topic)" in wait.reason
    there = TopicWait(lambda: Appearing({"out": 1}), [("output.topic", "out")], "k:9092", sleep=slept.append)
    assert there.wait(lambda: False) is True and len(slept) == 3


def test_create_each_says_what_became_of_every_topic() -> None:
    admin = FakeAdmin({"out": _Topic({0: _Partition(), 1: _Partition()})}, refuse={"bad": KafkaError.INVALID_REPLICATION_FACTOR})
    outcomes = create_each(admin, {"in": 3, "out": 3, "bad": 3}, replication_factor=1, config={"retention.ms": "60000"})
    assert [(o.topic, o.state, o.partitions) for o in outcomes] == [("in", "created", 3), ("out", "exists", 2),
                                                                     ("bad", "failed", 0)]
    assert outcomes[2].reason  # the broker's words
    assert admin.created == [("in", 3, 1)]
    again = create_each(admin, {"in": 3, "out": 3})
    assert [o.state for o in again] == ["exists", "exists"]
