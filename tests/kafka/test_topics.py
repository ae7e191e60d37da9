"""Listing partitions and creating topics, against a fake admin client."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import NewTopic

from streamer.errors import BrokerError
from streamer.kafka.topics import create, ensure_like, partitions


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
