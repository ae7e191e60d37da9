"""Predictions and events in Confluent's wire format against a real Schema Registry (Apicurio's
Confluent-compatible API, tests/support/schema_registry.py) and the real broker.

Confluent's own deserializer reads the predictions; the prediction schema is registered under
each subject-name strategy, refused at start when incompatible with the subject (exit 2 through
the CLI), looked up when auto-register is off; predictions are keyed by entity when asked; a
registry behind basic auth is used with the credentials and never shows them; JSON Schema
events (Confluent's JSONSerializer) are checked against their registered schema; and a registry that
restarts (away, then up and empty until its schemas are back: 404 for an id it will hold) costs
no event: nothing is dead-lettered, every event is scored once.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka.schema_registry import Schema
from confluent_kafka.schema_registry._sync import schema_registry_client as sr_client
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from streamer.cli import main as cli
from streamer.commands.demo import produce_events, synthetic_events
from streamer.config import Config, RegistryConfig, Secret, with_overrides
from streamer.errors import EXIT_CONFIG, BrokerError, ConfigError
from streamer.formats.avro import AvroCodec, load_schema
from streamer.formats.configured import output_codec
from streamer.kafka.deadletter import header
from streamer.wiring.stream import build_processor
from tests.conftest import ROOT, Topics, make_config, read_all, run_until_outputs
from tests.support.schema_registry import SchemaRegistry
from tests.support.schema_registry import schema_registry as running_registry

pytestmark = pytest.mark.kafka

FEATURES = ROOT / "streamer" / "schemas" / "feature_event.avsc"
N = 200


def confluent_output(cfg: Config, registry: SchemaRegistry, **output: Any) -> Config:
    return with_overrides(cfg, output={"format": "avro-confluent", "registry": RegistryConfig(url=registry.url),
                                       **output})


def as_millis(record: dict[str, Any]) -> dict[str, Any]:
    return {k: round(v.timestamp() * 1000) if isinstance(v, datetime) else v for k, v in record.items()}


def feed(bootstrap: str, topics: Topics, n: int = N) -> list[dict[str, Any]]:
    events = synthetic_events(n, 32, seed=21)
    plain = AvroCodec(load_schema(FEATURES))
    produce_events(bootstrap, topics.input, [(str(e["entity_id"]).encode(), plain.encode(e)) for e in events])
    return events


def test_confluents_deserializer_reads_the_predictions_keyed_by_entity(
        bootstrap: str, topics: Topics, schema_registry: SchemaRegistry) -> None:
    cfg = confluent_output(make_config(bootstrap, topics), schema_registry, key="entity_id")
    events = feed(bootstrap, topics)
    processor = build_processor(cfg)
    run_until_outputs(processor, N)
    client = schema_registry.client()
    latest = client.get_latest_version(f"{topics.output}-value")  # TopicNameStrategy, the default
    messages = read_all(bootstrap, topics.output)
    assert len(messages) == N
    context = SerializationContext(topics.output, MessageField.VALUE)
    by_id = AvroDeserializer(client)  # reads the writer schema id in each value
    by_latest = AvroDeserializer(client, conf={"use.latest.version": True})
    ours = {e["event_id"]: e for e in events}
    for m in messages:
        value = m.value()
        assert value[0] == 0 and int.from_bytes(value[1:5], "big") == latest.schema_id
        prediction = by_id(value, context)  # timestamp-millis fields come as datetimes, as Confluent reads them
        assert prediction == by_latest(value, context)
        assert as_millis(prediction) == dict(processor.encoder.decode(value))
        assert m.key() == prediction["entity_id"].encode() == str(ours[prediction["event_id"]]["entity_id"]).encode()
        assert len(prediction["scores"]) == 1 and 0.0 <= prediction["scores"][0] <= 1.0
    registered = json.loads(latest.schema.schema_str)
    assert registered["name"] == "Prediction" and [f["name"] for f in registered["fields"]] == [
        f["name"] for f in load_schema(ROOT / "streamer" / "schemas" / "prediction.avsc")["fields"]]


@pytest.mark.parametrize(("strategy", "subject"), [("record", "{full}"), ("topic-record", "{topic}-{full}")])
def test_the_subject_follows_the_strategy(bootstrap: str, topics: Topics, schema_registry: SchemaRegistry,
                                          strategy: str, subject: str, tmp_path: Path) -> None:
    mine = json.loads((ROOT / "streamer" / "schemas" / "prediction.avsc").read_text()) | {
        "name": f"P{topics.group.replace('-', '')}", "namespace": "test.ns"}  # record subjects are global: one per test
    path = tmp_path / "prediction.avsc"
    path.write_text(json.dumps(mine))
    cfg = confluent_output(make_config(bootstrap, topics), schema_registry, subject_strategy=strategy)
    cfg = with_overrides(cfg, output={"schema": path})
    codec = output_codec(cfg)
    want = subject.format(full=f"test.ns.{mine['name']}", topic=topics.output)
    client = schema_registry.client()
    assert want in client.get_subjects()
    assert codec.prefix == b"\0" + client.get_latest_version(want).schema_id.to_bytes(4, "big")


def test_an_incompatible_prediction_schema_is_refused_at_start_with_exit_2(
        bootstrap: str, topics: Topics, schema_registry: SchemaRegistry, tmp_path: Path) -> None:
    client = schema_registry.client()
    subject = f"{topics.output}-value"
    other = {"type": "record", "name": "Prediction", "namespace": "streamer",
             "fields": [{"name": "event_id", "type": "long"}]}  # a reader of it cannot read ours
    client.register_schema(subject, Schema(json.dumps(other), "AVRO"))
    cfg = confluent_output(make_config(bootstrap, topics), schema_registry)
    with pytest.raises(ConfigError) as caught:
        output_codec(cfg)
    assert caught.value.key == "output.schema" and subject in str(caught.value)
    assert "BACKWARD" in str(caught.value)
    assert [v for v in client.get_versions(subject)] == [1]  # nothing registered over it
    # As a user meets it: `streamer run` exits 2 before reading anything.
    raw = yaml.safe_load((ROOT / "deploy" / "config" / "example.yaml").read_text())
    raw["kafka"]["bootstrap.servers"] = bootstrap
    raw["input"] |= {"topics": [topics.input], "group_id": topics.group,
                     "schema": str(ROOT / "streamer" / "schemas" / "feature_event.avsc")}
    raw["model"]["path"] = str(ROOT / "models" / "fraud_mlp.onnx")
    raw["output"] |= {"topic": topics.output, "schema": str(ROOT / "streamer" / "schemas" / "prediction.avsc"),
                      "format": "avro-confluent", "registry": {"url": schema_registry.url}}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert cli(["run", "--config", str(path)]) == EXIT_CONFIG


def test_without_auto_register_the_schema_must_be_registered_already(
        bootstrap: str, topics: Topics, schema_registry: SchemaRegistry) -> None:
    cfg = confluent_output(make_config(bootstrap, topics), schema_registry, auto_register=False)
    with pytest.raises(ConfigError) as caught:
        output_codec(cfg)
    assert caught.value.key == "output.auto_register"
    registered = output_codec(with_overrides(cfg, output={"auto_register": True})).prefix  # registers it
    assert output_codec(cfg).prefix == registered  # now looked up: the same id


def test_a_registry_behind_basic_auth_is_used_with_the_credentials_and_never_shows_them(
        bootstrap: str, topics: Topics) -> None:
    password = "pa55-do-not-print"
    with running_registry(users={"scorer": password}) as registry:
        good = RegistryConfig(url=registry.url, basic_auth_user_info=Secret(f"scorer:{password}"))
        cfg = with_overrides(make_config(bootstrap, topics), output={"format": "avro-confluent", "registry": good})
        assert output_codec(cfg).prefix[:1] == b"\0"
        wrong = replace(good, basic_auth_user_info=Secret(f"scorer:{password}-wrong"))
        with pytest.raises(BrokerError) as caught:
            output_codec(with_overrides(cfg, output={"registry": wrong}))
        assert "401" in str(caught.value) and password not in str(caught.value) and password not in repr(cfg)
        anonymous = replace(good, basic_auth_user_info=None)
        with pytest.raises(BrokerError, match="401"):
            output_codec(with_overrides(cfg, output={"registry": anonymous}))


@pytest.mark.timeout(300)
def test_a_registry_restart_loses_no_event(bootstrap: str, topics: Topics, monkeypatch: pytest.MonkeyPatch) -> None:
    """The registry goes away while events wait, comes back empty (404 for the id the events
    carry, as a registry still loading answers) and gets its schema back: every event is scored
    once, none is dead-lettered, and the processor never exits."""
    # The client's back-off between its own tries of a lookup is random (up to 1, 2, 4 s): none
    # here, so the registry's absence is seen at the first lookup, not seconds later.
    monkeypatch.setattr(sr_client, "full_jitter", lambda *_: 0.0)
    with running_registry() as registry:
        client = registry.client()
        serializer = AvroSerializer(client, FEATURES.read_text())
        events = synthetic_events(N, 32, seed=5)
        context = SerializationContext(topics.input, MessageField.VALUE)
        produce_events(bootstrap, topics.input, [(str(e["entity_id"]).encode(), serializer(e, context))
                                                 for e in events])
        schema_id = client.get_latest_version(f"{topics.input}-value").schema_id
        cfg = make_config(bootstrap, topics)
        cfg = replace(cfg, input=replace(cfg.input, format="avro-confluent",
                                         registry=RegistryConfig(url=registry.url)),
                      processing=replace(cfg.processing, retry_backoff_ms=200, retry_backoff_max_ms=1000))
        registry.stop()  # away before the processor's first lookup
        processor = build_processor(cfg)
        seen: list[str] = []
        restarted = threading.Event()

        def restart() -> None:
            registry.start()  # up, and empty: the id the events carry is a 404 now
            deadline = time.monotonic() + 30
            while "not found" not in " ".join(seen) and time.monotonic() < deadline:
                time.sleep(0.05)
            again = registry.client().register_schema(
                f"{topics.input}-value", Schema(FEATURES.read_text(), "AVRO"))
            seen.append(f"registered again as {again}")
            restarted.set()

        def until(stats: Any) -> bool:
            reason = processor.unhealthy_reason or ""
            if reason and reason not in seen:
                seen.append(reason)
                if len(seen) == 1:  # the registry is away: bring it back, empty
                    threading.Thread(target=restart, daemon=True).start()
            return stats.outputs >= N

        processor.run(until=until)
        assert restarted.is_set(), seen
        assert any("not found" in s for s in seen), seen  # the 404 was held, not believed
        assert f"registered again as {schema_id}" in seen, seen  # the same id: the events' schema is back
        assert processor.stats.predictions == N and processor.stats.dead_letters.total() == 0, seen
        assert len(read_all(bootstrap, topics.dlq)) == 0
        scored = [processor.encoder.decode(m.value())["event_id"] for m in read_all(bootstrap, topics.output)]
        assert sorted(scored) == sorted(str(e["event_id"]) for e in events)


def test_json_schema_confluent_events_are_checked_against_their_registered_schema(
        bootstrap: str, topics: Topics, schema_registry: SchemaRegistry) -> None:
    """Events written by Confluent's JSONSerializer are scored; events framed with the same id
    that break the schema (a feature sent as a string, a boolean, a missing id) are validate dead
    letters naming where, their original bytes kept."""
    from confluent_kafka.schema_registry.json_schema import JSONSerializer

    schema_text = (ROOT / "streamer" / "schemas" / "feature_event.schema.json").read_text()
    client = schema_registry.client()
    serializer = JSONSerializer(schema_text, client)
    context = SerializationContext(topics.input, MessageField.VALUE)
    events = [{**e, "features": [float(x) for x in e["features"]]} for e in synthetic_events(60, 32, seed=9)]
    good = [serializer(e, context) for e in events]
    head = good[0][:5]
    bad = [head + json.dumps({**events[0], "features": ["0.5"] + events[0]["features"][1:]}).encode(),
           head + json.dumps({**events[1], "features": [True] + events[1]["features"][1:]}).encode(),
           head + json.dumps({k: v for k, v in events[2].items() if k != "event_id"}).encode()]
    produce_events(bootstrap, topics.input, [(b"k", v) for v in good + bad])
    cfg = make_config(bootstrap, topics)
    cfg = with_overrides(cfg, input={"format": "json-schema-confluent", "schema": None,
                                     "registry": RegistryConfig(url=schema_registry.url)})
    processor = build_processor(cfg)
    run_until_outputs(processor, len(good) + len(bad))
    assert processor.stats.predictions == len(good)
    letters = read_all(bootstrap, topics.dlq)
    said = sorted(header(m.headers(), "exception.message") or "" for m in letters)
    assert {header(m.headers(), "stage") for m in letters} == {"validate"}
    assert sorted(s.split(": ")[1] for s in said) == ["$", "$.features[0]", "$.features[0]"], said
    assert all(s.startswith("JSON Schema: ") for s in said), said
    assert sorted(m.value() for m in letters) == sorted(bad)  # original bytes kept


def test_protobuf_confluent_events_are_scored_as_onnx_runtime_scores_their_features(
        bootstrap: str, topics: Topics, schema_registry: SchemaRegistry) -> None:
    """Events written by Confluent's ProtobufSerializer (the file's second message, so the message
    indexes matter) against the real registry are scored; bytes that do not parse are deserialize
    dead letters; every score equals ONNX Runtime's on the same features, bit for bit."""
    import numpy as np
    import onnxruntime as ort
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

    from tests.formats.test_protobuf import Purchase

    client = schema_registry.client()
    serializer = ProtobufSerializer(Purchase, client, {"use.deprecated.format": False})
    context = SerializationContext(topics.input, MessageField.VALUE)
    events = synthetic_events(80, 32, seed=4)
    good = [serializer(Purchase(event_id=str(e["event_id"]), entity_id=str(e["entity_id"]),
                                event_time=int(e["event_time"]), features=list(e["features"])), context)
            for e in events]  # type: ignore[arg-type, call-overload]
    bad = [good[0][:7] + b"\xff\xff\xff", good[1][:5] + b"\x02\x09" + good[1][7:]]  # garbage; no such message
    produce_events(bootstrap, topics.input, [(b"k", v) for v in good + bad])
    cfg = with_overrides(make_config(bootstrap, topics), input={
        "format": "protobuf-confluent", "schema": None, "registry": RegistryConfig(url=schema_registry.url)})
    processor = build_processor(cfg)
    run_until_outputs(processor, len(good) + len(bad))
    assert processor.stats.predictions == len(good)
    letters = read_all(bootstrap, topics.dlq)
    assert sorted(m.value() for m in letters) == sorted(bad)
    assert {header(m.headers(), "stage") for m in letters} == {"deserialize"}
    got = {p["event_id"]: p["scores"][0] for p in (processor.encoder.decode(m.value())
                                                   for m in read_all(bootstrap, topics.output))}
    session = ort.InferenceSession(str(cfg.model.path), providers=["CPUExecutionProvider"])
    x = np.asarray([e["features"] for e in events], np.float32)
    want = session.run(None, {session.get_inputs()[0].name: x})[0][:, 0]
    assert np.array([got[str(e["event_id"])] for e in events], np.float32).tobytes() == want.tobytes()
