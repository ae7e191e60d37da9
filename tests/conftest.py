"""Shared fixtures: one real Kafka broker per test session, fresh topics per test, topic readers."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from streamer.broker import create_topics, kafka_cluster
from streamer.config import Config, load_config

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "deploy" / "config" / "example.yaml"


@pytest.fixture(scope="session")
def bootstrap() -> Iterator[str]:
    """A real broker: KAFKA_BOOTSTRAP, else Docker, else Apache Kafka's jars. Never a fake.

    If none can be had the fixture raises, and every Kafka test errors loudly.
    """
    with kafka_cluster() as address:
        yield address


@dataclass(frozen=True)
class Topics:
    input: str
    output: str
    dlq: str
    group: str


@pytest.fixture
def topics(bootstrap: str) -> Topics:
    """Fresh input (3 partitions), output (3) and dead-letter (1) topics and a fresh group id."""
    run = uuid.uuid4().hex[:8]
    t = Topics(f"features-{run}", f"predictions-{run}", f"features-{run}.dlq", f"group-{run}")
    create_topics(bootstrap, {t.input: 3, t.output: 3, t.dlq: 1})
    return t


def make_config(bootstrap: str, topics: Topics, **env: str) -> Config:
    """The shipped example config pointed at the test broker and topics."""
    return load_config(EXAMPLE, env={"KAFKA_BOOTSTRAP": bootstrap, "INPUT_TOPIC": topics.input,
                                     "OUTPUT_TOPIC": topics.output, "GROUP_ID": topics.group,
                                     **env})


def read_all(bootstrap: str, topic: str, timeout_s: float = 60.0) -> list[Any]:
    """Every message of ``topic`` up to its end offsets as of now, read_committed."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in parts}
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        remaining = {p for p, end in ends.items() if end > 0}
        out: list[Any] = []
        deadline = time.monotonic() + timeout_s
        while remaining:
            if time.monotonic() > deadline:
                raise AssertionError(f"reading {topic}: partitions {sorted(remaining)} not read "
                                     f"to their end offsets {ends} in {timeout_s}s")
            for m in consumer.consume(1000, 0.2):
                if m.error():
                    raise AssertionError(f"reading {topic}: {m.error()}")
                out.append(m)
            # The position, not the last message: transactional topics end in commit markers,
            # which take an offset and are never delivered.
            for tp in consumer.position([TopicPartition(topic, p) for p in remaining]):
                if tp.offset >= ends[tp.partition]:
                    remaining.discard(tp.partition)
        return out
    finally:
        consumer.close()


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in parts}
    finally:
        consumer.close()


def committed_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets (-1001 where none), read with the admin client."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    admin = AdminClient({"bootstrap.servers": bootstrap})
    parts = admin.list_topics(topic, timeout=10).topics[topic].partitions
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in parts])
    result = admin.list_consumer_group_offsets([req])[group].result(timeout=30)
    return {tp.partition: tp.offset for tp in result.topic_partitions}
