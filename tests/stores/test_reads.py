"""Reading precomputed predictions and Redis-hash features from a real Redis, as the sink and the loader write them."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from streamer.config import FeaturesConfig
from streamer.dev.redis import LocalRedis
from streamer.errors import StoreError
from streamer.stores.features import RedisFeatures
from streamer.stores.keys import KeySpace, feature_key
from streamer.stores.precomputed import KINDS, PredictionStore
from streamer.stores.values import encode
from tests.support.redis import client, kv_config


def test_a_lookup_reads_the_current_runs_hash_and_a_switch_is_seen_after_the_refresh(redis_server: LocalRedis) -> None:
    kv = kv_config(redis_server)
    keys, r = KeySpace(kv.prefix), client(redis_server)
    for run, score in (("r1", 0.25), ("r2", 0.75)):
        r.hset(keys.run(run), KINDS, orjson.dumps({"model_version": "str"}))
        r.hset(keys.entity(run, "u1"), mapping={"scores": encode([score]), "model_version": encode("3"),
                                                "scored_at": encode(1_000), "run_id": encode(run)})
    now = [0.0]

    async def lookups() -> list[object]:
        store = PredictionStore(kv, refresh_s=1.0, clock=lambda: now[0])
        out: list[object] = [await store.get("u1")]  # no complete run yet
        r.set(keys.current, "r1")
        now[0] = 5.0
        out.append(await store.get("u1"))
        r.set(keys.current, "r2")
        out.append(await store.get("u1"))  # within the refresh: still r1
        now[0] = 6.5
        out.append(await store.get("u1"))
        out.append(await store.get("nobody"))
        await store.close()
        return out

    none, first, cached, second, missing = asyncio.run(lookups())
    assert none is None and missing is None
    assert first is not None and first.run_id == "r1" and first.fields["scores"] == [0.25]
    assert first.fields["model_version"] == "3" and first.scored_at_ms == 1_000 and first.age_s(3_000) == 2.0
    assert cached is not None and cached.run_id == "r1"
    assert second is not None and second.run_id == "r2" and second.fields["scores"] == [0.75]


def test_a_stalled_store_is_a_store_error_within_the_timeout(redis_server: LocalRedis) -> None:
    kv = kv_config(redis_server, timeout_ms=200)

    async def lookup() -> None:
        store = PredictionStore(kv)
        try:
            await store.get("u1")
            redis_server.pause()
            try:
                await asyncio.wait_for(PredictionStore(kv).get("u1"), 5)
            finally:
                redis_server.resume()
        finally:
            await store.close()

    with pytest.raises(StoreError, match=redis_server.address) as caught:
        asyncio.run(lookup())
    assert redis_server.password not in str(caught.value)


def test_redis_features_are_the_entitys_hash_decoded_by_the_recorded_kinds(redis_server: LocalRedis) -> None:
    kv = kv_config(redis_server)
    features = FeaturesConfig(kind="redis", prefix=f"{kv.prefix}:features")
    r = client(redis_server)
    r.hset(features.prefix, mapping={"country": "str", "features": "json", "age": "json"})
    r.hset(feature_key(features.prefix, "u1"), mapping={"country": encode("7"), "features": encode([1.5, 2.0]),
                                                        "age": encode(31)})

    async def fetch() -> tuple[dict[str, object], dict[str, object]]:
        source = RedisFeatures(features, kv)
        try:
            return await source.fetch("u1"), await source.fetch("nobody")
        finally:
            await source.close()

    found, missing = asyncio.run(fetch())
    assert found == {"country": "7", "features": [1.5, 2.0], "age": 31}
    assert missing == {}


def test_a_field_loaded_after_the_first_fetch_is_read_by_its_kind(redis_server: LocalRedis) -> None:
    """The source read the kinds before a load added a column of digit strings: an entity holding
    that field makes it read the kinds again (at most once a second), so '33' stays a string."""
    kv = kv_config(redis_server)
    features = FeaturesConfig(kind="redis", prefix=f"{kv.prefix}:features")
    r = client(redis_server)
    r.hset(features.prefix, mapping={"age": "json"})
    r.hset(feature_key(features.prefix, "u1"), mapping={"age": encode(31)})

    async def fetch() -> dict[str, object]:
        source = RedisFeatures(features, kv)
        try:
            assert await source.fetch("u1") == {"age": 31}
            r.hset(features.prefix, mapping={"country_code": "str"})
            r.hset(feature_key(features.prefix, "u1"), mapping={"country_code": encode("33")})
            source._kinds_at = float("-inf")  # a second has passed
            return await source.fetch("u1")
        finally:
            await source.close()

    assert asyncio.run(fetch()) == {"age": 31, "country_code": "33"}
