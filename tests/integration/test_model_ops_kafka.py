"""Model operations on a live stream, on a real broker: hot reload, and degrade-don't-fail.

Hot reload runs `streamer run` as a child process on a model file in the test's folder: a new
version is renamed over it mid-stream, then garbage is written over it. Every event must have
exactly one prediction, each partition's predictions switch version once (at one batch boundary:
no prediction of the old version is scored after one of the new), and the garbage is refused
while scoring goes on.

The breaker test runs the processor in this process around the real ONNX model wrapped so that
the test can make it fail mid-stream and recover; the fallback is a constant score.
"""

from __future__ import annotations

import re
import signal
import threading
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from streamer.commands.demo import synthetic_events
from streamer.config import ChallengerConfig, with_overrides
from streamer.errors import InferenceError
from streamer.formats.avro import AvroCodec, load_schema
from streamer.model.runner import model_runner
from streamer.testing import FunctionRunner, score_matrix
from streamer.wiring.stream import build_processor
from tests.conftest import Topics, make_config
from tests.integration.test_faults_kafka import Feeder, check, feed, finish_feed
from tests.integration.test_observability_kafka import Running
from tests.pipeline.test_serving import write_model
from tests.support.faults import (
    ROOT,
    ChildProcessor,
    audit,
    caught_up,
    read_all,
    wait_until,
    write_config,
    written,
)

pytestmark = pytest.mark.kafka


def predictions(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    decoder = AvroCodec(load_schema(ROOT / "streamer" / "schemas" / "prediction.avsc"))
    # (check() leaves a b"marker" record after an exactly-once run: it is no prediction)
    return [decoder.decode(m.value()) for m in read_all(bootstrap, topic) if m.value() != b"marker"]


def by_partition(preds: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    lanes: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for p in preds:
        lanes[p["source_partition"]].append(p)
    return {k: sorted(v, key=lambda p: p["source_offset"]) for k, v in lanes.items()}


def runs(values: list[Any]) -> list[Any]:
    """The values with repeats folded: [a, a, b, b, a] -> [a, b, a]."""
    return [v for i, v in enumerate(values) if i == 0 or values[i - 1] != v]


def reloading_child(tmp_path: Path, bootstrap: str, topics: Topics, guarantee: str, n: int,
                    reload_check_ms: int) -> tuple[Path, Feeder, ChildProcessor]:
    """`streamer run` on a copy of the demo model (declaring version "1"), fed ``n`` events at
    1,000/s. No ``model.version``: each file's declared version labels its predictions."""
    model = write_model(tmp_path / "served" / "fraud.onnx", version="1")
    cfg = write_config(tmp_path / "p.yaml", bootstrap=bootstrap, input_topic=topics.input,
                       output_topic=topics.output, group=topics.group, guarantee=guarantee,
                       model={"path": str(model), "version": "", "reload_check_ms": reload_check_ms})
    feeder = Feeder(bootstrap, topics, rate=1_000, limit=n).start()
    return model, feeder, ChildProcessor(cfg, tmp_path / "p.log").start()


@pytest.mark.timeout(300)
def test_a_new_model_version_is_swapped_in_under_a_steady_stream(bootstrap: str, topics: Topics,
                                                                 tmp_path: Path) -> None:
    n = 12_000
    model, feeder, p = reloading_child(tmp_path, bootstrap, topics, "at_least_once", n, reload_check_ms=200)
    try:
        wait_until(lambda: written(bootstrap, topics.output) >= 2_000, 120, "2,000 predictions", p.tail)
        write_model(model, seed=7, version="2")  # renamed into place, as a deploy should
        p.wait_for_log("model version 2 swapped in")
        at_swap = written(bootstrap, topics.output)
        wait_until(lambda: written(bootstrap, topics.output) >= at_swap + 2_000, 120,
                   "2,000 predictions after the swap", p.tail)
        model.write_bytes(b"not an ONNX model")  # a broken deploy: refused, version 2 scores on
        p.wait_for_log("refused the model")
    except BaseException:
        feeder.stop()
        raise
    result = finish_feed(feeder, n, bootstrap, topics, p)
    check(result, "at_least_once", bootstrap, topics)
    assert (result.lost, result.duplicated) == (0, 0), result  # a clean stop: nothing twice

    preds = predictions(bootstrap, topics.output)
    assert {p["model_version"] for p in preds} == {"1", "2"}
    for partition, lane in by_partition(preds).items():
        assert runs([p["model_version"] for p in lane]) == ["1", "2"], partition
    last_v1 = max(p["scored_at"] for p in preds if p["model_version"] == "1")
    first_v2 = min(p["scored_at"] for p in preds if p["model_version"] == "2")
    assert last_v1 <= first_v2  # one boundary for the whole process, not one per partition
    swap = re.search(r"model version 2 swapped in from .*, ([0-9.]+) s after the change", p.log.read_text())
    assert swap is not None
    print(f"hot reload: swapped {float(swap.group(1)):.2f} s after the change (load, warm-up, checks; "
          f"the change is loaded once it held still for one 200 ms look); "
          f"v1 {sum(p['model_version'] == '1' for p in preds)}, v2 {sum(p['model_version'] == '2' for p in preds)}")


def gauge(registry: CollectorRegistry, name: str, model: str = "fraud_mlp") -> float:
    """A model-side series of ``model`` (the example config's)."""
    value = registry.get_sample_value(name, {"model": model})
    assert value is not None, name
    return value


@pytest.mark.timeout(300)
def test_a_failing_model_degrades_to_the_fallback_and_comes_back(bootstrap: str, topics: Topics) -> None:
    cfg = with_overrides(make_config(bootstrap, topics),
                         model={"fallback_scores": (0.5,), "breaker_failures": 2, "breaker_probe_ms": 200,
                                "breaker_probe_max_ms": 800})
    real, failing = model_runner(cfg), threading.Event()

    def model(x: np.ndarray) -> np.ndarray:  # the real model, failing while set (its GPU went away)
        if failing.is_set():
            raise InferenceError("CUDA error: an illegal memory access was encountered")
        return score_matrix(real, x)

    switch = FunctionRunner(model, real.contract.feature_width, real.provider)
    registry = CollectorRegistry()
    processor = build_processor(cfg, runner=switch, registry=registry)
    n = 10_000
    feeder = Feeder(bootstrap, topics, rate=1_000, limit=n).start()
    running = Running(processor)
    try:
        wait_until(lambda: written(bootstrap, topics.output) >= 2_000, 120, "2,000 predictions")
        failing.set()
        wait_until(lambda: processor.stats.degraded >= 1_000, 60, "1,000 degraded predictions")
        assert gauge(registry, "streamer_model_breaker_state") in (1, 2)  # open, or probing
        failing.clear()
        at_recovery = processor.stats.degraded
        wait_until(lambda: gauge(registry, "streamer_model_breaker_state") == 0, 30, "the breaker to close")
        assert processor.stats.degraded - at_recovery < 1_000  # closed within a probe or two
        assert feeder.stop(wait_for_limit=True) == n
        wait_until(lambda: caught_up(bootstrap, topics.group, topics.input), 120, "every input committed")
    finally:
        feeder.stop()
        running.stop()
    result = audit(bootstrap, topics.input, topics.output, topics.dlq)
    assert (result.events, result.lost, result.duplicated) == (n, 0, 0), result

    preds = predictions(bootstrap, topics.output)
    degraded = [p for p in preds if p["degraded"]]
    assert len(degraded) == processor.stats.degraded == gauge(registry, "streamer_degraded_predictions_total")
    assert all(p["scores"] == [0.5] and "model failing" in p["degraded_reason"] for p in degraded)
    assert not any(p["degraded_reason"] for p in preds if not p["degraded"])
    for partition, lane in by_partition(preds).items():  # healthy, degraded, healthy again
        assert runs([p["degraded"] for p in lane]) == [False, True, False], partition


@pytest.mark.timeout(180)
def test_sighup_reloads_the_model_when_looking_is_off(bootstrap: str, topics: Topics, tmp_path: Path) -> None:
    """`model.reload_check_ms: 0`: only SIGHUP loads the new file (as an operator or a deploy hook)."""
    n = 6_000
    model, feeder, p = reloading_child(tmp_path, bootstrap, topics, "exactly_once", n, reload_check_ms=0)
    try:
        wait_until(lambda: written(bootstrap, topics.output) >= 1_000, 120, "1,000 predictions", p.tail)
        write_model(model, seed=3, version="3")
        p.signal(signal.SIGHUP)
        p.wait_for_log("model version 3 swapped in")
    except BaseException:
        feeder.stop()
        raise
    result = finish_feed(feeder, n, bootstrap, topics, p)
    check(result, "exactly_once", bootstrap, topics)
    preds = predictions(bootstrap, topics.output)
    for partition, lane in by_partition(preds).items():
        assert runs([p["model_version"] for p in lane]) == ["1", "3"], partition


@pytest.mark.timeout(300)
def test_challengers_score_in_shadow_and_a_failing_or_hung_one_never_touches_the_champion(
        bootstrap: str, topics: Topics, tmp_path: Path) -> None:
    """Three challengers on the same stream: another model (its flips against the champion are
    known in advance, computed offline on the same events), one that raises on every batch, and
    one that hangs until the champion has finished everything."""
    n = 3_000
    other = write_model(tmp_path / "other.onnx", seed=7, version="2")
    base = make_config(bootstrap, topics)
    specs = tuple(ChallengerConfig(path, name, "2") for name, path in
                  (("other", other), ("raising", other), ("hung", other)))
    cfg = with_overrides(base, shadow={"challengers": specs, "queue_batches": 1_000})
    registry = CollectorRegistry()
    processor = build_processor(cfg, registry=registry)
    shadow = processor.serving.shadow
    assert shadow is not None
    other_model, release = shadow.challengers[2].runner, threading.Event()

    def raising(x: np.ndarray) -> np.ndarray:
        raise InferenceError("challenger: unsupported operator on this device")

    def hanging(x: np.ndarray) -> np.ndarray:  # a device that stopped answering, until released
        release.wait()
        return score_matrix(other_model, x)

    shadow.challengers[1].runner = FunctionRunner(raising, other_model.contract.feature_width)
    shadow.challengers[2].runner = FunctionRunner(hanging, other_model.contract.feature_width)

    features = np.array([e["features"] for e in synthetic_events(n, 32, seed=3)], np.float32)
    champion, challenger = score_matrix(model_runner(cfg), features)[:, 0], score_matrix(model_runner(cfg, other), features)[:, 0]
    expected_flips = int(np.count_nonzero((champion >= 0.5) != (challenger >= 0.5)))
    feed(bootstrap, topics, n)

    def sample(name: str, **labels: str) -> float:
        return registry.get_sample_value(name, {"model": cfg.model.name, **labels}) or 0.0

    running = Running(processor)
    try:
        wait_until(lambda: caught_up(bootstrap, topics.group, topics.input), 120, "every input committed")
        # The champion is done, and the hung challenger has not compared one row: nothing waited on it.
        assert sample("streamer_shadow_compared_rows_total", challenger="hung") == 0
        wait_until(lambda: sample("streamer_shadow_compared_rows_total", challenger="other") == n, 60,
                   "the other challenger to compare every row")
        release.set()
        wait_until(lambda: sample("streamer_shadow_predictions_total", challenger="hung") == n, 60,
                   "the hung challenger, released, to publish")
    finally:
        release.set()
        running.stop()
    result = audit(bootstrap, topics.input, topics.output, topics.dlq)
    assert (result.events, result.lost, result.duplicated) == (n, 0, 0), result  # the champion's output, whole
    assert sample("streamer_shadow_flips_total", challenger="other") == expected_flips
    assert sample("streamer_shadow_failures_total", challenger="raising", stage="score") > 0
    assert sample("streamer_shadow_failures_total", challenger="other", stage="skipped") == 0
    shadow_preds = predictions(bootstrap, f"{topics.output}.shadow")
    counts = Counter(p["model_name"] for p in shadow_preds)
    assert counts == {"other": n, "hung": n}, counts
    assert {p["model_version"] for p in shadow_preds} == {"2"}
    print(f"shadow: {expected_flips} of {n} decisions flip at 0.5 (challenger seed 7), as counted live; "
          f"the raising challenger failed {int(sample('streamer_shadow_failures_total', challenger='raising', stage='score'))} batches")
