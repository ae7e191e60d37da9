"""librdkafka's expected start-up retries are INFO, a real problem still warns (kafka/retrylog.py)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError

from streamer.config import with_overrides
from streamer.config_file import load_config
from streamer.kafka.clients import KafkaClients, consume_batch
from streamer.kafka.offsets import OffsetTracker
from streamer.kafka.retrylog import STARTUP_GRACE_S, LibrdkafkaLog, retry_level
from streamer.kafka.side import open_kafka
from streamer.testing import FakeClock
from tests.support.fakes import FakeConsumer, FakeProducer

ROOT = Path(__file__).resolve().parents[2]
EARLY, LATE = 5.0, STARTUP_GRACE_S + 300.0
REFUSED = ("[thrd:127.0.0.1:9092/bootstrap]: 127.0.0.1:9092/bootstrap: Connect to ipv4#127.0.0.1:9092 "
           "failed: Connection refused (after 0ms in state CONNECT)")


@pytest.mark.parametrize("code", [KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.NOT_COORDINATOR,
                                  KafkaError.COORDINATOR_NOT_AVAILABLE])
def test_a_coordinator_loading_or_moving_is_info_at_any_time(code: int) -> None:
    assert retry_level(KafkaError(code), EARLY) == logging.INFO
    assert retry_level(KafkaError(code), LATE) == logging.INFO


@pytest.mark.parametrize("code", [KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE])
def test_an_unreachable_broker_is_info_while_starting_and_a_warning_later(code: int) -> None:
    assert retry_level(KafkaError(code), EARLY) == logging.INFO
    assert retry_level(KafkaError(code), LATE) == logging.WARNING


@pytest.mark.parametrize("code", [KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError._MSG_TIMED_OUT,
                                  KafkaError.SASL_AUTHENTICATION_FAILED])
def test_a_real_problem_warns_even_at_start(code: int) -> None:
    assert retry_level(KafkaError(code), 0.0) == logging.WARNING


def test_librdkafkas_own_log_lines_are_lowered_only_when_expected(caplog: pytest.LogCaptureFixture) -> None:
    since = [EARLY]
    sink = LibrdkafkaLog(logging.getLogger("librdkafka"), since_start=lambda: since[0])
    caplog.set_level(logging.DEBUG, logger="librdkafka")

    def logged(level: int, facility: str, text: str) -> int:
        caplog.clear()
        sink.log(level, "%s [%s] %s", facility, "rdkafka#consumer-1", text)  # confluent-kafka's call
        [record] = caplog.records
        assert text in record.getMessage()
        return record.levelno

    assert logged(logging.ERROR, "FAIL", REFUSED) == logging.INFO
    assert logged(logging.WARNING, "OFFSET", "Failed to fetch committed offsets for 3 partition(s) in group "
                                             "\"g\": Broker: Coordinator load in progress") == logging.INFO
    assert logged(logging.WARNING, "COMMITFAIL", "Offset commit failed: Broker: Not coordinator") == logging.INFO
    assert logged(logging.ERROR, "FAIL", "SASL authentication error: Authentication failed") == logging.ERROR
    assert logged(logging.DEBUG, "FAIL", REFUSED) == logging.DEBUG  # never raised
    since[0] = LATE
    assert logged(logging.ERROR, "FAIL", REFUSED) == logging.ERROR  # an outage, not a start


def test_the_producers_error_callback_and_the_consumers_error_events_use_the_levels(
        caplog: pytest.LogCaptureFixture) -> None:
    cfg = load_config(ROOT / "deploy" / "config" / "example.yaml",
                      env={"KAFKA_BOOTSTRAP": "fake:9092", "INPUT_TOPIC": "t", "OUTPUT_TOPIC": "o", "GROUP_ID": "g"})
    cfg = with_overrides(cfg, input={"format": "json", "schema": None})
    callbacks: list[Callable[[KafkaError], None]] = []

    def producer(error_cb: Callable[[KafkaError], None], **_: Any) -> FakeProducer:
        callbacks.append(error_cb)
        return FakeProducer()

    consumer = FakeConsumer()
    clients = KafkaClients(consumer=lambda **kw: consumer.configure(**kw), producer=producer,
                           ensure_topic=lambda topic, like: None)
    open_kafka(cfg, clients)(OffsetTracker(), FakeClock(), None, None, lambda: None)
    caplog.set_level(logging.DEBUG, logger="streamer")
    callbacks[0](KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS))
    callbacks[0](KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    assert [(r.levelno, r.getMessage().split(":")[0]) for r in caplog.records] == [
        (logging.INFO, "producer"), (logging.WARNING, "producer")]

    caplog.clear()
    events = ErrorEvents(KafkaError(KafkaError.NOT_COORDINATOR), KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    assert consume_batch(events, 10, 0.0) == []
    assert [r.levelno for r in caplog.records] == [logging.INFO, logging.WARNING]


class ErrorEvents:
    """A consumer whose next consume returns these error events (as librdkafka hands them over)."""

    def __init__(self, *errors: KafkaError) -> None:
        self.events = [Event(e) for e in errors]

    def poll(self, timeout: float) -> Event | None:
        return self.events.pop(0) if self.events else None

    def consume(self, n: int, timeout: float) -> list[Event]:
        taken, self.events = self.events[:n], self.events[n:]
        return taken


class Event:
    def __init__(self, err: KafkaError) -> None:
        self._err = err

    def error(self) -> KafkaError:
        return self._err
