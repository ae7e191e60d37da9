"""Entity-only requests answered through Feast's feature server (its own process, `feast serve`,
materialized into the test Redis): each scores as the same event with its features sent in full."""

from __future__ import annotations

import random
from dataclasses import replace

import pyarrow.parquet as pq

from streamer.config import OnlineConfig
from streamer.dev.redis import LocalRedis
from streamer.wiring.lake import lake_house
from tests.conftest import free_port
from tests.online.doubler import running
from tests.online.store_server import exchange, metrics
from tests.online.test_served import example
from tests.support.feast import LocalFeast
from tests.support.redis import kv_config


def test_entity_only_requests_through_feast_score_as_the_features_sent_in_full(
        feast_server: LocalFeast, redis_server: LocalRedis) -> None:
    repo = feast_server.repo
    features = repo.features_config(features=(f"{repo.view}:features",), timeout_ms=2000)
    cfg = replace(example(), kv=kv_config(redis_server),
                  online=OnlineConfig(http_port=free_port(), grpc_port=0, max_wait_ms=1, features=features))
    rows = pq.read_table(repo.parquet).to_pylist()
    chosen = random.Random(47).sample(rows, 20)
    with running(cfg, lake_house(cfg).model.serving):
        base = f"http://127.0.0.1:{cfg.online.http_port}"
        for row in chosen:
            event = {"event_id": f"e-{row['entity_id']}", "entity_id": row["entity_id"], "event_time": 1}
            status, full, _ = exchange(f"{base}/v1/score", {**event, "features": row["features"]})
            assert status == 200, full
            status, fetched, _ = exchange(f"{base}/v1/score", event)
            assert status == 200, fetched
            assert fetched["scores"] == full["scores"], row["entity_id"]
            assert fetched["source"] == "scored" and fetched["degraded"] is False
            assert fetched["parameters"]["features_ms"] > 0.0 == full["parameters"]["features_ms"]
        seen = metrics(base)
    fetches = sum(v for (name, labels), v in seen.items()
                  if name == "streamer_online_hop_seconds_count" and ("hop", "features") in labels)
    assert fetches >= 20, seen
