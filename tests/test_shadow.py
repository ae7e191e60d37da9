"""Shadow scoring without a broker: agreement, and challengers that fail or lag never touch the champion."""

from __future__ import annotations

import hashlib
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry

from streamer.config import ChallengerConfig, shadow_topic
from streamer.errors import InferenceError
from streamer.formats.avro import AvroCodec, load_schema
from streamer.formats.configured import output_codec
from streamer.formats.json_events import JsonCodec
from streamer.model.contract import Contract
from streamer.model.signature import Columns
from streamer.observe.metrics import Metrics
from streamer.pipeline.records import ModelId, Scored
from streamer.pipeline.stages import Stages
from streamer.shadow import Shadow
from streamer.testing import FakeClock, FunctionRunner, matrix_signature
from tests.pipeline.test_serving import N, config, rows

ROOT = Path(__file__).resolve().parents[1]


class Sink:
    """A producer that acknowledges everything at once."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, bytes | None]] = []

    def produce(self, topic: str, value: bytes, key: bytes | None, on_delivery: Any) -> None:
        self.sent.append((topic, value, key))
        on_delivery(None, None)

    def poll(self, timeout: float) -> int:
        return 0

    def flush(self, timeout: float) -> int:
        return 0


MODEL = "fraud"  # the champion: tests/pipeline/test_serving.py config()'s model


def make(tmp_path: Path, runners: dict[str, Any], **shadow: object) -> tuple[Shadow, Sink, CollectorRegistry]:
    model = ROOT / "models" / "fraud_mlp.onnx"
    specs = [ChallengerConfig(model, name, "9") for name in runners]
    cfg = config(model)
    cfg = replace(cfg, shadow=replace(cfg.shadow, challengers=tuple(specs), **shadow))
    sink, registry = Sink(), CollectorRegistry()
    s = Shadow(cfg.shadow, shadow_topic(cfg), list(zip(specs, runners.values(), strict=True)),
               Stages(JsonCodec(), output_codec(cfg), cfg.input, Contract.of(matrix_signature(N))), lambda: sink, Metrics(registry), FakeClock(),
               model=cfg.model.name)
    s.start(8)
    return s, sink, registry


def champion(features: np.ndarray, degraded: str | None = None) -> Scored:
    return Scored(Columns({"scores": features[:, :1].copy()}), model=ModelId("m", "1"), provider="cpu", degraded=degraded)


def drain(s: Shadow) -> None:
    s.close(10)


def test_flips_and_differences_are_counted_on_the_rows_the_champion_scored_itself(tmp_path: Path) -> None:
    # The champion scores feature 0; the challenger feature 0 + 0.2: rows whose feature 0 lies in
    # [0.3, 0.5) flip at the 0.5 threshold.
    s, sink, registry = make(tmp_path, {"plus": FunctionRunner(lambda x: x[:, :1] + 0.2, N)})
    f = np.zeros((10, N), np.float32)
    f[:, 0] = [0.0, 0.1, 0.2, 0.3, 0.35, 0.45, 0.5, 0.6, 0.9, 1.0]
    out = champion(f)
    out.scores.arrays["scores"][9, 0] = np.nan  # a poison row: the champion did not score it
    s.submit(rows(f), out)
    s.submit(rows(f), champion(f, degraded="breaker open"))  # the fallback's: not compared
    drain(s)
    assert (s.compared, s.flips) == (9, 3)
    assert registry.get_sample_value("streamer_shadow_flips_total", {"model": MODEL, "challenger": "plus"}) == 3
    assert registry.get_sample_value("streamer_shadow_abs_diff_count", {"model": MODEL, "challenger": "plus"}) == 9
    assert len(sink.sent) == 20 and {t for t, _, _ in sink.sent} == {"out.shadow"}
    decoded = AvroCodec(load_schema(ROOT / "streamer" / "schemas" / "prediction.avsc")).decode(sink.sent[3][1])
    assert (decoded["model_name"], decoded["model_version"], decoded["source_offset"]) == ("plus", "9", 3)
    digest = hashlib.sha256((ROOT / "models" / "fraud_mlp.onnx").read_bytes()).hexdigest()[:12]
    assert decoded["model_digest"] == digest  # the challenger's file
    assert abs(decoded["scores"][0] - 0.5) < 1e-6 and sink.sent[3][2] == b"k3"


def test_a_failing_challenger_is_counted_and_the_others_go_on(tmp_path: Path) -> None:
    def boom(x: np.ndarray) -> np.ndarray:
        raise InferenceError("challenger broken")

    s, sink, registry = make(tmp_path, {"broken": FunctionRunner(boom, N), "same": FunctionRunner(lambda x: x[:, :1], N)})
    f = np.random.default_rng(0).random((6, N), dtype=np.float32)
    for _ in range(3):
        s.submit(rows(f), champion(f))
    drain(s)
    assert registry.get_sample_value("streamer_shadow_failures_total", {"model": MODEL, "challenger": "broken", "stage": "score"}) == 3
    assert (s.compared, s.flips, len(sink.sent)) == (18, 0, 18)


def test_a_challenger_that_lags_skips_batches_instead_of_holding_the_champion(tmp_path: Path) -> None:
    release = threading.Event()

    def stuck(x: np.ndarray) -> np.ndarray:
        release.wait(10)
        return x[:, :1]

    s, sink, registry = make(tmp_path, {"stuck": FunctionRunner(stuck, N)}, queue_batches=2)
    f = np.ones((5, N), np.float32)
    for _ in range(10):  # submit never waits: two queue (and maybe one is being scored), the rest skip
        s.submit(rows(f), champion(f))
    release.set()
    drain(s)
    skipped = registry.get_sample_value("streamer_shadow_failures_total", {"model": MODEL, "challenger": "stuck", "stage": "skipped"})
    assert skipped == s.skipped and 35 <= skipped <= 40 and s.compared + skipped == 50
