"""Online scoring under load: `streamer serve` driven by vegeta, an open-loop HTTP load generator.

    make vegeta && python benchmarks/online.py [--model heavy|demo] [--seconds S] [--rows R]
    make vegeta && python benchmarks/online.py --beside-stream [--events N] [--rate R]
    make vegeta && python benchmarks/online.py --stacks            # uvicorn against granian (the bench extra)
    make vegeta && python benchmarks/online.py --store             # entity-only requests, features in Redis

For each server setting (dynamic batching: ``batching.max_size`` rows, ``online.max_wait_ms``; and
``online.max_size: 1``, one model call per request), a fresh `streamer serve` process:

- saturation: vegeta with no rate limit and a pool of workers (``-rate=0 -max-workers=W``) for
  ``--seconds``: the requests answered per second when every worker always has one outstanding;
- then an open loop at 50% of the batched saturation rate (``-rate=R``): requests are sent on
  schedule whatever the answers' latency, so a slow answer cannot hold the next request back
  (coordinated omission): the answered requests' p50 and p99, and the requests shed (503, and
  how long a refusal took) or failed. Every request's deadline is ``--timeout-ms`` (100 ms).

Each request is one Open Inference Protocol infer of ``--rows`` rows of 32 features as JSON. The
line per setting and the ratio of the saturation rates are the figures.

``--stacks``: the same HTTP application (benchmarks/online_app.py) under uvicorn (with httptools)
and under granian, each at saturation, twice: the measurement the server stack was chosen by.

``--beside-stream``: on a broker started here, `streamer run` scores ``--events`` demo events from
a topic, alone, then again (a fresh topic and group) with ``online.enabled`` while vegeta sends
``--rate`` requests/s in an open loop: the stream's events/s in both runs (from the run's start
to its last prediction on the output topic), and the online p50/p99 and shed count beside it.

``--store``: the feature fetch in the path, and the same load with the store stalled
(benchmarks/online_store.py). A benchmark, not a test: comparable within one run on one machine.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from streamer.formats.configured import input_codec

ROOT = Path(__file__).resolve().parents[1]
VEGETA = ROOT / ".cache" / "bin" / "vegeta-v12.12.0" / "vegeta"
MODELS = {"heavy": ROOT / "models" / "fraud_encoder.onnx", "demo": ROOT / "models" / "fraud_mlp.onnx"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def config(work: Path, model: Path, port: int, max_size: int | None, max_wait_ms: int, timeout_ms: int) -> Path:
    doc = yaml.safe_load((ROOT / "deploy" / "config" / "example.yaml").read_text())
    doc["model"].update(path=str(model), providers=["cpu"])
    doc["input"]["schema"] = str(ROOT / "streamer" / "schemas" / "feature_event.avsc")
    doc["output"]["schema"] = str(ROOT / "streamer" / "schemas" / "prediction.avsc")
    doc["online"] = {"http_port": port, "grpc_port": 0, "max_wait_ms": max_wait_ms, "timeout_ms": timeout_ms,
                     "max_queue_rows": 4096, **({"max_size": max_size} if max_size else {})}
    path = work / f"serve-{max_size or 'batched'}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def start(path: Path, port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-m", "streamer", "--log-level", "WARNING", "serve", "--config", str(path)],
                            env={**os.environ, "KAFKA_BOOTSTRAP": "127.0.0.1:1"})
    wait_ready(port, proc, "streamer serve")
    return proc


def wait_ready(port: int, proc: subprocess.Popen[bytes], name: str) -> None:
    """Until ``/v2/health/ready`` answers 200 (polled as a load balancer would); exits if ``proc`` ends first."""
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{name} did not become ready")
        time.sleep(0.1)


def attack(target: Path, seconds: float, rate: int | None, workers: int) -> dict[str, Any]:
    """One vegeta run; its report as JSON (latencies in ns, status codes), and ``by_code``: each
    status code's latencies in ms (an answer's and a refusal's latency apart)."""
    pace = ["-rate=0", f"-max-workers={workers}"] if rate is None else [f"-rate={rate}", f"-workers={workers}"]
    attack = subprocess.run([str(VEGETA), "attack", f"-targets={target}", f"-duration={seconds}s", "-timeout=10s",
                             *pace], capture_output=True, check=True)
    return results(attack.stdout)


def results(raw: bytes) -> dict[str, Any]:
    """vegeta's results (``raw``, as its attack writes them): its report, and ``by_code``."""
    report = subprocess.run([str(VEGETA), "report", "-type=json"], input=raw, capture_output=True, check=True)
    rows = subprocess.run([str(VEGETA), "encode", "--to=csv"], input=raw, capture_output=True, check=True)
    by_code: dict[str, list[float]] = {}
    for row in csv.reader(io.StringIO(rows.stdout.decode())):  # timestamp, code, latency (ns), ...
        by_code.setdefault(row[1], []).append(int(row[2]) / 1e6)
    return {**json.loads(report.stdout), "by_code": {k: np.array(v) for k, v in by_code.items()}}


def targets(work: Path, port: int, rows: int) -> Path:
    x = np.random.default_rng(1).normal(size=(rows, 32)).astype(np.float32)
    body = work / "infer.json"
    body.write_text(json.dumps({"inputs": [{"name": "features", "shape": [rows, 32], "datatype": "FP32",
                                            "data": x.ravel().tolist()}]}))
    target = work / "targets.txt"
    target.write_text(f"POST http://127.0.0.1:{port}/v2/models/fraud_mlp/infer\n"
                      f"Content-Type: application/json\n@{body}\n")
    return target


def line(name: str, r: dict[str, Any]) -> str:
    """Answered requests per second (200) and their p50/p99; the shed ones (503) and their p99."""
    codes, by_code = r.get("status_codes", {}), r["by_code"]
    ok, shed = by_code.get("200", np.zeros(0)), by_code.get("503", np.zeros(0))
    p50, p99 = (np.percentile(ok, 50), np.percentile(ok, 99)) if len(ok) else (np.nan, np.nan)
    return (f"{name:<34} {r['throughput']:>7,.0f} req/s answered   p50 {p50:7.2f} ms   p99 {p99:7.2f} ms   "
            f"shed (503) {len(shed):>6}" + (f" (p99 {np.percentile(shed, 99):.0f} ms)" if len(shed) else "")
            + f"   other errors {sum(v for k, v in codes.items() if k not in ('200', '503')):>4}")


def stream_run(bootstrap: str, work: Path, name: str, n: int, model: Path, online_port: int | None,
               timeout_ms: int) -> tuple[Any, float]:
    """`streamer run` over ``n`` fresh events; returns the process (still running) and the seconds it took
    to write every prediction."""
    from streamer.commands.demo import encoded_events, produce_events, synthetic_events
    from streamer.config_file import load_config
    from streamer.kafka.topics import create_topics

    topic, out = f"bench-in-{name}", f"bench-out-{name}"
    create_topics(bootstrap, {topic: 3, out: 3})
    doc = yaml.safe_load((ROOT / "deploy" / "config" / "example.yaml").read_text())
    doc["kafka"] = {"bootstrap.servers": bootstrap}
    doc["input"].update(topics=[topic], group_id=f"bench-{name}", schema=str(ROOT / "streamer/schemas/feature_event.avsc"))
    doc["output"].update(topic=out, schema=str(ROOT / "streamer/schemas/prediction.avsc"))
    doc["model"].update(path=str(model), providers=["cpu"])
    if online_port is not None:
        doc["online"] = {"enabled": True, "http_port": online_port, "grpc_port": 0, "max_wait_ms": 2,
                         "timeout_ms": timeout_ms}
    path = work / f"run-{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    produce_events(bootstrap, topic, encoded_events(input_codec(load_config(path).input), synthetic_events(n, 32, seed=2)))
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "streamer", "--log-level", "WARNING", "run", "--config", str(path)])
    return proc, started


def written(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-watermarks"})
    try:
        meta = c.list_topics(topic, timeout=10).topics[topic].partitions
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in meta)
    finally:
        c.close()


def stacks(args: argparse.Namespace) -> None:
    bin_ = Path(sys.executable).parent
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        for name in ("uvicorn", "granian"):
            port = free_port()
            cfg = config(work, MODELS[args.model], port, None, args.max_wait_ms, args.timeout_ms)
            argv = ([sys.executable, "-m", "uvicorn", "online_app:app", "--http", "httptools", "--no-access-log"]
                    if name == "uvicorn" else [str(bin_ / "granian"), "--interface", "asgi", "--workers", "1",
                                               "online_app:app"])
            argv += ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
            proc = subprocess.Popen(argv, cwd=Path(__file__).parent, env={**os.environ, "STREAMER_CONFIG": str(cfg),
                                                                           "KAFKA_BOOTSTRAP": "127.0.0.1:1"})
            try:
                wait_ready(port, proc, name)
                target = targets(work, port, args.rows)
                attack(target, 2, None, args.workers)
                for round_ in (1, 2):
                    print(line(f"{name}, round {round_}", attack(target, args.seconds, None, args.workers)), flush=True)
            finally:
                proc.terminate()
                proc.wait(30)


def beside_stream(args: argparse.Namespace) -> None:
    from streamer.dev.broker import kafka_cluster

    model = MODELS[args.model]
    with kafka_cluster() as bootstrap, tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        rates: dict[str, float] = {}
        report: dict[str, Any] = {}
        for name, online in (("alone", False), ("beside", True)):
            port = free_port() if online else None
            proc, started = stream_run(bootstrap, work, name, args.events, model, port, args.timeout_ms)
            try:
                if port is not None:
                    wait_ready(port, proc, "the online server beside the stream")
                    load = subprocess.Popen([str(VEGETA), "attack", f"-targets={targets(work, port, args.rows)}",
                                             f"-rate={args.rate}", "-duration=600s", "-timeout=10s"],
                                            stdout=subprocess.PIPE)
                while written(bootstrap, f"bench-out-{name}") < args.events:
                    time.sleep(0.2)  # the output topic's end, read on a schedule: the stream's progress
                rates[name] = args.events / (time.monotonic() - started)
                if port is not None:
                    load.terminate()
                    out, _ = load.communicate(timeout=30)
                    report = results(out)
            finally:
                proc.terminate()
                proc.wait(60)
    print(f"model {args.model}, {args.events:,} stream events on 3 partitions, online open loop at {args.rate} req/s "
          f"of {args.rows} row(s), {os.cpu_count()} CPUs")
    print(f"stream alone            {rates['alone']:>10,.0f} events/s")
    print(f"stream beside online    {rates['beside']:>10,.0f} events/s ({rates['beside'] / rates['alone']:.2f}x)")
    print(line("online beside the stream", report))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(MODELS), default="heavy")
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--rows", type=int, default=1, help="rows per request (default 1)")
    ap.add_argument("--workers", type=int, default=64, help="vegeta's workers at saturation (default 64)")
    ap.add_argument("--max-wait-ms", type=int, default=2, help="online.max_wait_ms of the batched server")
    ap.add_argument("--timeout-ms", type=int, default=100, help="online.timeout_ms: each request's deadline")
    ap.add_argument("--beside-stream", action="store_true", help="the stream's rate alone and beside online load")
    ap.add_argument("--stacks", action="store_true", help="the same app under uvicorn and granian, at saturation")
    ap.add_argument("--rates", default="", help="more open-loop rates after 50%% of saturation, e.g. 500,1000,4000")
    ap.add_argument("--events", type=int, default=200_000, help="--beside-stream: the stream's events")
    ap.add_argument("--rate", type=int, default=500, help="--beside-stream: online requests per second")
    ap.add_argument("--store", action="store_true", help="entity-only requests, features fetched from Redis, "
                                                          "then the store stalled (benchmarks/online_store.py)")
    import online_store  # benchmarks/: beside this file

    online_store.add_flags(ap)
    args = ap.parse_args()
    if not VEGETA.exists():
        raise SystemExit(f"no {VEGETA}: run make vegeta")
    if args.beside_stream:
        beside_stream(args)
        return
    if args.stacks:
        stacks(args)
        return
    if args.store:
        online_store.main(args)
        return
    results: dict[str, dict[str, dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        for name, max_size in (("batched", None), ("max_size 1", 1)):
            port = free_port()
            proc = start(config(work, MODELS[args.model], port, max_size, args.max_wait_ms, args.timeout_ms), port)
            try:
                target = targets(work, port, args.rows)
                attack(target, 2, None, args.workers)  # warm the server and the client
                results[name] = {"saturation": attack(target, args.seconds, None, args.workers)}
            finally:
                proc.terminate()
                proc.wait(30)
        half = max(1, int(results["batched"]["saturation"]["throughput"] / 2))
        rates = [half] + [int(r) for r in args.rates.split(",") if r]
        for name, max_size in (("batched", None), ("max_size 1", 1)):
            port = free_port()
            proc = start(config(work, MODELS[args.model], port, max_size, args.max_wait_ms, args.timeout_ms), port)
            try:
                target = targets(work, port, args.rows)
                attack(target, 2, half, args.workers)
                for rate in rates:
                    results[name][f"rate {rate}"] = attack(target, args.seconds, rate, args.workers)
            finally:
                proc.terminate()
                proc.wait(30)
    print(f"model {args.model} ({MODELS[args.model].name}), {args.rows} row(s) per request, "
          f"online.max_wait_ms {args.max_wait_ms}, online.timeout_ms {args.timeout_ms}, {args.seconds:g} s per run, "
          f"{os.cpu_count()} CPUs")
    for name in results:
        print(line(f"{name}: saturation", results[name]["saturation"]))
    for rate in rates:
        for name in results:
            print(line(f"{name}: open loop at {rate:,} req/s", results[name][f"rate {rate}"]))
    ratio = results["batched"]["saturation"]["throughput"] / results["max_size 1"]["saturation"]["throughput"]
    print(f"(o) saturation with dynamic batching / max_size 1 = {ratio:.2f}x (target >= 5x)")


if __name__ == "__main__":
    main()
