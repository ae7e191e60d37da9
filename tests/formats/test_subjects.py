"""formats/subjects.py without a registry: subject names by strategy, credentials redacted, a
registry that never answers failing within its timeout; and the avro-confluent framing on both
encode paths (the columnar one and the reference) byte for byte."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from confluent_kafka.schema_registry._sync import schema_registry_client as sr_client

from streamer.config import RegistryConfig, Secret, output_registry, with_overrides
from streamer.config_file import load_config
from streamer.errors import BrokerError, ConfigError
from streamer.formats.avro import AvroCodec, load_schema
from streamer.formats.columnar.encode import PredictionEncoder
from streamer.formats.confluent import confluent_header
from streamer.formats.subjects import (
    REGISTRY_RETRIES,
    confluent_output_codec,
    full_name,
    redact,
    subject_name,
)
from tests.conftest import EXAMPLE, ROOT
from tests.support.registry import SilentRegistry

PREDICTION = ROOT / "streamer" / "schemas" / "prediction.avsc"


def test_subject_names_follow_confluents_strategies() -> None:
    schema = {"type": "record", "name": "Prediction", "namespace": "streamer", "fields": []}
    assert subject_name("topic", "scores", schema) == "scores-value"
    assert subject_name("record", "scores", schema) == "streamer.Prediction"
    assert subject_name("topic-record", "scores", schema) == "scores-streamer.Prediction"
    assert full_name({"name": "a.b.C", "namespace": "ignored"}) == "a.b.C"
    assert full_name({"name": "C"}) == "C"


def test_credentials_are_redacted_from_urls_and_messages() -> None:
    said = "failed: ConnectError('http://scorer:hunter2@registry:8081/subjects') auth scorer:hunter2"
    assert "hunter2" not in redact(said, Secret("scorer:hunter2"))
    assert redact("https://u:p@h/x", None) == "https://***@h/x"


def test_avro_confluent_output_needs_a_registry_and_borrows_the_inputs() -> None:
    cfg = load_config(EXAMPLE, env={})
    with pytest.raises(ConfigError) as caught:
        with_overrides(cfg, output={"format": "avro-confluent"})
    assert caught.value.key == "output.registry"
    shared = RegistryConfig(url="http://127.0.0.1:8081")
    borrowed = with_overrides(cfg, input={"format": "avro-confluent", "registry": shared},
                              output={"format": "avro-confluent"})
    assert output_registry(borrowed) == shared
    with pytest.raises(ConfigError, match="registry.not_found_retry_ms"):
        RegistryConfig(url="http://x", not_found_retry_ms=-1)
    for bad in (0, -5):
        with pytest.raises(ConfigError) as caught:
            RegistryConfig(url="http://x", timeout_ms=bad)
        assert caught.value.key == "registry.timeout_ms" and f"got {bad}" in caught.value.reason
    with pytest.raises(ConfigError, match=r"'registry\.timeout_ms': expected an integer, got float"):
        RegistryConfig(url="http://x", timeout_ms=2.5)  # type: ignore[arg-type]


def test_a_registry_that_never_answers_fails_within_its_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """A registry that accepts connections and never answers (wedged in a restart) fails start-up
    with a BrokerError naming registry.timeout_ms, its credentials unsaid, instead of a hang."""
    # The client's back-off between its tries is random (up to 1, 2, 4 s); none here, so the
    # time taken is the timeouts' alone.
    monkeypatch.setattr(sr_client, "full_jitter", lambda *_: 0.0)
    silent = SilentRegistry()
    try:
        reg = RegistryConfig(url=silent.url, basic_auth_user_info=Secret("scorer:hunter2"), timeout_ms=200)
        cfg = with_overrides(load_config(EXAMPLE, env={}), output={"format": "avro-confluent", "registry": reg})
        started = time.monotonic()
        with pytest.raises(BrokerError) as caught:
            confluent_output_codec(cfg, load_schema(PREDICTION))
        took = time.monotonic() - started
        tries = REGISTRY_RETRIES + 1
        assert silent.wait_for_connections(tries, timeout_s=5), f"{silent.accepted} connections, {tries} expected"
    finally:
        silent.close()
    said = str(caught.value)
    assert f"{silent.url} did not answer within registry.timeout_ms (200 ms), asked {tries} times" in said
    assert "testing compatibility" in said and "hunter2" not in said
    assert tries * 0.2 <= took < tries * 0.2 + 5  # each try waited its timeout, and no more


def test_the_columnar_encoder_frames_values_as_the_reference_does() -> None:
    schema = load_schema(PREDICTION)
    header = confluent_header(4711)
    reference = AvroCodec(schema, prefix=header)
    fast = PredictionEncoder.compile(json.loads(reference.schema_json), header)
    assert fast is not None
    scores = np.array([[0.25], [0.75]], np.float32)
    got = fast.encode(["e1", "e2"], ["a", "b"], scores, "m", "1", "t", [0, 1], [5, 6], [100, 200], 300)
    for i, value in enumerate(got):
        assert value is not None and value[:5] == b"\0\0\0\x12\x67"
        record = reference.decode(value)
        assert record["event_id"] == f"e{i + 1}" and record["scores"] == [float(scores[i, 0])]
        assert reference.encode(record) == value
    with pytest.raises(Exception, match="framing"):
        reference.decode(got[0][5:])  # type: ignore[index]


def test_registry_settings_that_cannot_work_are_refused_by_key() -> None:
    from streamer.config import Secret

    cfg = load_config(EXAMPLE, env={})
    with pytest.raises(ConfigError) as caught:
        with_overrides(cfg, output={"registry": RegistryConfig(url="http://127.0.0.1:8081")})
    assert caught.value.key == "output.registry" and "'avro'" in caught.value.reason
    with pytest.raises(ConfigError) as bad:
        RegistryConfig(url="http://x", basic_auth_user_info=Secret("only-a-password"))
    assert bad.value.key == "registry.basic_auth_user_info" and "only-a-password" not in str(bad.value)
