"""The degrade path on a real server over HTTP and real Redis servers: an open breaker, a feature
fetch past its timeout and a stalled store answer with the precomputed prediction flagged degraded
(or the fallback's, or an error), every request answered within its deadline, none left hanging."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from streamer.dev.redis import LocalRedis, local_redis
from streamer.stores.features import RedisFeatures
from streamer.wiring.lake import lake_house
from tests.conftest import ROOT
from tests.online.doubler import running
from tests.online.store_server import exchange, load_features, metrics, precompute, sample, store_config
from tests.support.redis import kv_config

X = [0.25] * 32
STALL_S = 8.0  # a stalled source's fetch: past the client's timeout (5 s), should anything wait for it


def event(entity: str, **fields: object) -> dict[str, object]:
    return {"event_id": f"e-{entity}", "entity_id": entity, "event_time": 1_700_000_000_000, **fields}


def test_an_open_breaker_answers_the_precomputed_prediction_flagged_breaker(redis_server: LocalRedis) -> None:
    cfg = store_config(redis_server, fallback=True)
    precompute(redis_server, cfg.kv, "r1", {"p1": (0.9, 1_000)})
    serving = lake_house(cfg).model.serving
    with running(cfg, serving):
        base = f"http://127.0.0.1:{cfg.online.http_port}"
        status, closed, _ = exchange(f"{base}/v1/score", event("p1", features=X))
        assert status == 200 and (closed["source"], closed["degraded"]) == ("scored", False)
        before = metrics(base)
        serving.breaker.failed("the model failed in this test", at_once=True)
        status, answer, _ = exchange(f"{base}/v1/score", event("p1", features=X))
        assert status == 200, answer
        assert (answer["source"], answer["degraded"], answer["degraded_reason"]) == ("precomputed", True, "breaker")
        assert (answer["scores"], answer["run_id"]) == ([0.9], "r1")
        assert answer["parameters"]["model_ms"] == 0.0  # decided before scoring: no model call
        # no precomputed prediction: the fallback answers, as the breaker has it
        status, answer, _ = exchange(f"{base}/v1/score", event("nobody", features=X))
        assert status == 200, answer
        assert (answer["source"], answer["degraded"], answer["scores"]) == ("scored", True, [0.5])
        assert answer["degraded_reason"] == "the model failed in this test"
        after = metrics(base)
    for reason, grew in (("breaker", 2), ("features", 0), ("deadline", 0)):
        assert sample(after, "streamer_online_degraded_total", reason=reason) - \
            sample(before, "streamer_online_degraded_total", reason=reason) == grew, reason
    assert sample(after, "streamer_online_answers_total", source="precomputed") == 1


def test_a_deadline_admission_cannot_meet_answers_the_precomputed_prediction_then_the_fallback(
        redis_server: LocalRedis) -> None:
    """A batch waits 50 ms (online.max_wait_ms); a request with 30 ms is shed for its deadline at
    once, and the store (or the constant fallback) answers it within them, flagged 'deadline'."""
    cfg = store_config(redis_server, fallback=True, max_wait_ms=50)
    precompute(redis_server, cfg.kv, "r1", {"p1": (0.9, 1_000)})
    with running(cfg, lake_house(cfg).model.serving):
        base = f"http://127.0.0.1:{cfg.online.http_port}"
        status, answer, _ = exchange(f"{base}/v1/score", event("p1", features=X), **{"X-Request-Timeout-Ms": "30"})
        assert status == 200, answer
        assert (answer["source"], answer["degraded"], answer["degraded_reason"]) == ("precomputed", True, "deadline")
        assert answer["scores"] == [0.9] and answer["parameters"]["store_ms"] < 30
        status, answer, _ = exchange(f"{base}/v1/score", event("nobody", features=X), **{"X-Request-Timeout-Ms": "30"})
        assert status == 200, answer
        assert (answer["source"], answer["degraded"], answer["degraded_reason"]) == ("scored", True, "deadline")
        assert answer["scores"] == [0.5] and answer["model_name"] == "fraud_mlp-fallback"
        after = metrics(base)
    assert sample(after, "streamer_online_degraded_total", reason="deadline") == 2
    assert sample(after, "streamer_online_shed_total", reason="deadline") == 2


class Stalled:
    """A feature source that never answers in time."""

    name = "stalled"

    async def fetch(self, entity_id: str) -> dict[str, Any]:
        await asyncio.sleep(STALL_S)
        return {}

    async def warm(self, connections: int) -> None:
        pass

    async def close(self) -> None:
        pass


def test_a_feature_fetch_past_its_timeout_answers_degraded_features_within_the_deadline(
        redis_server: LocalRedis) -> None:
    cfg = store_config(redis_server)  # online.features.timeout_ms 50, online.timeout_ms 1000
    precompute(redis_server, cfg.kv, "r1", {"p1": (0.9, 1_000)})
    # skip_ms 0: each request asks the stalled source again (test_guard.py has the skipping)
    cfg = replace(cfg, online=replace(cfg.online, features=replace(cfg.online.features, skip_ms=0)))
    with running(cfg, lake_house(cfg).model.serving, features=Stalled()):
        base = f"http://127.0.0.1:{cfg.online.http_port}"
        status, answer, _ = exchange(f"{base}/v1/score", event("p1"), timeout_s=5)
        assert status == 200, answer
        assert (answer["source"], answer["degraded"], answer["degraded_reason"]) == ("precomputed", True, "features")
        params = answer["parameters"]
        assert 50 <= params["features_ms"] < cfg.online.timeout_ms and params["queue_ms"] == 0.0
        assert "store_ms" in params
        status, error, headers = exchange(f"{base}/v1/score", event("nobody"), timeout_s=5)
        assert status == 503 and headers["Retry-After"] == "1"
        assert error["error"] == ("the stalled feature store did not answer within 50 ms (online.features.timeout_ms); "
                                  "and no precomputed prediction stands in")
        status, sent, _ = exchange(f"{base}/v1/score", event("nobody", features=X), timeout_s=5)
        assert status == 200 and sent["source"] == "scored"  # nothing lacking: nothing fetched
        after = metrics(base)
    assert sample(after, "streamer_online_degraded_total", reason="features") == 1
    assert sample(after, "streamer_online_hop_seconds_count", hop="features") == 2


def test_features_that_do_not_come_without_a_precomputed_prediction_are_answered_by_a_constant_fallback(
        redis_server: LocalRedis) -> None:
    """The degrade order's last stand-in: no precomputed prediction for the entity, and the
    constant fallback row answers, flagged 'features', its record holding the body's ids."""
    cfg = store_config(redis_server, fallback=True)
    cfg = replace(cfg, online=replace(cfg.online, features=replace(cfg.online.features, skip_ms=0)))
    with running(cfg, lake_house(cfg).model.serving, features=Stalled()):
        base = f"http://127.0.0.1:{cfg.online.http_port}"
        status, answer, _ = exchange(f"{base}/v1/score", event("nobody"), timeout_s=5)
        after = metrics(base)
    assert status == 200, answer
    assert (answer["source"], answer["degraded"], answer["degraded_reason"]) == ("scored", True, "features")
    assert answer["scores"] == [0.5] and answer["model_name"] == "fraud_mlp-fallback"
    assert (answer["event_id"], answer["entity_id"], answer["event_time"]) == ("e-nobody", "nobody", 1_700_000_000_000)
    assert answer["parameters"]["features_ms"] >= 50
    assert sample(after, "streamer_online_degraded_total", reason="features") == 1


def _burst(url: str, bodies: list[dict[str, object]], timeout_s: float) -> list[tuple[int, dict[str, Any]]]:
    """Every body POSTed at once from a client process of its own (tests/online/burst.py); each
    answer's status and JSON, in order."""
    done = subprocess.run([sys.executable, "-m", "tests.online.burst", url, str(timeout_s)],
                          input="\n".join(json.dumps(b) for b in bodies), capture_output=True, text=True,
                          timeout=timeout_s + 30, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return [tuple(json.loads(line)) for line in done.stdout.splitlines()]  # type: ignore[misc]


def _first_scored(url: str, body: dict[str, object], tries: int = 100) -> dict[str, Any]:
    """The first answer of ``body`` that is not a 503 (a guard still skipping the store), asked
    again each 50 ms; fails after ``tries``."""
    for _ in range(tries):
        status, answer, _ = exchange(url, body)
        if status != 503:
            assert status == 200, answer
            return answer
        time.sleep(0.05)
    raise AssertionError(f"still refused after {tries} tries: {answer}")


@pytest.mark.parametrize("stalled", ["features", "both"])
def test_a_stalled_store_under_load_answers_every_request_degraded_or_refused_within_its_deadline(
        redis_server: LocalRedis, tmp_path: Path, stalled: str) -> None:
    """200 concurrent entity-only requests while the features' Redis (and, for ``both``, the
    predictions' too) is stopped: each answered within its 2 s deadline (the server's latency
    histogram), the precomputed ones degraded 'features', the rest 503; none left hanging."""
    # The burst's 200 lookups share 100 connections, opened cold: kv.timeout_ms leaves them room.
    # A 2 s deadline: the server, its client and the rest of the machine share two cores, and a
    # starved event loop fires its 50 ms timers late (a fetch measured up to 630 ms).
    cfg = store_config(redis_server, timeout_ms=2000)
    cfg = replace(cfg, kv=replace(cfg.kv, timeout_ms=300),
                  online=replace(cfg.online, features=replace(cfg.online.features, skip_ms=200),
                                 cache=replace(cfg.online.cache, skip_ms=200)))
    entities = [f"u{i}" for i in range(200)]
    precompute(redis_server, cfg.kv, "r1", {e: (0.75, 1_000) for e in entities[::2]})  # every other one
    with local_redis(tmp_path / "features") as features_redis:
        kv = kv_config(features_redis, timeout_ms=200)
        load_features(features_redis, cfg.online.features.prefix, {e: {"features": X} for e in entities})
        source = RedisFeatures(cfg.online.features, kv)
        with running(cfg, lake_house(cfg).model.serving, features=source):
            base = f"http://127.0.0.1:{cfg.online.http_port}"
            status, warm, _ = exchange(f"{base}/v1/score", event("u1"))
            assert status == 200 and warm["source"] == "scored"
            assert exchange(f"{base}/v1/predictions/u0")[0] == 200  # the store's run and kinds read
            before = metrics(base)
            features_redis.pause()
            if stalled == "both":
                redis_server.pause()
            try:
                answers = _burst(f"{base}/v1/score", [event(e) for e in entities], timeout_s=5)
            finally:
                features_redis.resume()
                redis_server.resume()
            after = metrics(base)
            # resumed: once skip_ms has passed, a probe finds the store and the answers are scored again
            again = _first_scored(f"{base}/v1/score", event("u3"))
            assert again["source"] == "scored" and again["degraded"] is False
    degraded = [e for e, (status, _) in zip(entities, answers, strict=True) if status == 200]
    for status, answer in answers:
        assert status in (200, 503), answer
        if status == 200:
            assert (answer["degraded"], answer["degraded_reason"], answer["source"]) == (True, "features",
                                                                                        "precomputed")
        else:
            assert answer["error"].endswith("; and no precomputed prediction stands in"), answer
    # the first failures open the guards: the requests after them skip the stalled store at once
    skipped = [a for status, a in answers
               if status == 503 and ("skipped for 200 ms" in a["error"] or "asks are waiting on it" in a["error"])]
    skipped += [a for status, a in answers if status == 200 and a["parameters"]["features_ms"] < 50]
    assert skipped, sorted({a.get("error", "") for _, a in answers})[:5]
    if stalled == "both":
        assert degraded == []
    else:  # the precomputed ones (a lookup the loaded machine keeps past kv.timeout_ms is a 503 too)
        assert degraded and set(degraded) <= set(entities[::2]), degraded

    def grew(name: str, **labels: str) -> float:
        return sample(after, name, **labels) - sample(before, name, **labels)

    assert grew("streamer_online_request_seconds_count", transport="score") == 200
    assert grew("streamer_online_request_seconds_bucket", transport="score", le="2.0") == 200  # within 2 s
    assert grew("streamer_online_degraded_total", reason="features") == len(degraded)
    assert grew("streamer_online_hop_seconds_count", hop="features") == 200
