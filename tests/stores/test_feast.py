"""Features from Feast's feature server: the real `feast serve` (tests/support/feast.py) on a Parquet
source materialized into the session's Redis, and the answers' statuses read as Feast writes them."""

from __future__ import annotations

import asyncio
import random
import socket
from typing import Any

import pyarrow.parquet as pq
import pytest

from streamer.config import FeaturesConfig
from streamer.errors import StoreError
from streamer.stores.feast import FeastFeatures, read_answer
from tests.support.feast import LocalFeast


def feast_config(server: LocalFeast, **overrides: Any) -> FeaturesConfig:
    return server.repo.features_config(**overrides)


def fetch_all(features: FeaturesConfig, ids: list[str]) -> list[dict[str, Any]]:
    async def run() -> list[dict[str, Any]]:
        source = FeastFeatures(features)
        try:
            return [await asyncio.wait_for(source.fetch(e), 10) for e in ids]
        finally:
            await source.close()

    return asyncio.run(run())


def expected(row: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """A Parquet row as event fields: its features, a null one absent."""
    return {n: row[n] for n in names if row[n] is not None}


def test_fetched_features_equal_the_parquet_rows_for_50_random_entities(feast_server: LocalFeast) -> None:
    repo = feast_server.repo
    rows = {r[repo.entity_key]: r for r in pq.read_table(repo.parquet).to_pylist()}
    ids = random.Random(1).sample(sorted(rows), 50)
    by_refs = fetch_all(feast_config(feast_server), ids)
    by_service = fetch_all(feast_config(feast_server, features=(), feature_service=repo.service), ids[:10])
    assert by_refs == [expected(rows[e], repo.names) for e in ids]
    assert by_service == by_refs[:10]
    assert {type(got["country"]) for got in by_refs} == {str}  # "07" stays a string
    assert all(len(got["features"]) == 32 for got in by_refs)


def test_a_missing_entity_and_a_null_feature_are_absent(feast_server: LocalFeast) -> None:
    repo = feast_server.repo
    rows = pq.read_table(repo.parquet).to_pylist()
    null = next(r for r in rows if r["amount"] is None)
    nobody, with_null = fetch_all(feast_config(feast_server), ["nobody", null[repo.entity_key]])
    assert nobody == {}
    assert "amount" not in with_null and with_null == expected(null, repo.names)


def test_a_reference_the_server_does_not_know_is_a_store_error_naming_it(feast_server: LocalFeast) -> None:
    features = feast_config(feast_server, features=(f"{feast_server.view}:nope", "nosuchview:x"))
    with pytest.raises(StoreError, match=f"{feast_server.repo.url}/get-online-features: HTTP"):
        fetch_all(features, ["e0001"])


def test_a_stalled_feature_server_fails_the_fetch_within_the_callers_timeout(feast_server: LocalFeast) -> None:
    """SIGSTOP of `feast serve`: the caller's wait_for ends the fetch; without one, the source's own
    backstop does, as a StoreError; resumed, the same source answers again."""
    features = feast_config(feast_server, timeout_ms=50)

    async def run() -> tuple[BaseException | None, BaseException | None, dict[str, Any]]:
        source = FeastFeatures(features)
        try:
            await source.fetch("e0001")  # the connection is made and pooled before the stall
            feast_server.pause()
            try:
                caller: BaseException | None = None
                try:
                    await asyncio.wait_for(source.fetch("e0002"), features.timeout_ms / 1000)
                except TimeoutError as exc:
                    caller = exc
                backstop: BaseException | None = None
                try:
                    await asyncio.wait_for(source.fetch("e0003"), 30)  # 30: a hang fails, it is not waited out
                except StoreError as exc:
                    backstop = exc
            finally:
                feast_server.resume()
            return caller, backstop, await asyncio.wait_for(source.fetch("e0004"), 10)
        finally:
            await source.close()

    caller, backstop, after = asyncio.run(run())
    assert isinstance(caller, TimeoutError)
    assert backstop is not None and feast_server.repo.url in str(backstop) and "no answer within 1 s" in str(backstop)
    assert after and "features" in after


def test_a_server_that_is_not_there_is_a_store_error_naming_its_url() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        features = FeaturesConfig(kind="feast", url=f"http://127.0.0.1:{port}", features=("v:f",))
        with pytest.raises(StoreError, match=f"http://127.0.0.1:{port}/get-online-features"):
            fetch_all(features, ["e1"])


def answer(*columns: tuple[str, Any, str]) -> dict[str, Any]:
    """A get-online-features answer for one entity, a column per (name, value, status)."""
    return {"metadata": {"feature_names": [c[0] for c in columns]},
            "results": [{"values": [c[1]], "statuses": [c[2]], "event_timestamps": ["2026-12-05T12:00:00Z"]}
                        for c in columns]}


def test_a_feature_of_any_status_but_present_is_absent_even_with_a_value() -> None:
    got = read_answer(answer(("entity_id", "u1", "PRESENT"), ("amount", 12.5, "PRESENT"),
                             ("stale", 3.0, "OUTSIDE_MAX_AGE"), ("gone", 0, "NOT_FOUND"),
                             ("empty", None, "NULL_VALUE"), ("null", None, "PRESENT"),
                             ("country", "07", "PRESENT")), "entity_id")
    assert got == {"amount": 12.5, "country": "07"}


def test_an_answer_of_another_shape_is_a_store_error() -> None:
    with pytest.raises(StoreError, match="not of get-online-features' shape"):
        read_answer({"results": []}, "entity_id", "http://feast:6566")
    with pytest.raises(StoreError, match="2 feature names for 1 results"):
        read_answer({"metadata": {"feature_names": ["a", "b"]}, "results": [{"values": [1], "statuses": ["PRESENT"]}]},
                    "entity_id")


def test_a_feature_server_url_s_credentials_never_reach_an_error() -> None:
    features = FeaturesConfig(kind="feast", url="http://alice:s3cretpw@127.0.0.1:9", features=("v:f",), timeout_ms=200)

    async def fetch() -> None:
        source = FeastFeatures(features)
        try:
            await source.fetch("u1")
        finally:
            await source.close()

    with pytest.raises(StoreError) as caught:
        asyncio.run(fetch())
    assert "s3cretpw" not in str(caught.value) and "alice" not in str(caught.value)
    assert "***@127.0.0.1:9" in str(caught.value)
