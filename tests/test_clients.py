"""Client helpers that need no broker: which errors are worth asking again."""

from __future__ import annotations

from confluent_kafka import KafkaError

from streamer.kafka.clients import TRANSIENT_ERRORS, is_transient


def test_transient_errors_are_the_coordinator_and_connection_ones() -> None:
    assert KafkaError.COORDINATOR_LOAD_IN_PROGRESS in TRANSIENT_ERRORS
    assert is_transient(KafkaError(KafkaError.NOT_COORDINATOR))
    assert is_transient(KafkaError(KafkaError.UNKNOWN, retriable=True))
    assert not is_transient(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
