"""Online test support for answers from the store: a config whose features and precomputed
predictions live in the test Redis, the store's keys written as a run and the feature loader
write them, and one HTTP exchange or metric sample of a running server."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import replace
from email.message import Message
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from streamer.config import Config, FeaturesConfig, KvConfig, OnlineConfig
from streamer.dev.redis import LocalRedis
from streamer.stores.keys import KeySpace, feature_key
from streamer.stores.precomputed import KINDS
from streamer.stores.values import encode, kind_of
from tests.online.doubler import TIMEOUT_S, free_port
from tests.online.test_served import example
from tests.support.redis import client, kv_config

DAY_MS = 86_400_000


def store_config(redis_server: LocalRedis, fallback: bool = False, **online: Any) -> Config:
    """The example model served on a free port, its kv: store the test Redis under a fresh prefix,
    features of kind redis under ``<prefix>:features``; ``online``: other keys of ``online``."""
    kv = kv_config(redis_server, timeout_ms=200)
    features = FeaturesConfig(kind="redis", prefix=f"{kv.prefix}:features")
    cfg = replace(example(), kv=kv, online=OnlineConfig(**{"http_port": free_port(), "grpc_port": 0, "max_wait_ms": 1,
                                                          "features": features, **online}))
    if fallback:  # a constant fallback, and a breaker that stays open once opened
        cfg = replace(cfg, model=replace(cfg.model, fallback_scores=(0.5,), breaker_probe_ms=600_000,
                                         breaker_probe_max_ms=600_000))
    return cfg


def precompute(redis_server: LocalRedis, kv: KvConfig, run: str, rows: dict[str, tuple[float, int]]) -> None:
    """Run ``run``'s predictions, entity -> (its score, its age in ms), written as a complete run."""
    keys, r = KeySpace(kv.prefix), client(redis_server)
    now = int(time.time() * 1000)
    kinds: dict[str, str] = {}
    for entity, (score, age_ms) in rows.items():
        fields = {"event_id": f"pre-{entity}", "entity_id": entity, "scores": [score], "model_name": "fraud_mlp",
                  "model_version": "1", "run_id": run, "scored_at": now - age_ms, "degraded": False,
                  "degraded_reason": None}
        kinds.update({k: kind_of(v) for k, v in fields.items()})
        r.hset(keys.entity(run, entity), mapping={k: encode(v) for k, v in fields.items()})
    r.hset(keys.run(run), KINDS, json.dumps(kinds))
    r.set(keys.current, run)


def load_features(redis_server: LocalRedis, prefix: str, rows: dict[str, dict[str, Any]]) -> None:
    """Each entity's event fields as a hash under ``prefix``, their kinds in ``prefix`` itself."""
    r = client(redis_server)
    for entity, fields in rows.items():
        r.hset(prefix, mapping={k: kind_of(v) for k, v in fields.items()})
        r.hset(feature_key(prefix, entity), mapping={k: encode(v) for k, v in fields.items()})


def exchange(url: str, body: dict[str, Any] | None = None, timeout_s: float = TIMEOUT_S,
             **headers: str) -> tuple[int, dict[str, Any], Message]:
    """The status, the JSON answer and its headers of a POST of ``body`` (None: a GET) to ``url``."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data, {"content-type": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as r:
            return r.status, json.loads(r.read()), r.headers
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read()), exc.headers


def metrics(base: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the server's /metrics (one model's): (name, its labels but ``group`` and
    ``model``, sorted) -> value."""
    with urllib.request.urlopen(f"{base}/metrics", timeout=TIMEOUT_S) as r:
        text = r.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k not in ("group", "model")))] = s.value
    return out


def sample(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)
