"""The serving model: circuit breaker and fallback (fake clock), hot reload (real ONNX files)."""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from streamer.config import Config
from streamer.config_file import config_from_dict
from streamer.errors import InferenceError, ModelBrokenError
from streamer.model.runner import OnnxRunner
from streamer.model.signature import Columns
from streamer.pipeline.breaker import Breaker, BreakerState, Fallback
from streamer.pipeline.records import Messages, Rows, Scored
from streamer.pipeline.reload import Reload, served_file
from streamer.pipeline.serving import Serving
from streamer.testing import FakeClock, FunctionRunner
from streamer.wiring.model import model_house
from tests.model.test_runner import build_models_script
from tests.support.fakes import FakeMessage, serving_of

N = 32


def config(model: Path, **model_keys: object) -> Config:
    """No model.version unless given: the file's own version names it."""
    return config_from_dict({
        "input": {"topics": ["in"], "group_id": "g", "format": "json"},
        "model": {"path": str(model), "name": "fraud", "version": "", "reload_check_ms": 100, **model_keys},
        "output": {"topic": "out"}, "kafka": {"bootstrap.servers": "localhost:9092"},
        "batching": {"max_size": 8},
    })


@pytest.fixture
def model(tmp_path: Path) -> Path:
    return write_model(tmp_path / "model.onnx", version="1")  # declared: its label is "1" however loaded


def write_model(path: Path, **variant: object) -> Path:
    """A variant of the demo model written the way a deploy should: a temporary file renamed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(build_models_script().build_fraud_mlp(**variant).SerializeToString())
    tmp.replace(path)
    return path


class Flaky:
    """A model that fails while ``failing``, and can take ``slow_s`` of the fake clock per call."""

    def __init__(self, clock: FakeClock) -> None:
        self.failing, self.slow_s, self.calls, self._clock = False, 0.0, 0, clock
        self.inner = FunctionRunner(lambda x: x[:, :1] * 2, N)

    provider = "CPUExecutionProvider"
    signature = property(lambda self: self.inner.signature)
    contract = property(lambda self: self.inner.contract)

    def warm_up(self, rows: int) -> None:
        pass

    def run(self, features: Columns) -> Columns:
        self.calls += 1
        self._clock.advance(self.slow_s)
        if self.failing:
            raise InferenceError("the model is failing")
        return self.inner.run(features)


def flaky_serving(model: Path, **keys: object) -> tuple[Serving, Flaky, FakeClock]:
    clock = FakeClock()
    flaky = Flaky(clock)
    cfg = config(model, fallback_scores=[0.5], breaker_failures=3, breaker_probe_ms=1000,
                 breaker_probe_max_ms=4000, **keys)
    serving = serving_of(cfg, flaky, clock, fallback=Fallback(None, cfg.model.fallback_scores))
    serving.warm_up()
    return serving, flaky, clock


BATCH = np.ones((4, N), np.float32)


def rows(features: np.ndarray) -> Rows:
    """A batch of these feature rows (the ``features`` column), as consumed from partition 0 of
    'in' at offsets 0, 1, ..."""
    n = len(features)
    messages = Messages.of([FakeMessage("in", 0, i, b"", key=f"k{i}".encode()) for i in range(n)])
    return Rows(messages, [f"e{i}" for i in range(n)], [f"a{i}" for i in range(n)],
                np.arange(n, dtype=np.int64), Columns({"features": features}))


def scores(out: Scored) -> np.ndarray:
    """A scored batch's ``scores`` column."""
    return out.scores.arrays["scores"]


def test_the_breaker_follows_the_worked_example() -> None:
    clock = FakeClock()
    b = Breaker(failures=3, probe_s=1.0, probe_max_s=60.0, clock=clock)
    for _ in range(2):
        assert b.allow()
        b.failed("boom")
    assert b.state == BreakerState.CLOSED and b.allow()
    b.failed("boom")
    assert b.state == BreakerState.OPEN and not b.allow()
    clock.advance(1.0)
    assert b.allow() and b.state == BreakerState.HALF_OPEN
    b.failed("still")  # a failed probe: open for twice as long
    clock.advance(1.5)
    assert not b.allow()
    clock.advance(0.5)
    assert b.allow()
    b.succeeded()
    assert (b.state, b.state.value) == (BreakerState.CLOSED, 0)
    b.failed("once")
    assert b.state == BreakerState.CLOSED  # the count started again


def test_a_failing_model_is_stood_in_for_by_the_fallback_and_probed_until_it_answers(model: Path) -> None:
    serving, flaky, clock = flaky_serving(model)
    good = serving.score(rows(BATCH))
    assert good.degraded is None and good.scores.arrays["scores"][0, 0] == 2.0
    flaky.failing = True
    outs = [serving.score(rows(BATCH)) for _ in range(3)]  # each fails on the model, scored by the fallback
    assert all(o.degraded and "model failing" in o.degraded for o in outs)
    assert all((o.scores.arrays["scores"] == 0.5).all() and o.scores.arrays["scores"].shape == (4, 1) for o in outs)
    assert serving.breaker.state == BreakerState.OPEN
    calls = flaky.calls
    for _ in range(5):  # open: the model is not asked at all
        assert serving.score(rows(BATCH)).degraded
    assert flaky.calls == calls
    clock.advance(1.0)
    assert serving.score(rows(BATCH)).degraded and serving.breaker.state == BreakerState.OPEN  # the probe failed
    flaky.failing = False
    clock.advance(1.0)
    assert serving.score(rows(BATCH)).degraded  # 2 s now: still open
    clock.advance(1.0)
    back = serving.score(rows(BATCH))  # the probe succeeds: closed
    assert back.degraded is None and serving.breaker.state == BreakerState.CLOSED
    assert back.scores.arrays["scores"][0, 0] == 2.0


def test_a_batch_over_the_timeout_opens_the_breaker_at_once_and_keeps_its_scores(model: Path) -> None:
    serving, flaky, clock = flaky_serving(model, timeout_ms=100)
    flaky.slow_s = 0.25
    slow = serving.score(rows(BATCH))
    assert slow.degraded is None and slow.scores.arrays["scores"][0, 0] == 2.0
    assert serving.breaker.state == BreakerState.OPEN and "over model.timeout_ms" in serving.breaker.reason
    assert serving.score(rows(BATCH)).degraded


def test_without_a_fallback_a_broken_model_is_held_as_before(model: Path) -> None:
    clock = FakeClock()
    flaky = Flaky(clock)
    serving = serving_of(config(model), flaky, clock)
    flaky.failing = True
    with pytest.raises(ModelBrokenError):
        serving.score(rows(BATCH))


def test_a_failing_fallback_holds_the_batch(model: Path) -> None:
    clock = FakeClock()
    flaky = Flaky(clock)
    broken = FunctionRunner(lambda x: (_ for _ in ()).throw(InferenceError("fallback down")), N)
    serving = serving_of(config(model, fallback_path=str(model)), flaky, clock, fallback=Fallback(broken, None))
    flaky.failing = True
    with pytest.raises(ModelBrokenError, match="fallback fails too"):
        serving.score(rows(BATCH))


# ---- hot reload -----------------------------------------------------------------------------

def reloading(cfg: Config) -> tuple[Serving, FakeClock]:
    clock = FakeClock()
    serving = serving_of(cfg, OnnxRunner(served_file(cfg.model)[0], ("cpu",)), clock,
                      load=lambda path: OnnxRunner(path, ("cpu",)))
    serving.warm_up()
    return serving, clock


def next_reload(serving: Serving, clock: FakeClock, looks: int = 5) -> Reload:
    """Poll as the loop does, a look every 100 ms, until a load ends."""
    for _ in range(looks):
        clock.advance(0.1)
        got = serving.poll()
        if got is not None:
            return got
        if serving.reloader.loading:
            serving.reloader.wait(30)
            got = serving.poll()
            assert got is not None
            return got
    raise AssertionError("no reload started")


def test_a_changed_file_is_loaded_checked_and_swapped_in_with_its_declared_version(model: Path) -> None:
    serving, clock = reloading(config(model))
    before = serving.score(rows(BATCH)).scores.arrays["scores"]
    assert serving.poll() is None
    write_model(model, seed=7, version="2")
    done = next_reload(serving, clock)
    assert done.runner is not None and done.refused is None and done.version == "2"
    after = serving.score(rows(BATCH))
    assert after.model.version == "2" and not np.allclose(after.scores.arrays["scores"], before)


def test_a_file_without_a_declared_version_is_named_by_its_digest(model: Path) -> None:
    serving, clock = reloading(config(model))
    write_model(model, seed=8)
    done = next_reload(serving, clock)
    digest = hashlib.sha256(model.read_bytes()).hexdigest()[:12]
    assert done.runner is not None and done.version == done.digest == digest


def test_a_configured_version_is_kept_verbatim_and_the_digest_tells_the_files_apart(model: Path) -> None:
    """model.version "1" labels every file it serves "1", never "1+<digest>", whatever the file
    declares; the digest of the file that scored a batch travels beside it."""
    serving, clock = reloading(config(model, version="1"))
    first = hashlib.sha256(model.read_bytes()).hexdigest()[:12]
    scored = serving.score(rows(BATCH))
    assert serving.model.version == scored.model.version == "1" and serving.model.digest == scored.model.digest == first
    write_model(model, seed=13, version="9")
    done = next_reload(serving, clock)
    second = hashlib.sha256(model.read_bytes()).hexdigest()[:12]
    assert done.runner is not None and (done.version, done.digest) == ("1", second) and second != first
    scored = serving.score(rows(BATCH))
    assert (scored.model.version, scored.model.digest) == ("1", second)


def test_a_change_is_loaded_only_once_it_has_held_still_for_one_look(model: Path) -> None:
    serving, clock = reloading(config(model))
    write_model(model, seed=9, version="2")
    clock.advance(0.1)
    assert serving.poll() is None and not serving.reloader.loading  # seen once: maybe still being written
    clock.advance(0.1)
    serving.poll()
    assert serving.reloader.loading


@pytest.mark.parametrize("broken", ["garbage", "width", "nan"])
def test_a_model_that_fails_its_check_is_refused_and_the_old_one_scores_on(model: Path, broken: str) -> None:
    serving, clock = reloading(config(model))
    before = serving.score(rows(BATCH)).scores.arrays["scores"]
    if broken == "garbage":
        model.write_bytes(b"this is not an onnx model")
    else:
        write_model(model, **({"n_features": 16} if broken == "width" else {"nan_scores": True}))
    done = next_reload(serving, clock)
    assert done.runner is None and done.refused
    assert {"garbage": "cannot load", "width": "features float32 [None, 16]; the serving model's are features float32 [None, 32]", "nan": "non-finite"}[broken] in done.refused
    assert serving.model.version == "1" and np.array_equal(serving.score(rows(BATCH)).scores.arrays["scores"], before)
    for _ in range(3):  # the refused file is not tried again until it changes
        clock.advance(0.1)
        assert serving.poll() is None and not serving.reloader.loading


def test_a_model_of_another_output_width_is_refused_by_hot_reload(model: Path) -> None:
    """A model whose signature does not fix its output width (a runner without one here) is held
    to the width the serving model answered with: two score columns for one are refused."""
    clock = FakeClock()
    serving = serving_of(config(model, reload_check_ms=0), FunctionRunner(lambda x: x[:, :1], N), clock,
                      load=lambda path: FunctionRunner(lambda x: x[:, :2], N))
    serving.warm_up()
    before = serving.score(rows(BATCH)).scores.arrays["scores"]
    serving.ask_reload()
    done = next_reload(serving, clock)
    assert done.runner is None and done.refused is not None and "with shape (8, 2); expected (8, 1)" in done.refused
    assert np.array_equal(serving.score(rows(BATCH)).scores.arrays["scores"], before)


def test_a_file_has_one_version_label_whether_loaded_at_start_or_by_a_reload(tmp_path: Path) -> None:
    """Start-up names the file as a reload does: model.version, else its declared version, else
    its digest, so a restart does not relabel the model a reload swapped in."""
    declared = write_model(tmp_path / "declared.onnx", seed=3, version="7")
    assert reloading(config(declared))[0].model.version == "7"
    assert reloading(config(declared, version="1"))[0].model.version == "1"  # the configured label wins
    plain = write_model(tmp_path / "plain.onnx", seed=4)
    serving, clock = reloading(config(plain))
    started_as = serving.model.version
    assert started_as == serving.model.digest and len(started_as) == 12
    serving.ask_reload()  # the same file reloaded: the same label
    assert next_reload(serving, clock).version == started_as
    write_model(plain, seed=5)
    serving.ask_reload()
    swapped = next_reload(serving, clock).version
    assert swapped != started_as and reloading(config(plain))[0].model.version == swapped  # then a restart


def test_fallback_predictions_name_the_fallback_not_the_serving_model(model: Path, tmp_path: Path) -> None:
    constant = model_house(config(model, fallback_scores=[0.5]), OnnxRunner(model, ("cpu",))).serving
    assert (constant.fallback.model.name, constant.fallback.model.version) == ("fraud-fallback", "constant")
    simple = write_model(tmp_path / "simple.onnx", seed=12, version="s3")
    by_file = model_house(config(model, fallback_path=str(simple)), OnnxRunner(model, ("cpu",))).serving
    assert (by_file.fallback.model.name, by_file.fallback.model.version) == ("fraud-fallback", "s3")
    serving, flaky, _ = flaky_serving(model)
    healthy = serving.score(rows(BATCH))
    assert (healthy.model.name, healthy.model.version) == ("fraud", serving.model.version)
    flaky.failing = True
    degraded = serving.score(rows(BATCH))
    assert degraded.degraded and (degraded.model.name, degraded.model.version, degraded.provider) == \
        ("fallback", "constant", "fallback")


def test_a_folder_of_versions_serves_the_highest_and_takes_a_new_one(tmp_path: Path) -> None:
    folder = tmp_path / "fraud"
    write_model(folder / "3" / "model.onnx")
    write_model(folder / "not-a-version" / "model.onnx", seed=5)
    serving, clock = reloading(config(folder))
    assert serving.model.version == "3"
    write_model(folder / "12" / "model.onnx", seed=6)
    done = next_reload(serving, clock)
    assert done.runner is not None and done.version == "12" and done.file == folder / "12" / "model.onnx"


def test_sighup_reloads_at_once_without_a_change(model: Path) -> None:
    serving, clock = reloading(config(model, reload_check_ms=0))
    write_model(model, seed=10, version="5")
    for _ in range(3):  # no looking at the file: only SIGHUP
        clock.advance(10)
        assert serving.poll() is None and not serving.reloader.loading
    serving.ask_reload()
    done = next_reload(serving, clock)
    assert done.version == "5" and serving.model.version == "5"


def test_a_slow_load_keeps_the_old_model_scoring_meanwhile(model: Path) -> None:
    slow_started = time.monotonic()
    clock = FakeClock()
    cfg = config(model)

    def slow_load(path: Path) -> OnnxRunner:
        time.sleep(0.3)  # a big model loading: the loop must not wait for it
        return OnnxRunner(path, ("cpu",))

    serving = serving_of(cfg, OnnxRunner(model, ("cpu",)), clock, load=slow_load)
    serving.warm_up()
    write_model(model, seed=11, version="2")
    clock.advance(0.1)
    serving.poll()
    clock.advance(0.1)
    serving.poll()
    assert serving.reloader.loading
    scored_meanwhile = 0
    while (done := serving.poll()) is None:
        assert serving.score(rows(BATCH)).model.version == "1"
        scored_meanwhile += 1
        assert time.monotonic() - slow_started < 30
    assert scored_meanwhile > 0 and done.version == serving.model.version == "2"


def test_a_fallback_needs_an_output_schema_that_can_flag_degraded_predictions(model: Path, tmp_path: Path) -> None:
    from streamer.errors import ConfigError
    from streamer.formats.avro import load_schema
    from streamer.schemas import bundled

    old = load_schema(bundled("prediction.avsc"))
    old["fields"] = [f for f in old["fields"] if not f["name"].startswith("degraded")]
    (tmp_path / "old.avsc").write_text(json.dumps(old))
    cfg = config(model, fallback_scores=[0.0])
    cfg = replace(cfg, output=replace(cfg.output, schema=tmp_path / "old.avsc"))
    with pytest.raises(ConfigError, match=r"'output\.schema': has no degraded"):
        model_house(cfg, OnnxRunner(model, ("cpu",)))
    narrow = write_model(tmp_path / "narrow.onnx", n_features=16)
    with pytest.raises(ConfigError, match=r"'model\.fallback_path': cannot serve .*features float32 \[None, 16\]"):
        model_house(config(model, fallback_path=str(narrow)), OnnxRunner(model, ("cpu",)))


def test_sighup_on_an_unchanged_file_keeps_its_version(model: Path) -> None:
    serving, clock = reloading(config(model, reload_check_ms=0))
    serving.ask_reload()
    done = next_reload(serving, clock)
    assert done.runner is not None and serving.model.version == "1"


def test_a_batch_in_flight_during_a_swap_is_named_by_the_model_that_scored_it(model: Path) -> None:
    """Pipelined, the inference thread may be inside the old model while the loop swaps the new
    one in: its outcome must carry the old version, the next batch the new one."""
    import threading

    inside, go = threading.Event(), threading.Event()

    def old_model(x: np.ndarray) -> np.ndarray:
        inside.set()
        assert go.wait(10)
        return x[:, :1]

    serving = serving_of(config(model), FunctionRunner(old_model, N), FakeClock())
    old = serving.model.version
    got: list[Any] = []
    worker = threading.Thread(target=lambda: got.append(serving.score(rows(BATCH))))
    worker.start()
    assert inside.wait(10)
    serving.swap(Reload(model, "2", 0.0, runner=FunctionRunner(lambda x: x[:, :1] + 1, N)))
    go.set()
    worker.join(10)
    assert got[0].model.version == old and got[0].scores.arrays["scores"][0, 0] == 1.0
    after = serving.score(rows(BATCH))
    assert after.model.version == "2" and after.scores.arrays["scores"][0, 0] == 2.0


def test_a_new_model_gets_a_closed_breaker_of_its_own_even_while_the_old_one_fails_in_flight(model: Path) -> None:
    """The old model's failure of a batch still in flight when the new one is swapped in opens
    the old model's breaker, not the new one's."""
    import threading

    inside, go = threading.Event(), threading.Event()

    def failing_old(x: np.ndarray) -> np.ndarray:
        inside.set()
        assert go.wait(10)
        raise InferenceError("the old model's device went away")

    cfg = config(model, fallback_scores=[0.5], breaker_failures=1)
    serving = serving_of(cfg, FunctionRunner(failing_old, N), FakeClock(), fallback=Fallback(None, (0.5,)))
    got: list[Any] = []
    worker = threading.Thread(target=lambda: got.append(serving.score(rows(BATCH))))
    worker.start()
    assert inside.wait(10)
    old_breaker = serving.breaker
    serving.swap(Reload(model, "2", 0.0, runner=FunctionRunner(lambda x: x[:, :1], N)))
    go.set()
    worker.join(10)
    assert got[0].degraded and (got[0].model.name, got[0].model.version) == ("fallback", "constant")  # it stood in
    assert old_breaker.state == BreakerState.OPEN and serving.breaker is not old_breaker
    assert serving.breaker.state == BreakerState.CLOSED
    assert serving.score(rows(BATCH)).degraded is None  # the new model scores at once


def test_a_file_that_cannot_be_read_for_its_digest_is_refused_by_a_reload(tmp_path: Path) -> None:
    from streamer.model.onnx_file import file_digest
    from streamer.pipeline.reload import file_version

    gone = tmp_path / "gone.onnx"
    runner = FunctionRunner(lambda x: x[:, :1], N)  # declares no version
    assert file_digest(gone) == ""  # at start: a runner not from a file carries no digest
    with pytest.raises(OSError):
        file_digest(gone, strict=True)  # a reload: refused, never served without its digest
    assert file_version("", "7", runner, "") == "7"  # a version folder names it
    assert file_version("1", "7", runner, "") == "1"  # unless model.version does
    assert file_version("", None, runner, "") == "?"
