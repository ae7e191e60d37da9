"""A wholly broken input on the real broker: held after N batches, not dead-lettered at full speed."""

from __future__ import annotations

import json
import re
import threading
import time

import pytest
from confluent_kafka import Producer

from streamer.config import with_overrides
from streamer.kafka.deadletter import header
from streamer.wiring.stream import build_processor
from tests.conftest import Topics, make_config, read_all, run_until_outputs
from tests.integration.test_observability_kafka import get, wait_for

pytestmark = pytest.mark.kafka
N, READ = 3, 10  # processing.broken_input_batches; input.consume_max_messages (a batch's most rows)
EVENTS = 100


def test_events_lacking_the_models_field_hold_the_input_and_a_fixed_config_scores_them(
        bootstrap: str, topics: Topics) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 10})
    for i in range(EVENTS):  # the features sit under another name: every row lacks 'features'
        producer.produce(topics.input, json.dumps({"event_id": f"e{i}", "feats": [0.01 * (i % 7)] * 32}).encode(),
                         f"k{i}".encode())
    assert producer.flush(30) == 0
    cfg = with_overrides(make_config(bootstrap, topics), input={"format": "json", "schema": None,
                                                                "consume_max_messages": READ},
                         processing={"broken_input_batches": N, "retry_backoff_ms": 100,
                                     "retry_backoff_max_ms": 400},
                         metrics={"enabled": True, "port": 0})
    processor = build_processor(cfg)
    thread = threading.Thread(target=processor.run, daemon=True)
    thread.start()
    try:
        assert processor.http is not None
        base = f"http://127.0.0.1:{processor.http.port}"
        wait_for(lambda: get(f"{base}/healthz")[0] == 503, 60, "/healthz to report the broken input")
        code, body = get(f"{base}/healthz")
        assert code == 503 and body.startswith(f"input broken: every row of the last {N} batches fails "
                                               "validation with: missing field 'features'"), body
        assert re.search(r"^streamer_input_broken\{[^}]*\} 1\.0$", get(f"{base}/metrics")[1], re.M)
        # The batches before the pattern was known are dead-lettered (their acks may trail the hold).
        wait_for(lambda: processor.stats.dead_letters.total() >= N - 1, 30, "the first batches' dead letters")
        time.sleep(1.0)
        held_at = processor.stats.dead_letters.total()
        assert N - 1 <= held_at <= (N - 1) * READ
        time.sleep(2.0)  # several probes (back-off 0.1 s doubling to 0.4 s): each still broken, held
        assert processor.stats.dead_letters.total() == held_at and get(f"{base}/healthz")[0] == 503
    finally:
        processor.stop()
        thread.join(60)
    assert not thread.is_alive()
    letters = read_all(bootstrap, topics.dlq)
    assert len(letters) == held_at and all(header(m.headers(), "stage") == "validate" for m in letters)
    # A restart with the config that names the events' field scores every held row, none lost.
    fixed = build_processor(with_overrides(cfg, input={"features_field": "feats"}, metrics={"enabled": False}))
    run_until_outputs(fixed, EVENTS - held_at)
    assert fixed.stats.predictions == EVENTS - held_at and fixed.stats.dead_letters.total() == 0
