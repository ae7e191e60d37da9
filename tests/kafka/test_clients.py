"""Client helpers that need no broker: which errors are worth asking again."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException

from streamer.config_file import load_config
from streamer.errors import BrokerError
from streamer.kafka import clients
from streamer.kafka.clients import TRANSIENT_ERRORS, is_transient

ROOT = Path(__file__).resolve().parents[2]


def test_transient_errors_are_the_coordinator_and_connection_ones() -> None:
    assert KafkaError.COORDINATOR_LOAD_IN_PROGRESS in TRANSIENT_ERRORS
    assert is_transient(KafkaError(KafkaError.NOT_COORDINATOR))
    assert is_transient(KafkaError(KafkaError.UNKNOWN, retriable=True))
    assert not is_transient(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))


def test_start_up_waits_for_a_cluster_that_does_not_answer_yet(monkeypatch: pytest.MonkeyPatch) -> None:
    """Broker transport failures are waited out (bounded); any other refusal ends start-up at once."""
    answers: list[object] = [KafkaError(KafkaError._TRANSPORT), KafkaError(KafkaError._TRANSPORT), 1_114_124]

    def ensure_like(*_: object) -> int:
        answer = answers.pop(0)
        if isinstance(answer, KafkaError):
            try:
                raise KafkaException(answer)
            except KafkaException as exc:
                raise BrokerError(f"cannot create topic: {answer}") from exc
        return int(answer)  # type: ignore[call-overload]

    monkeypatch.setattr(clients, "ensure_like", ensure_like)
    monkeypatch.setattr(clients, "make_admin", lambda cfg: None)
    monkeypatch.setattr(clients.time, "sleep", lambda s: None)
    cfg = load_config(ROOT / "deploy" / "config" / "example.yaml", env={"KAFKA_BOOTSTRAP": "x:1",
                      "INPUT_TOPIC": "t", "OUTPUT_TOPIC": "o", "GROUP_ID": "g"})
    assert clients.ensure_topic(cfg, "t.dlq", "t", timeout_s=0.0) == 1_114_124 and not answers
    answers[:] = [KafkaError(KafkaError._TRANSPORT)]
    with pytest.raises(BrokerError, match="cannot create topic"):
        clients.ensure_topic(cfg, "t.dlq", "t", timeout_s=0.0, wait_s=0.0)  # the wait is bounded
    answers[:] = [KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED), 1]
    with pytest.raises(BrokerError):
        clients.ensure_topic(cfg, "t.dlq", "t", timeout_s=0.0)  # denied: no waiting
    assert answers == [1]


class Unanswered:
    """An admin client whose metadata requests fail as an away cluster's do."""

    def __init__(self, code: int = KafkaError._TRANSPORT) -> None:
        self.code, self.asked = code, 0

    def list_topics(self, timeout: float) -> object:
        self.asked += 1
        raise KafkaException(KafkaError(self.code))


def test_the_start_up_wait_names_the_address_and_honours_a_stop(monkeypatch: pytest.MonkeyPatch,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    from streamer.errors import StopRequested

    admin = Unanswered()
    caplog.set_level(logging.INFO, logger="streamer")  # a cluster still starting: INFO (kafka/retrylog.py)
    monkeypatch.setattr(clients, "make_admin", lambda cfg: admin)
    monkeypatch.setattr(clients.time, "sleep", lambda s: None)
    cfg = load_config(ROOT / "deploy" / "config" / "example.yaml", env={"KAFKA_BOOTSTRAP": "kafka.internal:9092",
                      "INPUT_TOPIC": "t", "OUTPUT_TOPIC": "o", "GROUP_ID": "g"})
    with pytest.raises(StopRequested, match="kafka.internal:9092"):
        clients.check_topics(cfg, timeout_s=0.0, stopping=lambda: admin.asked >= 2)
    assert admin.asked == 2
    assert "waiting for the cluster at kafka.internal:9092 (kafka.bootstrap.servers)" in caplog.text
    with pytest.raises(BrokerError, match=r"the cluster at kafka.internal:9092 \(kafka.bootstrap.servers\)"):
        clients.check_topics(cfg, timeout_s=0.0, wait_s=0.0)
    denied = Unanswered(KafkaError.CLUSTER_AUTHORIZATION_FAILED)
    monkeypatch.setattr(clients, "make_admin", lambda cfg: denied)
    with pytest.raises(BrokerError, match="security settings"):
        clients.check_topics(cfg, timeout_s=0.0)  # refused outright: no waiting
    assert denied.asked == 1
