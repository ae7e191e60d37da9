"""Stages with the fast path agree with the per-row reference on whole chunks: the same rows in the
same order with the same columns, and the same dead letters, for every input format."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from hypothesis import given, settings
from hypothesis import strategies as st

from streamer.config import InputConfig, RegistryConfig
from streamer.errors import InferenceError
from streamer.formats.avro import AvroCodec, load_schema
from streamer.formats.codec import Codec
from streamer.formats.confluent import ConfluentAvroCodec
from streamer.formats.json_events import JsonCodec
from streamer.model.contract import Contract
from streamer.model.signature import Columns, Signature
from streamer.pipeline.records import Messages, ModelId, Rows, Stamp
from streamer.pipeline.stages import Stages, stamp_fields
from streamer.testing import matrix_signature
from tests.support.fakes import FakeMessage

ROOT = Path(__file__).resolve().parents[2]
FEATURES = load_schema(ROOT / "streamer" / "schemas" / "feature_event.avsc")
PREDICTION = AvroCodec(load_schema(ROOT / "streamer" / "schemas" / "prediction.avsc"))
N = 32
CONTRACT = Contract.of(matrix_signature(N))  # one float32 [N, 32] input fed from the array field
# The same event with the fields in another order: a second writer schema for avro-confluent.
REORDERED = {**FEATURES, "fields": list(reversed(FEATURES["fields"]))}


def event(i: int, **over: Any) -> dict[str, Any]:
    return {"event_id": f"e{i}", "entity_id": f"a{i % 7}", "event_time": 1_764_417_600_000 + i,
            "features": [float(i % 5) - 2.0] * N, **over}


def inputs(fmt: str) -> tuple[Codec, InputConfig, Any]:
    """The decoder, its config, and a function that writes one event (or raw bytes) for it."""
    if fmt == "json":
        return (JsonCodec(), InputConfig(topics=("t",), group_id="g", format="json"),
                lambda e, alt=False: json.dumps(e).encode())
    schema_path = ROOT / "streamer" / "schemas" / "feature_event.avsc"
    if fmt == "avro":
        codec = AvroCodec(FEATURES)
        return codec, InputConfig(topics=("t",), group_id="g", schema=schema_path), \
            lambda e, alt=False: codec.encode(e)
    reg = SchemaRegistryClient.new_client({"url": "mock://stages"})
    ids = [reg.register_schema("s", Schema(json.dumps(s), "AVRO")) for s in (FEATURES, REORDERED)]
    writers = [AvroCodec(FEATURES), AvroCodec(REORDERED)]

    def write(e: dict[str, Any], alt: bool = False) -> bytes:
        return b"\0" + ids[alt].to_bytes(4, "big") + writers[alt].encode(e)

    cfg = InputConfig(topics=("t",), group_id="g", schema=schema_path, format="avro-confluent",
                      registry=RegistryConfig(url="mock://stages"))
    return ConfluentAvroCodec(reg, "s", not_found_retry_s=0), cfg, write  # a 404 believed at once: the paths compared


def messages(fmt: str, kinds: list[str]) -> tuple[Messages, Codec, InputConfig]:
    decoder, cfg, write = inputs(fmt)
    values: list[bytes | None] = []
    for i, kind in enumerate(kinds):
        good = write(event(i))
        values.append({
            "good": good, "alt": write(event(i), True), "tombstone": None, "short": good[:-3],
            "wide": write(event(i, features=[1.0] * (N + 1))), "nan": write(event(i, features=[float("nan")] * N)),
            "unknown-id": b"\0\0\0\3\x99" + good[5:] if fmt == "avro-confluent" else good[:1],
            "trailing": good + b"\0",
        }[kind])
    parts = [i % 3 for i in range(len(kinds))]
    return Messages.of([FakeMessage("t", p, 100 + i, v) for i, (p, v) in enumerate(zip(parts, values))]), decoder, cfg


def said(error: Exception) -> str:
    """An error's message without object addresses (fastavro names its BytesIO)."""
    return re.sub(r" at 0x[0-9a-f]+", "", str(error))


def same_rows(a: Rows, b: Rows) -> None:
    assert a.source.offsets.tolist() == b.source.offsets.tolist()
    assert a.source.partitions.tolist() == b.source.partitions.tolist()
    assert a.source.items == b.source.items
    assert (a.event_ids, a.entity_ids, a.event_times.tolist()) == (b.event_ids, b.entity_ids, b.event_times.tolist())
    x, y = a.features.arrays["features"], b.features.arrays["features"]
    assert x.dtype == y.dtype == np.float32 and x.tobytes() == y.tobytes()


KINDS = ["good", "alt", "tombstone", "short", "wide", "nan", "unknown-id", "trailing"]


@pytest.mark.parametrize("fmt", ["avro", "json", "avro-confluent"])
@settings(max_examples=60, deadline=None)
@given(kinds=st.lists(st.sampled_from(KINDS), max_size=30))
def test_a_mixed_chunk_decodes_as_the_reference_decodes_it(fmt: str, kinds: list[str]) -> None:
    chunk, decoder, cfg = messages(fmt, kinds)
    fast, slow = Stages(decoder, PREDICTION, cfg, CONTRACT), Stages(decoder, PREDICTION, cfg, CONTRACT, fast=False)
    assert fast.fast_decoder is not None or fmt == "avro-confluent"
    rows, rejects = fast.decode(chunk)
    want_rows, want_rejects = slow.decode(chunk)
    same_rows(rows, want_rows)
    assert [(type(e), said(e), m.offset()) for e, m in rejects] == \
        [(type(e), said(e), m.offset()) for e, m in want_rejects]


def test_the_fast_path_carries_the_common_chunk_for_each_format() -> None:
    for fmt in ("avro", "json", "avro-confluent"):
        chunk, decoder, cfg = messages(fmt, ["good"] * 10 + (["alt"] * 5 if fmt == "avro-confluent" else []))
        stages = Stages(decoder, PREDICTION, cfg, CONTRACT)
        parts = stages._fast_parts(chunk.items)
        assert sum(len(cols.rows) for _, cols in parts) == len(chunk), fmt  # no row went the slow way


@settings(max_examples=40, deadline=None)
@given(kinds=st.lists(st.sampled_from(["good", "alt", "nan", "short"]), min_size=1, max_size=30),
       poisoned=st.sets(st.integers(0, 29)))
def test_encode_keeps_order_and_turns_poison_into_dead_letters(kinds: list[str], poisoned: set[int]) -> None:
    chunk, decoder, cfg = messages("avro-confluent", kinds)
    fast, slow = Stages(decoder, PREDICTION, cfg, CONTRACT), Stages(decoder, PREDICTION, cfg, CONTRACT, fast=False)
    rows, _ = fast.decode(chunk)
    poison = {i: InferenceError("bad row") for i in poisoned if i < len(rows)}
    scores = Columns({"scores": np.arange(len(rows) * 2, dtype=np.float32).reshape(-1, 2)})
    got = fast.encode(rows, scores, poison, Stamp(ModelId("m", "1"), 1234, "run"))
    want = slow.encode(rows, scores, poison, Stamp(ModelId("m", "1"), 1234, "run"))
    assert got[0].source.offsets.tolist() == want[0].source.offsets.tolist() == \
        [o for i, o in enumerate(rows.source.offsets.tolist()) if i not in poison]
    assert got[1] == want[1]  # byte for byte
    assert [(type(e), m.offset()) for e, m in got[2]] == [(type(e), m.offset()) for e, m in want[2]]


@pytest.mark.parametrize("fast", [True, False])
def test_the_digest_is_written_where_the_output_schema_has_model_digest(fast: bool) -> None:
    """The shipped schema and JSON carry the stamp's model_digest right after model_version; a
    user's schema without the field still encodes every row, without it."""
    chunk, decoder, cfg = messages("avro", ["good"] * 4)
    shipped = json.loads(PREDICTION.schema_json)
    older = AvroCodec({**shipped, "fields": [f for f in shipped["fields"] if f["name"] != "model_digest"]})
    stamp = Stamp(ModelId("m", "1", "0123456789ab"), 1234)
    written = {}
    for name, encoder in (("shipped", PREDICTION), ("older", older), ("json", JsonCodec())):
        stages = Stages(decoder, encoder, cfg, CONTRACT, fast=fast)
        assert (stages.fast_encoder is not None) is (fast and name != "json")
        rows, _ = stages.decode(chunk)
        kept, values, rejects = stages.encode(rows, Columns({"scores": np.ones((len(rows), 1), np.float32)}), {},
                                              stamp)
        assert len(kept) == len(values) == 4 and not rejects, name
        written[name] = [dict(encoder.decode(v)) for v in values]
    assert {p["model_digest"] for p in written["shipped"] + written["json"]} == {"0123456789ab"}
    assert list(written["json"][0])[3:6] == ["model_name", "model_version", "model_digest"]
    assert all("model_digest" not in p for p in written["older"])
    assert [{k: v for k, v in p.items() if k != "model_digest"} for p in written["shipped"]] == written["older"]


def test_rejected_rows_leave_no_reference_cycle_behind() -> None:
    """A reject's error is kept for its dead letter without the frames it passed through (the
    decode's and encode's, which hold the reject list), hidden contexts included (json raises its
    decode error ``from None`` over a StopIteration): kept as raised, each bad row was a cycle
    holding the chunk's records until the garbage collector came by."""
    import gc
    import types

    from streamer.kafka.deadletter import stack_trace

    def ours(o: object) -> bool:  # a frame of the decode or encode path (not another test's thread)
        return isinstance(o, types.FrameType) and any(
            part in o.f_code.co_filename for part in ("streamer/pipeline", "streamer/formats", "/json/"))

    decoder, cfg, write = inputs("json")
    values = [write(event(0)), write(event(1, features=[float("nan")] * N)), b"not json", b"",
              write(event(2))[:-3], write(event(3, event_id="\ud800"))]  # the last one fails in encode
    chunk = Messages.of([FakeMessage("t", 0, 100 + i, v) for i, v in enumerate(values)])
    stages = Stages(decoder, PREDICTION, cfg, CONTRACT)
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        rows, rejects = stages.decode(chunk)
        kept, _, bad = stages.encode(rows, Columns({"scores": np.zeros((len(rows), 1), np.float32)}), {}, Stamp(ModelId("m", "1"), 1))
        assert (len(rejects), len(rows), len(bad), len(kept)) == (4, 2, 1, 1)
        for error, _ in rejects + bad:
            link: BaseException | None = error
            while link is not None:  # every link, shown or not, is without its traceback
                assert link.__traceback__ is None, (error, link)
                link = link.__cause__ or link.__context__
        assert 'File "' in stack_trace(rejects[0][0])  # the dead letter still says where
        del rows, rejects, kept, bad
        gc.collect()
        assert [o for o in gc.garbage if ours(o)] == []
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


TABULAR_EVENT = {"type": "record", "name": "Order", "fields": [
    {"name": "event_id", "type": "string"}, {"name": "event_time", "type": "long"},
    {"name": "country", "type": "string"},
    {"name": "channel", "type": {"type": "enum", "name": "Channel", "symbols": ["web", "pos", "app"]}},
    {"name": "amount", "type": "double"}, {"name": "age_days", "type": "float"}, {"name": "n_items", "type": "long"},
    {"name": "note", "type": ["null", "string"], "default": None},
    {"name": "vip", "type": ["null", "boolean"], "default": None}]}


def test_named_outputs_and_include_encode_identically_fast_and_per_row(converter_models: Path,
                                                                        tmp_path: Path) -> None:
    """The real ColumnTransformer (label int64, probabilities float32 [N, 2]) with four pass-through
    fields (a string, an enum symbol, a nullable string, a nullable boolean): fast path on and
    off give the same prediction bytes, and the fast encoder (not the reference) made them."""
    import onnxruntime as ort

    from streamer.config_contract import InputSource, OutputTarget
    from streamer.formats.columnar.record import RecordEncoder
    from streamer.model.prediction_schema import made_schema

    sess = ort.InferenceSession(str(converter_models / "column_transformer.onnx"), providers=["CPUExecutionProvider"])
    contract = Contract.of(Signature.of(sess), {n: InputSource((n,)) for n in
                                                ("country", "channel", "amount", "age_days", "n_items")},
                           {"label": OutputTarget("label"), "probabilities": OutputTarget("probabilities")})
    include = ("country", "channel", "note", "vip")
    (tmp_path / "order.avsc").write_text(json.dumps(TABULAR_EVENT))
    cfg = InputConfig(topics=("t",), group_id="g", schema=tmp_path / "order.avsc")
    decoder = AvroCodec(TABULAR_EVENT)
    base = load_schema(ROOT / "streamer" / "schemas" / "prediction.avsc")
    encoder = AvroCodec(made_schema(base, contract, include, TABULAR_EVENT))
    values = [decoder.encode({"event_id": f"e{i}", "event_time": i, "country": ["FR", "BR", "ñ", ""][i % 4],
                              "channel": ["web", "pos", "app"][i % 3], "amount": i * 1.25, "age_days": i / 3,
                              "n_items": i % 5, "note": None if i % 2 else f"n{i}é",
                              "vip": [None, True, False][i % 3]}) for i in range(60)]
    chunk = Messages.of([FakeMessage("t", i % 3, 10 + i, v) for i, v in enumerate(values)])
    fast = Stages(decoder, encoder, cfg, contract, include=include)
    slow = Stages(decoder, encoder, cfg, contract, fast=False, include=include)
    assert isinstance(fast.fast_encoder, RecordEncoder) and slow.fast_encoder is None
    (a, _), (b, _) = fast.decode(chunk), slow.decode(chunk)
    assert len(a) == len(b) == 60 and a.passthrough == b.passthrough
    scores = contract.collect(sess.run(contract.output_names, contract.feed(a.features)), len(a))
    stamp = Stamp(ModelId("ct", "3", "sha256:ab"), 1_764_417_600_000, "run-1")
    got, want = fast.encode(a, scores, {}, stamp), slow.encode(b, scores, {}, stamp)
    assert got[1] == want[1] and len(got[1]) == 60
    assert fast.fast_encoder.encode(a.event_ids, a.entity_ids, scores.arrays, a.source.topics, a.source.partitions,
                                    a.source.offsets, a.event_times, a.passthrough,
                                    stamp_fields(stamp)) == want[1]  # every row by the columnar encoder
    poisoned = fast.encode(a, scores, {3: InferenceError("x")}, stamp)
    assert poisoned[1] == [v for i, v in enumerate(want[1]) if i != 3] and len(poisoned[2]) == 1
