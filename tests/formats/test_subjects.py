"""formats/subjects.py without a registry: subject names by strategy, credentials redacted; and
the avro-confluent framing on both encode paths (the columnar one and the reference) byte for byte."""

from __future__ import annotations

import json

import numpy as np
import pytest

from streamer.config import RegistryConfig, output_registry, with_overrides
from streamer.errors import ConfigError
from streamer.formats.avro import AvroCodec, load_schema
from streamer.formats.confluent import confluent_header
from streamer.formats.columnar.encode import PredictionEncoder
from streamer.formats.subjects import full_name, redact, subject_name
from tests.conftest import ROOT, EXAMPLE
from streamer.config_file import load_config

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
    assert "hunter2" not in redact(said, "scorer:hunter2")
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
