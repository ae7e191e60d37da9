"""Online answers from the store or fresh, on a real server over HTTP and a real Redis: entity-only
requests whose features come from Redis hashes score as the features sent in full; the modes
cached, auto and fresh say their source; the refusals (404, 409, 400, 422); the metrics."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest

from streamer.config import CacheConfig, Config, OnlineConfig
from streamer.dev.redis import LocalRedis
from streamer.errors import ConfigError
from streamer.online.server import OnlineServer
from streamer.wiring.lake import lake_house
from tests.online.doubler import running
from tests.online.store_server import (
    DAY_MS,
    exchange,
    load_features,
    metrics,
    precompute,
    sample,
    store_config,
)
from tests.online.test_served import example

RUN = "r-2026"


@pytest.fixture(scope="module")
def served(redis_server: LocalRedis) -> Iterator[tuple[str, Config]]:
    cfg = store_config(redis_server)
    cfg = replace(cfg, online=replace(cfg.online, cache=replace(cfg.online.cache, max_age_s=3600)))
    precompute(redis_server, cfg.kv, RUN, {"young": (0.9, 10_000), "old": (0.1, 2 * DAY_MS), "team/7": (0.3, 0)})
    with running(cfg, lake_house(cfg).model.serving):
        yield f"http://127.0.0.1:{cfg.online.http_port}", cfg


def event(entity: str, **fields: object) -> dict[str, object]:
    return {"event_id": f"e-{entity}", "entity_id": entity, "event_time": 1_700_000_000_000, **fields}


def test_entity_only_requests_through_redis_hashes_score_as_the_features_sent_in_full(
        served: tuple[str, Config], redis_server: LocalRedis) -> None:
    base, cfg = served
    rng = np.random.default_rng(7)
    rows = {f"u{i}": rng.normal(size=32).round(4).tolist() for i in range(20)}
    load_features(redis_server, cfg.online.features.prefix, {e: {"features": x} for e, x in rows.items()})
    for entity, x in rows.items():
        status, full, _ = exchange(f"{base}/v1/score", event(entity, features=x))
        assert status == 200, full
        status, fetched, _ = exchange(f"{base}/v1/score", event(entity))
        assert status == 200, fetched
        assert fetched["scores"] == full["scores"] and fetched["entity_id"] == entity
        assert fetched["source"] == full["source"] == "scored" and fetched["degraded"] is False
        assert full["parameters"]["features_ms"] == 0.0 < fetched["parameters"]["features_ms"]  # sent: not fetched
        assert set(fetched["parameters"]) == {"features_ms", "queue_ms", "model_ms", "encode_ms"}
    # the body's own fields win over the fetched ones
    status, overridden, _ = exchange(f"{base}/v1/score", event("u0", features=rows["u1"]))
    _, u1, _ = exchange(f"{base}/v1/score", event("u1"))
    assert status == 200 and overridden["scores"] == u1["scores"] and overridden["entity_id"] == "u0"


def test_an_entity_the_feature_store_does_not_hold_is_422_naming_it(served: tuple[str, Config],
                                                                   redis_server: LocalRedis) -> None:
    base, cfg = served
    status, error, _ = exchange(f"{base}/v1/score", event("stranger"))
    assert status == 422
    assert error["error"] == ("entity 'stranger' has no features in the redis feature store and "
                              "online.features.defaults has no value for 'features'")
    load_features(redis_server, cfg.online.features.prefix, {"partial": {"country": "FR"}})
    status, error, _ = exchange(f"{base}/v1/score", event("partial"))
    assert status == 422 and error["error"].startswith("feature 'features' of entity 'partial' is missing")


def test_cached_auto_and_fresh_say_their_source(served: tuple[str, Config]) -> None:
    base, _ = served
    x = [0.5] * 32
    status, young, _ = exchange(f"{base}/v1/score?mode=cached", event("young"))
    assert status == 200, young
    assert (young["source"], young["run_id"], young["scores"], young["degraded"]) == ("precomputed", RUN, [0.9], False)
    assert 10 <= young["age_s"] < 600 and young["event_id"] == "pre-young"
    status, old, _ = exchange(f"{base}/v1/score?mode=cached", event("old"))
    assert status == 200 and old["source"] == "precomputed" and old["age_s"] >= 2 * 86_400
    # auto: the store's when younger than online.cache.max_age_s (3600 s), else scored
    status, auto_young, _ = exchange(f"{base}/v1/score?mode=auto", event("young", features=x))
    assert status == 200 and auto_young["source"] == "precomputed" and auto_young["scores"] == [0.9]
    status, auto_old, _ = exchange(f"{base}/v1/score?mode=auto", event("old", features=x))
    assert status == 200 and auto_old["source"] == "scored" and auto_old["scores"] != [0.1], auto_old
    status, auto_none, _ = exchange(f"{base}/v1/score?mode=auto", event("nobody", features=x))
    assert status == 200 and auto_none["source"] == "scored"
    for mode in ("?mode=fresh", ""):  # the config's mode is fresh
        status, fresh, _ = exchange(f"{base}/v1/score{mode}", event("young", features=x))
        assert status == 200 and fresh["source"] == "scored" and fresh["scores"] == auto_old["scores"]
        assert "age_s" not in fresh and fresh["run_id"] is None


def test_what_cannot_be_answered_from_the_store_is_refused_with_its_reason(served: tuple[str, Config]) -> None:
    base, _ = served
    status, error, _ = exchange(f"{base}/v1/score?mode=cached", event("nobody"))
    assert status == 404 and error["error"] == ("no precomputed prediction for entity 'nobody' in the current "
                                                "complete run")
    status, error, _ = exchange(f"{base}/v1/score?mode=often", event("young"))
    assert status == 400 and error["error"] == "unknown mode 'often': it is fresh, cached or auto"
    status, error, _ = exchange(f"{base}/v1/score?mode=cached", {"event_id": "e", "event_time": 1})
    assert status == 422 and error["error"].startswith("missing field 'entity_id'")


def test_get_predictions_answers_the_precomputed_prediction_or_404(served: tuple[str, Config]) -> None:
    base, _ = served
    status, young, _ = exchange(f"{base}/v1/predictions/young")
    assert status == 200
    assert (young["source"], young["run_id"], young["scores"], young["entity_id"]) == ("precomputed", RUN, [0.9],
                                                                                       "young")
    assert young["model_version"] == "1" and 10 <= young["age_s"] < 600
    status, error, _ = exchange(f"{base}/v1/predictions/nobody")
    assert status == 404 and "'nobody'" in error["error"]
    status, slashed, _ = exchange(f"{base}/v1/predictions/team/7")  # an id holding a '/'
    assert status == 200 and slashed["entity_id"] == "team/7" and slashed["scores"] == [0.3]


def test_the_answers_are_counted_by_source_and_the_hops_observed(served: tuple[str, Config]) -> None:
    base, _ = served
    before = metrics(base)
    assert exchange(f"{base}/v1/predictions/young")[0] == 200
    assert exchange(f"{base}/v1/score?mode=cached", event("young"))[0] == 200
    assert exchange(f"{base}/v1/score", event("young", features=[0.1] * 32))[0] == 200
    after = metrics(base)

    def grew(name: str, **labels: str) -> float:
        return sample(after, name, **labels) - sample(before, name, **labels)

    assert grew("streamer_online_answers_total", source="precomputed") == 2
    assert grew("streamer_online_answers_total", source="scored") == 1
    assert grew("streamer_online_requests_total", transport="predictions", code="200") == 1
    for hop in ("queue", "model", "encode"):  # the scored answer's hops
        assert grew("streamer_online_hop_seconds_count", hop=hop) == 1, hop
    assert grew("streamer_online_hop_seconds_count", hop="features") == 0  # its features were sent
    assert sample(after, "streamer_online_degraded_total", reason="breaker") == 0  # counted from 0


def test_without_a_store_the_store_s_routes_are_409(redis_server: LocalRedis) -> None:
    cfg = replace(store_config(redis_server), kv=replace(example().kv))
    cfg = replace(cfg, online=replace(cfg.online, features=OnlineConfig().features))
    with running(cfg, lake_house(cfg).model.serving):
        base = f"http://127.0.0.1:{cfg.online.http_port}"
        status, error, _ = exchange(f"{base}/v1/predictions/young")
        assert status == 409 and error["error"] == ("no precomputed predictions are served: kv.address is not set "
                                                    "(the store they are read from)")
        status, error, _ = exchange(f"{base}/v1/score?mode=auto", event("young"))
        assert status == 409 and error["error"].startswith("mode 'auto': no precomputed predictions are served")


def test_a_default_mode_from_the_store_without_a_store_is_refused_at_start() -> None:
    cfg = replace(example(), online=OnlineConfig(grpc_port=0, cache=CacheConfig(mode="cached")))
    with pytest.raises(ConfigError) as refused:
        OnlineServer(cfg, lake_house(cfg).model.serving)
    assert refused.value.key == "online.cache.mode" and "set kv.address" in str(refused.value)
