"""Online scoring under load: `streamer serve` driven by vegeta, an open-loop HTTP load generator.

    make vegeta && python benchmarks/online.py [--model heavy|demo] [--seconds S] [--rows R]

For each server setting (dynamic batching: ``batching.max_size`` rows, ``online.max_wait_ms``; and
``online.max_size: 1``, one model call per request), a fresh `streamer serve` process:

- saturation: vegeta with no rate limit and a pool of workers (``-rate=0 -max-workers=W``) for
  ``--seconds``: the requests answered per second when every worker always has one outstanding;
- then an open loop at 50% of the batched saturation rate (``-rate=R``): requests are sent on
  schedule whatever the answers' latency, so a slow answer cannot hold the next request back
  (coordinated omission): p50, p99, and the requests shed (503) or failed.

Each request is one Open Inference Protocol infer of ``--rows`` rows of 32 features as JSON. The
line per setting and the ratio of the saturation rates are the figures. A benchmark, not a test:
comparable within one run on one machine.
"""

from __future__ import annotations

import argparse
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

ROOT = Path(__file__).resolve().parents[1]
VEGETA = ROOT / ".cache" / "bin" / "vegeta-v12.12.0" / "vegeta"
MODELS = {"heavy": ROOT / "models" / "fraud_encoder.onnx", "demo": ROOT / "models" / "fraud_mlp.onnx"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def config(work: Path, model: Path, port: int, max_size: int | None, max_wait_ms: int) -> Path:
    doc = yaml.safe_load((ROOT / "deploy" / "config" / "example.yaml").read_text())
    doc["model"].update(path=str(model), providers=["cpu"])
    doc["input"]["schema"] = str(ROOT / "streamer" / "schemas" / "feature_event.avsc")
    doc["output"]["schema"] = str(ROOT / "streamer" / "schemas" / "prediction.avsc")
    doc["online"] = {"http_port": port, "grpc_port": 0, "max_wait_ms": max_wait_ms, "timeout_ms": 2000,
                     "max_queue_rows": 4096, **({"max_size": max_size} if max_size else {})}
    path = work / f"serve-{max_size or 'batched'}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def start(path: Path, port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-m", "streamer", "--log-level", "WARNING", "serve", "--config", str(path)],
                            env={**os.environ, "KAFKA_BOOTSTRAP": "127.0.0.1:1"})
    deadline = time.monotonic() + 60
    while True:  # readiness, polled as a load balancer would
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=1) as r:
                if r.status == 200:
                    return proc
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("streamer serve did not become ready")
        time.sleep(0.1)


def attack(target: Path, seconds: float, rate: int | None, workers: int) -> dict[str, Any]:
    """One vegeta run; its report as JSON (latencies in ns, status codes)."""
    pace = ["-rate=0", f"-max-workers={workers}"] if rate is None else [f"-rate={rate}", f"-workers={workers}"]
    attack = subprocess.run([str(VEGETA), "attack", f"-targets={target}", f"-duration={seconds}s", "-timeout=10s",
                             *pace], capture_output=True, check=True)
    report = subprocess.run([str(VEGETA), "report", "-type=json"], input=attack.stdout, capture_output=True, check=True)
    return dict(json.loads(report.stdout))


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
    codes = r.get("status_codes", {})
    lat = r["latencies"]
    return (f"{name:<34} {r['throughput']:>9,.0f} req/s answered   p50 {lat['50th'] / 1e6:7.2f} ms   "
            f"p99 {lat['99th'] / 1e6:7.2f} ms   shed (503) {codes.get('503', 0):>6}   "
            f"other errors {sum(v for k, v in codes.items() if k not in ('200', '503')):>4}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(MODELS), default="heavy")
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--rows", type=int, default=1, help="rows per request (default 1)")
    ap.add_argument("--workers", type=int, default=64, help="vegeta's workers at saturation (default 64)")
    ap.add_argument("--max-wait-ms", type=int, default=2, help="online.max_wait_ms of the batched server")
    args = ap.parse_args()
    if not VEGETA.exists():
        raise SystemExit(f"no {VEGETA}: run make vegeta")
    results: dict[str, dict[str, dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        for name, max_size in (("batched", None), ("max_size 1", 1)):
            port = free_port()
            proc = start(config(work, MODELS[args.model], port, max_size, args.max_wait_ms), port)
            try:
                target = targets(work, port, args.rows)
                attack(target, 2, None, args.workers)  # warm the server and the client
                results[name] = {"saturation": attack(target, args.seconds, None, args.workers)}
            finally:
                proc.terminate()
                proc.wait(30)
        half = max(1, int(results["batched"]["saturation"]["throughput"] / 2))
        for name, max_size in (("batched", None), ("max_size 1", 1)):
            port = free_port()
            proc = start(config(work, MODELS[args.model], port, max_size, args.max_wait_ms), port)
            try:
                target = targets(work, port, args.rows)
                attack(target, 2, half, args.workers)
                results[name]["half"] = attack(target, args.seconds, half, args.workers)
            finally:
                proc.terminate()
                proc.wait(30)
    print(f"model {args.model} ({MODELS[args.model].name}), {args.rows} row(s) per request, "
          f"online.max_wait_ms {args.max_wait_ms}, {args.seconds:g} s per run, {os.cpu_count()} CPUs")
    for name in results:
        print(line(f"{name}: saturation", results[name]["saturation"]))
    for name in results:
        print(line(f"{name}: open loop at {half:,} req/s", results[name]["half"]))
    ratio = results["batched"]["saturation"]["throughput"] / results["max_size 1"]["saturation"]["throughput"]
    print(f"(o) saturation with dynamic batching / max_size 1 = {ratio:.2f}x (target >= 5x)")


if __name__ == "__main__":
    main()
