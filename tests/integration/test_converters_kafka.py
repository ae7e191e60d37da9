"""Models made by the real converters, served through the processor on the real broker, every
prediction compared with ONNX Runtime run offline on the same rows (equal bits).

The models come from models/build_converter_models.py (scikit-learn + skl2onnx, LightGBM and
XGBoost + onnxmltools), trained and converted once per session (the ``converter_models`` fixture).
Feature-array events are JSON; the ColumnTransformer model reads a domain event
(streamer/schemas/purchase_event.avsc: a nested record, an enum, nullable unions with defaults, logical types);
the held-out ColumnTransformer (a boolean, an enum's strings, a nullable int with an imputer) reads
the same customer events as Avro, JSON and protobuf-confluent.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from streamer.commands.demo import produce_events
from streamer.config import Config, InputSource, OutputTarget, RegistryConfig, with_overrides
from streamer.errors import ConfigError
from streamer.formats.configured import input_codec
from streamer.formats.json_events import JsonCodec
from streamer.kafka.deadletter import header
from streamer.wiring.stream import build_processor
from tests.conftest import (
    ROOT,
    Topics,
    committed_offsets,
    end_offsets,
    make_config,
    read_all,
    run_until_outputs,
)

pytestmark = pytest.mark.kafka
PURCHASE = ROOT / "streamer" / "schemas" / "purchase_event.avsc"
LABEL_PROBS = {"label": "label", "probabilities": "probabilities"}


def contract_config(bootstrap: str, topics: Topics, model: Path, inputs: dict[str, Any] | None = None,
                    outputs: dict[str, Any] | None = None, fmt: str = "json", schema: Path | None = None,
                    include: tuple[str, ...] = (), max_size: int = 64) -> Config:
    """The example config serving ``model`` with these mappings (as YAML would give them)."""
    cfg = make_config(bootstrap, topics, MAX_BATCH_SIZE=str(max_size))
    return with_overrides(
        cfg, input={"format": fmt, "schema": schema},
        model={"path": model, "name": model.stem, "version": "1",
               "inputs": None if inputs is None else {k: InputSource.parse(v, k) for k, v in inputs.items()},
               "outputs": None if outputs is None else {k: OutputTarget.parse(v, k) for k, v in outputs.items()}},
        output={"include": include, "schema": None})  # None: the schema made from the mapping


def serve(bootstrap: str, topics: Topics, cfg: Config, events: list[dict[str, Any]],
          expect_predictions: int, encode: Callable[[dict[str, Any]], bytes] | None = None) -> dict[int, dict[str, Any]]:
    """Produce ``events`` (in one partition, in order; written by ``encode``, default the input
    codec), run the processor until each is handled, and return the predictions by the index of
    their event."""
    write = encode or input_codec(cfg.input).encode
    produce_events(bootstrap, topics.input, ((b"k", write(e)) for e in events))
    processor = build_processor(cfg)
    run_until_outputs(processor, len(events))
    assert processor.stats.predictions == expect_predictions, dict(processor.stats.dead_letters)
    offsets = {m.offset(): i for i, m in enumerate(read_all(bootstrap, topics.input))}
    out = {offsets[p["source_offset"]]: p for p in
           (dict(processor.encoder.decode(m.value())) for m in read_all(bootstrap, topics.output))}
    ends = {p: end for p, end in end_offsets(bootstrap, topics.input).items() if end}  # the one partition fed
    assert {p: committed_offsets(bootstrap, topics.group, topics.input)[p] for p in ends} == ends
    return out


def same_bits(got: Any, expected: np.ndarray) -> bool:
    """Equal values, floats compared by their bits at the expected type (float32 or float64)."""
    want = np.asarray(expected)
    have = np.asarray(got, dtype=want.dtype)
    if want.dtype.kind == "f":
        return have.shape == want.shape and bool((have.view(f"u{want.itemsize}") ==
                                                  want.view(f"u{want.itemsize}")).all())
    return have.shape == want.shape and bool((have == want).all())


@dataclass
class Case:
    model: str
    outputs: dict[str, Any] | None
    # prediction field -> its expected value per row, from the offline outputs (by output name)
    expect: Any = field(default=None)
    dtype: Any = np.float32


def _zipmap(maps: list[dict[Any, float]]) -> np.ndarray:
    return np.array([[m[c] for c in sorted(m)] for m in maps], np.float32)


CASES = [
    Case("logreg_zipmap", {"label": "output_label", "probabilities": "output_probability"},
         lambda o: {"label": o["output_label"], "probabilities": _zipmap(o["output_probability"])}),
    Case("logreg", LABEL_PROBS, lambda o: {"label": o["label"], "probabilities": o["probabilities"]}),
    Case("regressor", None, lambda o: {"scores": o["variable"]}),
    Case("scaler_gbm", {"label": "label", "fraud": {"output": "probabilities", "column": 1}},
         lambda o: {"label": o["label"], "fraud": o["probabilities"][:, 1]}),
    Case("float64_regressor", {"prediction": "variable"}, lambda o: {"prediction": o["variable"][:, 0]},
         np.float64),
    Case("lightgbm", LABEL_PROBS, lambda o: {"label": o["label"], "probabilities": o["probabilities"]}),
    Case("xgboost", LABEL_PROBS, lambda o: {"label": o["label"], "probabilities": o["probabilities"]}),
    Case("multiclass", LABEL_PROBS, lambda o: {"label": o["label"], "probabilities": o["probabilities"]}),
    Case("two_outputs", {"score": "score", "embedding": "embedding"},
         lambda o: {"score": o["score"][:, 0], "embedding": o["embedding"]}),
]


def offline(model: Path, feed: dict[str, np.ndarray]) -> dict[str, Any]:
    """ONNX Runtime on the CPU, all rows in one call, one thread per operator as the processor runs
    (model.intra_op_threads: 1). With more threads a tree ensemble sums its trees in an order that
    depends on the batch, and its last bits with it."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feed), strict=True))


@pytest.mark.parametrize("case", CASES, ids=[c.model for c in CASES])
def test_a_converter_model_is_served_as_onnx_runtime_scores_it_offline(
        bootstrap: str, topics: Topics, converter_models: Path, case: Case) -> None:
    model = converter_models / f"{case.model}.onnx"
    n = 300
    rng = np.random.default_rng(7)
    # float64 values in JSON: a float32 model takes them rounded to float32, a float64 one exactly
    x = rng.standard_normal((n, 4)) * 2
    events = [{"event_id": f"e{i}", "entity_id": f"c{i % 7}", "event_time": 1_700_000_000_000 + i,
               "features": x[i].tolist()} for i in range(n)]
    predictions = serve(bootstrap, topics, contract_config(bootstrap, topics, model, outputs=case.outputs),
                        events, n)
    expected = case.expect(offline(model, {"features": x.astype(case.dtype)}))
    assert len(predictions) == n
    for name, values in expected.items():
        got = [predictions[i][name] for i in range(n)]
        assert same_bits(got, np.asarray(values)), (name, got[:3], values[:3])
    assert {p["event_id"] for p in predictions.values()} == {e["event_id"] for e in events}
    if case.outputs is not None and "label" in case.outputs:  # the label is a label, not a score
        assert {type(p["label"]) for p in predictions.values()} == {int}


def purchase(i: int, rng: np.random.Generator) -> dict[str, Any]:
    return {"event_id": f"p{i}", "entity_id": f"card-{i % 11}", "event_time": 1_700_000_000_000 + i,
            "card": {"country": ["US", "DE", "FR", "BR"][i % 4], "issuer": None},
            "channel": ["web", "app", "pos"][i % 3], "amount": float(np.round(rng.lognormal(3, 1), 2)),
            "age_days": None if i % 10 == 0 else float(np.float32(rng.uniform(0, 2000))), "n_items": i % 9 + 1,
            "placed_on": 19_700}


def test_a_column_transformer_reads_domain_events_by_field(bootstrap: str, topics: Topics,
                                                          converter_models: Path) -> None:
    """Five inputs (two string categoricals, two floats, an int64) from a nested Avro record with
    an enum and nullable fields; a null without a fill is a validate dead letter naming the field;
    pass-through fields ride along."""
    model = converter_models / "column_transformer.onnx"
    rng = np.random.default_rng(3)
    events = [purchase(i, rng) for i in range(240)]
    bad = {17, 101, 202}
    for i in bad:
        events[i]["amount"] = None  # amount has no fill: these three are dead letters
    cfg = contract_config(bootstrap, topics, model, fmt="avro", schema=PURCHASE, include=("card.country", "amount"),
                          inputs={"country": "card.country", "channel": "channel", "amount": "amount",
                                  "age_days": {"field": "age_days", "fill": 0}, "n_items": "n_items"},
                          outputs={"label": "label", "fraud": {"output": "probabilities", "column": 1}})
    predictions = serve(bootstrap, topics, cfg, events, len(events) - len(bad))
    good = [i for i in range(len(events)) if i not in bad]
    assert sorted(predictions) == good
    feed = {
        "country": np.array([[events[i]["card"]["country"]] for i in good], object),
        "channel": np.array([[events[i]["channel"]] for i in good], object),
        "amount": np.array([[events[i]["amount"]] for i in good], np.float32),
        "age_days": np.array([[events[i]["age_days"] or 0.0] for i in good], np.float32),
        "n_items": np.array([[events[i]["n_items"]] for i in good], np.int64),
    }
    want = offline(model, feed)
    got = [predictions[i] for i in good]
    assert same_bits([p["label"] for p in got], want["label"])
    assert same_bits([p["fraud"] for p in got], want["probabilities"][:, 1])
    assert 0 < sum(p["label"] for p in got) < len(got)  # both classes occur: the test can tell them apart
    assert [(p["card_country"], p["amount"]) for p in got] == [
        (events[i]["card"]["country"], events[i]["amount"]) for i in good]
    letters = read_all(bootstrap, topics.dlq)
    assert len(letters) == len(bad)
    assert {header(m.headers(), "stage") for m in letters} == {"validate"}
    assert all("field 'amount' is null or missing" in (header(m.headers(), "exception.message") or "") for m in letters)


def test_json_fields_stacked_into_one_input_and_bad_values_dead_lettered(
        bootstrap: str, topics: Topics, converter_models: Path) -> None:
    """Four named JSON fields stacked into the [N, 4] input; a value that is not exactly a number
    (a string, a double beyond float32's range, null without a fill, an integer past 2^24) is a
    validate dead letter naming its field, and the rest of the batch is scored."""
    model = converter_models / "logreg.onnx"
    rng = np.random.default_rng(5)
    x = rng.standard_normal((120, 4)).astype(np.float32)
    events = [{"event_id": f"j{i}", "entity_id": "c", "event_time": 1_700_000_000_000 + i,
               **{f"f{k}": float(x[i, k]) for k in range(4)}} for i in range(len(x))]
    poison = {3: ("f1", "0.5"), 40: ("f0", 1e39), 77: ("f3", None), 90: ("f2", 2 ** 40 + 1)}
    for i, (name, value) in poison.items():
        events[i][name] = value
    cfg = contract_config(bootstrap, topics, model, inputs={"features": ["f0", "f1", "f2", "f3"]},
                          outputs=LABEL_PROBS)
    predictions = serve(bootstrap, topics, cfg, events, len(events) - len(poison))
    good = [i for i in range(len(events)) if i not in poison]
    want = offline(model, {"features": x[good]})
    assert same_bits([predictions[i]["probabilities"] for i in good], want["probabilities"])
    letters = {JsonCodec().decode(m.value())["event_id"]: m for m in read_all(bootstrap, topics.dlq)}
    assert set(letters) == {f"j{i}" for i in poison}  # the original bytes, as sent
    for i, (name, _) in poison.items():
        m = letters[f"j{i}"]
        assert header(m.headers(), "stage") == "validate"
        assert f"field '{name}'" in (header(m.headers(), "exception.message") or ""), header(m.headers(), "exception.message")


@pytest.mark.parametrize(("inputs", "outputs", "key"), [
    (None, None, "model.outputs"),  # two outputs, none mapped: nothing is picked silently
    ({"features": "features", "extra": "x"}, LABEL_PROBS, "model.inputs.extra"),
    (None, {"label": "label", "p": "no_such_output"}, "model.outputs.p"),
    ({"features": ["a", "b"]}, LABEL_PROBS, "model.inputs.features"),  # 2 fields for a [N, 4] input
])
def test_a_contract_that_does_not_fit_the_model_is_refused_at_start(
        bootstrap: str, topics: Topics, converter_models: Path, inputs: Any, outputs: Any, key: str) -> None:
    cfg = contract_config(bootstrap, topics, converter_models / "logreg.onnx", inputs=inputs, outputs=outputs)
    with pytest.raises(ConfigError) as err:
        build_processor(cfg)
    assert err.value.key == key, err.value


TIERS = ["BASIC", "PLUS", "PRO"]
CUSTOMER_AVRO = {"type": "record", "name": "Customer", "namespace": "shop", "fields": [
    {"name": "event_id", "type": "string"}, {"name": "entity_id", "type": "string"},
    {"name": "event_time", "type": "long"}, {"name": "is_online", "type": "boolean"},
    {"name": "tier", "type": {"type": "enum", "name": "Tier", "symbols": TIERS}},
    {"name": "n_orders", "type": ["null", "long"], "default": None}]}


def customer_class() -> Any:
    """customer.proto: the same event as a proto3 message, ``n_orders`` an ``optional int64``."""
    t = descriptor_pb2.FieldDescriptorProto
    fd = descriptor_pb2.FileDescriptorProto(name="customer.proto", package="shop", syntax="proto3")
    tier = fd.enum_type.add(name="Tier")
    for number, name in enumerate(TIERS):
        tier.value.add(name=name, number=number)
    m = fd.message_type.add(name="Customer")
    m.oneof_decl.add(name="_n_orders")  # the synthetic oneof protoc writes for `optional`
    for number, (name, kind) in enumerate([("event_id", t.TYPE_STRING), ("entity_id", t.TYPE_STRING),
                                           ("event_time", t.TYPE_INT64), ("is_online", t.TYPE_BOOL)], 1):
        m.field.add(name=name, number=number, type=kind, label=t.LABEL_OPTIONAL)
    m.field.add(name="tier", number=5, type=t.TYPE_ENUM, type_name=".shop.Tier", label=t.LABEL_OPTIONAL)
    m.field.add(name="n_orders", number=6, type=t.TYPE_INT64, label=t.LABEL_OPTIONAL, oneof_index=0,
                proto3_optional=True)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Customer"))


def customer(i: int, rng: np.random.Generator) -> dict[str, Any]:
    return {"event_id": f"c{i}", "entity_id": f"cust-{i % 13}", "event_time": 1_700_000_000_000 + i,
            "is_online": bool(rng.random() < 0.4), "tier": TIERS[int(rng.integers(0, 3))],
            "n_orders": None if rng.random() < 0.15 else int(rng.integers(0, 30))}


@pytest.mark.parametrize("fmt", ["avro", "json", "protobuf-confluent"])
def test_the_held_out_column_transformer_scores_bools_enums_and_nullable_ints_as_onnx_runtime_does(
        bootstrap: str, topics: Topics, converter_models: Path, tmp_path: Path, request: pytest.FixtureRequest,
        fmt: str) -> None:
    """A boolean into the model's int64 input (true = 1), an enum's symbol into its string input and
    a nullable int into its float input, a null taking the fill the manifest records (the value the
    model's imputer puts in for NaN): every prediction equals ONNX Runtime offline on the rows as
    the model was trained to take them (NaN for a null), bit for bit, with no dead letter."""
    model = converter_models / "bool_enum_nullable.onnx"
    fill = json.loads((converter_models / "manifest.json").read_text())["models"]["bool_enum_nullable"]["fills"]
    rng = np.random.default_rng(11)
    events = [customer(i, rng) for i in range(240)]
    assert {e["is_online"] for e in events} == {True, False} and {e["tier"] for e in events} == set(TIERS)
    assert 10 < sum(e["n_orders"] is None for e in events) < 100
    schema = tmp_path / "customer.avsc"
    schema.write_text(json.dumps(CUSTOMER_AVRO))
    inputs = {"is_online": "is_online", "tier": "tier", "n_orders": {"field": "n_orders", "fill": fill["n_orders"]}}
    cfg = contract_config(bootstrap, topics, model, inputs=inputs, outputs=LABEL_PROBS,
                          fmt="avro" if fmt == "avro" else "json", schema=schema if fmt == "avro" else None)
    encode: Callable[[dict[str, Any]], bytes] | None = None
    if fmt == "protobuf-confluent":  # written by Confluent's serializer; a null is a field not sent
        registry = request.getfixturevalue("schema_registry")
        cfg = with_overrides(cfg, input={"format": fmt, "registry": RegistryConfig(url=registry.url)})
        message = customer_class()
        serializer = ProtobufSerializer(message, registry.client(), {"use.deprecated.format": False})
        context = SerializationContext(topics.input, MessageField.VALUE)
        encode = lambda e: serializer(message(**{k: v for k, v in e.items() if v is not None}), context)  # noqa: E731
    predictions = serve(bootstrap, topics, cfg, events, len(events), encode)
    assert sorted(predictions) == list(range(len(events)))
    want = offline(model, {
        "is_online": np.array([[e["is_online"]] for e in events], np.int64),
        "tier": np.array([[e["tier"]] for e in events], object),
        "n_orders": np.array([[np.nan if e["n_orders"] is None else e["n_orders"]] for e in events], np.float32),
    })
    got = [predictions[i] for i in range(len(events))]
    assert same_bits([p["label"] for p in got], want["label"])
    assert same_bits([p["probabilities"] for p in got], want["probabilities"])
    assert 0 < sum(p["label"] for p in got) < len(got)  # both classes occur: the test can tell them apart
    assert read_all(bootstrap, topics.dlq) == []
