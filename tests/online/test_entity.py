"""Entity-only events completed from a feature source: fetched fields merged under the body's,
defaults for what is still missing, 422 naming a field without one, a fetch bounded by its timeout."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from streamer.config import FeaturesConfig
from streamer.errors import Refused, StoreError
from streamer.online.entity import EntityFeatures
from streamer.wiring.lake import lake_house
from tests.online.test_served import example


class Held:
    """A feature source of fixed fields per entity; ``delay_s`` before each answer."""

    name = "held"

    def __init__(self, rows: dict[str, dict[str, Any]], delay_s: float = 0.0) -> None:
        self.rows, self.delay_s = rows, delay_s

    async def fetch(self, entity_id: str) -> dict[str, Any]:
        await asyncio.sleep(self.delay_s)
        return dict(self.rows.get(entity_id, {}))

    async def warm(self, connections: int) -> None:
        pass

    async def close(self) -> None:
        pass


def entity(source: Held, **features: Any) -> EntityFeatures:
    contract = lake_house(example()).model.serving.runner.contract
    return EntityFeatures(source, FeaturesConfig(kind="redis", **features), contract)


def complete(e: EntityFeatures, payload: dict[str, Any], entity_id: str) -> dict[str, Any]:
    return asyncio.run(e.complete(payload, entity_id, time.monotonic() + 5))


def test_fetched_fields_go_under_the_body_s_and_defaults_fill_what_is_missing() -> None:
    x = [1.0] * 32
    e = entity(Held({"a": {"features": x, "country": "FR"}}), defaults={"features": [0.0] * 32})
    assert e.missing({"entity_id": "a"}) == ["features"] and e.missing({"features": x}) == []
    assert complete(e, {"entity_id": "a", "country": "DE"}, "a") == {"entity_id": "a", "features": x, "country": "DE"}
    assert complete(e, {"entity_id": "b"}, "b") == {"entity_id": "b", "features": [0.0] * 32}  # none held: defaults


def test_a_missing_entity_or_feature_without_a_default_is_422_naming_it() -> None:
    e = entity(Held({"a": {"country": "FR"}}))
    with pytest.raises(Refused, match="entity 'b' has no features in the held feature store") as caught:
        complete(e, {"entity_id": "b"}, "b")
    assert caught.value.status == 422
    with pytest.raises(Refused, match="feature 'features' of entity 'a' is missing from the held feature store"):
        complete(e, {"entity_id": "a"}, "a")


def test_a_fetch_past_its_timeout_is_a_store_error_naming_the_timeout() -> None:
    """Without the timeout the fetch would answer, after 5 s, with the entity's fields."""
    e = entity(Held({"a": {"features": [1.0] * 32}}, delay_s=5), timeout_ms=20)
    with pytest.raises(StoreError, match="the held feature store did not answer within 20 ms"):
        complete(e, {"entity_id": "a"}, "a")
