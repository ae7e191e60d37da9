"""Online answers with the feature fetch in the path: entity-only requests against features in Redis,
then the same load with the store stalled.

    make vegeta && python benchmarks/online.py --store [--model heavy|demo] [--seconds S] [--entities N]

One redis-server (streamer/dev/redis.py's LocalRedis, with a password) holds ``--entities``
entities' features as the ``redis`` kind's hashes (``<online.features.prefix>:<entity>``, the
feature array ``features`` of 32 floats, and the kinds hash), and one `streamer serve` fetches
them (``online.features.kind: redis``, ``timeout_ms`` 50). Every request is ``POST /v1/score``
with the entity id alone, ``{"entity_id": "e123"}``, one vegeta target per entity (round robin
over ``--targets`` of them), under the server's 100 ms deadline (``online.timeout_ms``).

1. The fetch's own p99: the server's fetch (stores/features.py's RedisFeatures.fetch, its client
   and its decoding) in a client loop, one at a time over random entities, with no other load.
2. Saturation: vegeta with no rate limit and ``--workers`` workers.
3. An open loop at half of saturation (requests sent on schedule whatever the answers' latency):
   the answered requests' p50 and p99 against the bound "the fetch's p99 + ``online.max_wait_ms``
   + one model call (the p99 of the answers' ``model_ms``) + 5 ms"; and the answers' hops
   (``parameters``: ``features_ms``, ``queue_ms``, ``model_ms``) at p99.
   ``--rates`` adds open loops at other rates (each then stalled too).
4. The same rate with the store stalled (LocalRedis.pause(): SIGSTOP, the server accepts
   connections and answers nothing): every fetch passes its timeout and the answer takes the
   degrade path (the precomputed prediction, looked up in the same stalled store under
   ``kv.timeout_ms`` and the deadline's rest, so here a 503 with Retry-After). The p99 of every
   answer against "``online.features.timeout_ms`` + the degrade path's bound (``kv.timeout_ms``) +
   5 ms", and the requests left unanswered (vegeta's code 0: no answer within its 10 s), which
   must be 0.
5. The same rate against the same server with its features in a Redis of their own
   (benchmarks/online_store_app.py), healthy, then that Redis alone stalled, as a stuck feature
   server stalls: the degrade path answers each entity's precomputed prediction (a complete run
   of every entity, written in the readers' layout), flagged ``degraded`` with the reason
   ``features``. The p99 of every answer against "``online.features.timeout_ms`` + the degrade
   path (the precomputed lookup's own p99, PredictionStore.get in a client loop) + 5 ms".

A benchmark, not a test: comparable within one run on one machine.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from online import MODELS, ROOT, VEGETA, free_port, results, wait_ready

from streamer.config import FeaturesConfig, KvConfig, Secret
from streamer.dev.redis import LocalRedis
from streamer.stores.keys import KeySpace, feature_key
from streamer.stores.precomputed import KINDS
from streamer.stores.values import encode, kind_of

PREFIX = "bench:features"
KV_PREFIX = "bench"
FEATURES_TIMEOUT_MS = 50
KV_TIMEOUT_MS = 20
DEADLINE_MS = 100
MEASURE_TIMEOUT_MS = 2000  # the client loops measure the latency; they do not enforce a bound


def load_features(server: LocalRedis, entities: int) -> None:
    """``entities`` hashes of the redis kind (as ``streamer features load`` writes them), and the kinds."""
    import redis

    client = redis.Redis(host="127.0.0.1", port=server.port, password=server.password, socket_timeout=30)
    x = np.random.default_rng(3).normal(size=(entities, 32)).astype(np.float32)
    pipe = client.pipeline(transaction=False)
    pipe.hset(PREFIX, mapping={"features": "json"})
    for i in range(entities):
        pipe.hset(feature_key(PREFIX, f"e{i}"), mapping={"features": encode(x[i].tolist())})
        if i % 1000 == 999:
            pipe.execute()
    pipe.execute()
    client.close()


def write_predictions(server: LocalRedis, entities: int) -> None:
    """A complete run's precomputed prediction of every entity, in the layout readers use
    (stores/keys.py: the run's hashes, its record with the kinds, the ``current`` alias)."""
    import redis

    keys, run, now_ms = KeySpace(KV_PREFIX), "bench-run", int(time.time() * 1000)
    client = redis.Redis(host="127.0.0.1", port=server.port, password=server.password, socket_timeout=30)
    scores = np.random.default_rng(6).random(entities)
    pipe = client.pipeline(transaction=False)
    for i in range(entities):
        fields = {"event_id": f"pre-{i}", "entity_id": f"e{i}", "scores": [float(scores[i])], "model_name": "fraud_mlp",
                  "model_version": "1", "run_id": run, "scored_at": now_ms, "degraded": False}
        pipe.hset(keys.entity(run, f"e{i}"), mapping={k: encode(v) for k, v in fields.items()})
        if i % 1000 == 999:
            pipe.execute()
    kinds = {k: kind_of(v) for k, v in fields.items()}
    pipe.hset(keys.run(run), mapping={KINDS: json.dumps(kinds), "finished_at": now_ms})
    pipe.set(keys.current, run)
    pipe.execute()
    client.close()


def lookup_p99(server: LocalRedis, entities: int, lookups: int) -> float:
    """The p99 in ms of ``lookups`` sequential precomputed lookups (stores/precomputed.py), alone."""
    from streamer.stores.precomputed import PredictionStore

    kv = KvConfig(address=server.address, password=Secret(server.password), prefix=KV_PREFIX, timeout_ms=MEASURE_TIMEOUT_MS)
    picks = np.random.default_rng(7).integers(0, entities, size=lookups + 200)

    async def loop() -> list[float]:
        store = PredictionStore(kv)
        took = []
        try:
            for n, i in enumerate(picks):
                at = time.perf_counter()
                found = await store.get(f"e{i}")
                if n >= 200:
                    took.append((time.perf_counter() - at) * 1000)
                assert found is not None
        finally:
            await store.close()
        return took

    return float(np.percentile(asyncio.run(loop()), 99))


def fetch_p99(server: LocalRedis, entities: int, fetches: int) -> float:
    """The p99 in ms of ``fetches`` sequential fetches by the server's own feature source, alone."""
    from streamer.stores.features import RedisFeatures

    kv = KvConfig(address=server.address, password=Secret(server.password), timeout_ms=MEASURE_TIMEOUT_MS)
    cfg = FeaturesConfig(kind="redis", prefix=PREFIX, timeout_ms=FEATURES_TIMEOUT_MS)
    picks = np.random.default_rng(4).integers(0, entities, size=fetches + 200)

    async def loop() -> list[float]:
        source = RedisFeatures(cfg, kv)
        took = []
        try:
            for n, i in enumerate(picks):
                at = time.perf_counter()
                got = await source.fetch(f"e{i}")
                if n >= 200:  # the first ones warm the connection and the kinds
                    took.append((time.perf_counter() - at) * 1000)
                assert len(got["features"]) == 32
        finally:
            await source.close()
        return took

    return float(np.percentile(asyncio.run(loop()), 99))


def config(work: Path, model: Path, port: int, server: LocalRedis, max_wait_ms: int) -> Path:
    doc = yaml.safe_load((ROOT / "deploy" / "config" / "example.yaml").read_text())
    doc["model"].update(path=str(model), providers=["cpu"])
    doc["input"]["schema"] = str(ROOT / "streamer" / "schemas" / "feature_event.avsc")
    doc["output"]["schema"] = str(ROOT / "streamer" / "schemas" / "prediction.avsc")
    doc["kv"] = {"address": server.address, "password": "${KV_PASSWORD}", "prefix": KV_PREFIX, "timeout_ms": KV_TIMEOUT_MS}
    doc["online"] = {"http_port": port, "grpc_port": 0, "max_wait_ms": max_wait_ms, "timeout_ms": DEADLINE_MS,
                     "max_queue_rows": 4096,
                     "features": {"kind": "redis", "prefix": PREFIX, "timeout_ms": FEATURES_TIMEOUT_MS}}
    path = work / "serve-store.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def targets(work: Path, port: int, entities: int, count: int) -> Path:
    """vegeta's JSON targets: ``count`` entity-only requests, one per entity picked at random."""
    picks = np.random.default_rng(5).choice(entities, size=min(count, entities), replace=False)
    path = work / "entity-targets.json"
    with path.open("w") as out:
        for i in picks:
            body = base64.b64encode(json.dumps({"entity_id": f"e{i}"}).encode()).decode()
            out.write(json.dumps({"method": "POST", "url": f"http://127.0.0.1:{port}/v1/score", "body": body,
                                  "header": {"Content-Type": ["application/json"]}}) + "\n")
    return path


def attack(target: Path, seconds: float, rate: int | None, workers: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One vegeta run: its report (online.py's ``results``) and every result with its answer's JSON."""
    pace = ["-rate=0", f"-max-workers={workers}"] if rate is None else [f"-rate={rate}", f"-workers={workers}"]
    raw = subprocess.run([str(VEGETA), "attack", "-format=json", f"-targets={target}", f"-duration={seconds}s",
                          "-timeout=10s", *pace], capture_output=True, check=True).stdout
    encoded = subprocess.run([str(VEGETA), "encode", "--to=json"], input=raw, capture_output=True, check=True).stdout
    answers = []
    for row in encoded.decode().splitlines():
        r = json.loads(row)
        body = base64.b64decode(r.get("body") or b"")
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = None
        answers.append({"code": r["code"], "ms": r["latency"] / 1e6, "answer": parsed})
    return results(raw), answers


def summary(name: str, report: dict[str, Any], answers: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures of one run: answered per second, p50/p99 of each status, the hops' p99, unanswered."""
    ok = np.array([a["ms"] for a in answers if a["code"] == 200])
    every = np.array([a["ms"] for a in answers if a["code"] != 0])
    codes: dict[str, int] = {}
    for a in answers:
        codes[str(a["code"])] = codes.get(str(a["code"]), 0) + 1
    hops = {}
    for hop in ("features_ms", "queue_ms", "model_ms", "encode_ms"):
        got = [a["answer"]["parameters"][hop] for a in answers
               if a["code"] == 200 and a["answer"] and hop in a["answer"].get("parameters", {})]
        hops[hop] = float(np.percentile(got, 99)) if got else float("nan")
    degraded: dict[str, int] = {}
    for a in answers:
        if a["code"] == 200 and a["answer"] and a["answer"].get("degraded"):
            reason = str(a["answer"].get("degraded_reason"))
            degraded[reason] = degraded.get(reason, 0) + 1
    errors: dict[str, int] = {}
    for a in answers:
        if a["code"] not in (0, 200) and a["answer"]:
            said = re.sub(r"127\.0\.0\.1:\d+", "ADDRESS", str(a["answer"].get("error", "")))
            errors[said] = errors.get(said, 0) + 1
    return {"name": name, "throughput": report["throughput"], "errors": errors, "requests": len(answers), "codes": codes,
            "ok_p50": pct(ok, 50), "ok_p99": pct(ok, 99), "all_p50": pct(every, 50), "all_p99": pct(every, 99),
            "all_max": float(every.max()) if len(every) else float("nan"), "hops_p99": hops, "degraded": degraded,
            "unanswered": codes.get("0", 0), "late": int((every > DEADLINE_MS).sum())}


def pct(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else float("nan")


def show(s: dict[str, Any]) -> str:
    codes = ", ".join(f"{k}: {v}" for k, v in sorted(s["codes"].items()))
    hops = "  ".join(f"{k.removesuffix('_ms')} {v:.2f}" for k, v in s["hops_p99"].items())
    return (f"{s['name']:<32} {s['throughput']:>7,.0f} req/s   200 p50 {s['ok_p50']:6.2f} p99 {s['ok_p99']:7.2f} ms   "
            f"every answer p50 {s['all_p50']:6.2f} p99 {s['all_p99']:7.2f} max {s['all_max']:7.2f} ms   codes {{{codes}}}   "
            f"unanswered {s['unanswered']}   past the deadline {s['late']}   degraded {s['degraded'] or 0}   hops p99 (ms): {hops}"
            + "".join(f"\n    {n} x {text}" for text, n in sorted(s["errors"].items(), key=lambda e: -e[1])[:3]))


def stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is not None:
        proc.terminate()
        proc.wait(30)


def healthy_then_stalled(args: argparse.Namespace, target: Path, rate: int, stalled: LocalRedis,
                         names: tuple[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The open loop at ``rate`` (after 2 s of it, unmeasured), then the same with ``stalled``
    paused (SIGSTOP); each run's summary under its name."""
    attack(target, 2, rate, args.workers)
    healthy = summary(names[0], *attack(target, args.seconds, rate, args.workers))
    stalled.pause()
    try:
        return healthy, summary(names[1], *attack(target, args.seconds, rate, args.workers))
    finally:
        stalled.resume()


def main(args: argparse.Namespace) -> None:
    model = MODELS[args.model]
    load_before = os.getloadavg()[0]
    rates: list[int] = []
    runs: list[tuple[dict[str, Any], dict[str, Any]]] = []
    apart_runs: list[tuple[dict[str, Any], dict[str, Any]]] = []
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        store, features_store = LocalRedis(work / "redis"), LocalRedis(work / "redis-features")
        store.start()
        features_store.start()
        proc = None
        try:
            load_features(store, args.entities)
            load_features(features_store, args.entities)
            write_predictions(store, args.entities)
            fetch = fetch_p99(store, args.entities, args.fetches)
            lookup = lookup_p99(store, args.entities, args.fetches)
            port = free_port()
            cfg = config(work, model, port, store, args.max_wait_ms)
            env = {**os.environ, "KAFKA_BOOTSTRAP": "127.0.0.1:1", "KV_PASSWORD": store.password}
            proc = subprocess.Popen([sys.executable, "-m", "streamer", "--log-level", "ERROR", "serve", "--config",
                                     str(cfg)], env=env)
            wait_ready(port, proc, "streamer serve")
            target = targets(work, port, args.entities, args.targets)
            attack(target, 2, None, args.workers)  # warm the server, its connections and the client
            saturation = summary("saturation", *attack(target, args.seconds, None, args.workers))
            rates = [max(1, int(saturation["throughput"] / 2))] + [int(r) for r in args.rates.split(",") if r]
            for rate in rates:
                runs.append(healthy_then_stalled(args, target, rate, store,
                                                 (f"open loop at {rate:,} req/s", f"one store stalled, {rate:,} req/s")))
            stop(proc)
            # The features in a Redis of their own (benchmarks/online_store_app.py), stalled alone:
            # the degrade path answers the precomputed predictions, which stay reachable.
            proc = subprocess.Popen([sys.executable, "online_store_app.py"], cwd=Path(__file__).parent,
                                    env={**env, "STREAMER_CONFIG": str(cfg), "FEATURES_ADDRESS": features_store.address,
                                         "FEATURES_PASSWORD": features_store.password})
            wait_ready(port, proc, "the server with its features apart")
            for rate in rates:
                apart_runs.append(healthy_then_stalled(args, target, rate, features_store,
                                                       (f"features apart, {rate:,} req/s",
                                                        f"features stalled, {rate:,} req/s")))
        finally:
            stop(proc)
            store.stop()
            features_store.stop()
    store_bound = FEATURES_TIMEOUT_MS + KV_TIMEOUT_MS + 5
    degrade_bound = FEATURES_TIMEOUT_MS + lookup + 5
    print(f"model {args.model} ({model.name}), entity-only POST /v1/score, features from Redis "
          f"({args.entities:,} entities, {args.targets:,} targets), online.max_wait_ms {args.max_wait_ms}, "
          f"online.features.timeout_ms {FEATURES_TIMEOUT_MS}, kv.timeout_ms {KV_TIMEOUT_MS}, "
          f"online.timeout_ms {DEADLINE_MS}, {args.seconds:g} s per run, {os.cpu_count()} CPUs "
          f"(load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after)")
    print(f"alone, {args.fetches:,} one at a time: the fetch (RedisFeatures.fetch) p99 {fetch:.3f} ms, "
          f"the precomputed lookup (PredictionStore.get) p99 {lookup:.3f} ms")
    print(show(saturation))
    bounds = []
    for healthy, stalled in runs:
        print(show(healthy))
        print(show(stalled))
        model_p99 = healthy["hops_p99"]["model_ms"]
        bound = fetch + args.max_wait_ms + model_p99 + 5
        bounds.append(bound)
        print(f"  p99 {healthy['ok_p99']:.2f} ms against the fetch's p99 + max_wait_ms + one model call + 5 ms = "
              f"{fetch:.2f} + {args.max_wait_ms} + {model_p99:.2f} + 5 = {bound:.2f} ms: "
              f"{'within' if healthy['ok_p99'] <= bound else 'OVER'}")
        print(f"  one store stalled: p99 of every answer {stalled['all_p99']:.2f} ms against features.timeout_ms + "
              f"the degrade path's bound (kv.timeout_ms) + 5 ms = {store_bound} ms: "
              f"{'within' if stalled['all_p99'] <= store_bound else 'OVER'}; unanswered {stalled['unanswered']}")
    for apart, degraded in apart_runs:
        print(show(apart))
        print(show(degraded))
        print(f"  features stalled: p99 of every answer {degraded['all_p99']:.2f} ms against features.timeout_ms + "
              f"the degrade path (the lookup's p99) + 5 ms = {FEATURES_TIMEOUT_MS} + {lookup:.2f} + 5 = "
              f"{degrade_bound:.2f} ms: {'within' if degraded['all_p99'] <= degrade_bound else 'OVER'}; "
              f"unanswered {degraded['unanswered']}")
    if args.json:
        Path(args.json).write_text(json.dumps({"fetch_p99_ms": fetch, "lookup_p99_ms": lookup, "saturation": saturation,
                                               "rates": rates, "runs": runs, "bounds_ms": bounds,
                                               "features_apart": apart_runs, "store_bound_ms": store_bound,
                                               "degrade_bound_ms": degrade_bound}, indent=1))


def add_flags(ap: argparse.ArgumentParser) -> None:
    """This mode's own flags, beside online.py's (--model, --seconds, --workers, --max-wait-ms)."""
    ap.add_argument("--entities", type=int, default=10_000, help="--store: entities whose features Redis holds")
    ap.add_argument("--targets", type=int, default=2_000, help="--store: distinct entity-only requests vegeta sends")
    ap.add_argument("--fetches", type=int, default=5_000, help="--store: fetches timed alone for the fetch's p99")
    ap.add_argument("--json", default="", help="--store: also write the figures to this file")


if __name__ == "__main__":
    sys.exit("run it as python benchmarks/online.py --store")
