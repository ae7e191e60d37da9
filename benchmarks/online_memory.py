"""The memory of a repository of 20 models served online: ``models.max_loaded`` 5 against all 20 loaded.

    python benchmarks/online_memory.py [--models 20] [--bound 5]

For each model file (the demo MLP, 2.6 kB, and the heavier encoder, 0.4 MB), a fresh
`streamer serve` process per setting: one model alone; the repository of ``--models`` copies of
the file (each its own folder and manifest) with every model loaded at start (no
``models.max_loaded``); and the same repository with ``models.max_loaded: --bound``. Each process
answers one request of every model (in order, so the bounded one loads and unloads as it goes),
then its resident memory (VmRSS) and its peak (VmHWM) are read from /proc. The figures: each
setting's RSS, and the memory one more loaded model costs ((all loaded - one) / (models - 1)).

A benchmark, not a test: comparable within one run on one machine.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FILES = {"mlp": ROOT / "models" / "fraud_mlp.onnx", "encoder": ROOT / "models" / "fraud_encoder.onnx"}
TIMEOUT_S = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def repository(folder: Path, model: Path, n: int) -> list[str]:
    """``n`` copies of ``model``, each a folder with its manifest; their names."""
    names = [f"m{i:02d}" for i in range(n)]
    for name in names:
        (folder / name).mkdir(parents=True)
        shutil.copy(model, folder / name / "model.onnx")
        (folder / name / "model.yaml").write_text('model:\n  path: model.onnx\n  version: "1"\n')
    return names


def config(folder: Path, port: int, bound: int | None) -> Path:
    models = f"models: {{default: m00, repository: {folder}, max_loaded: {bound or 0}}}\n"
    path = folder.parent / f"serve-{bound}.yaml"
    path.write_text("kafka: {bootstrap.servers: '127.0.0.1:1'}\n"
                    "input: {topics: [in], group_id: memory, format: json}\n"
                    "output: {topic: out}\n"
                    f"online: {{http_port: {port}, grpc_port: 0, max_wait_ms: 1}}\n" + models)
    return path


def infer(port: int, name: str) -> None:
    body = json.dumps({"inputs": [{"name": "features", "shape": [1, 32], "datatype": "FP32",
                                   "data": [0.1] * 32}]}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v2/models/{name}/infer", body,
                                     {"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=TIMEOUT_S) as r:
        assert r.status == 200, r.status


def ready(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, "streamer serve ended"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=1) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError):
            pass
        time.sleep(0.1)  # polling another process's readiness: nothing to await
    raise TimeoutError("streamer serve did not become ready")


def memory_mb(pid: int) -> tuple[float, float]:
    """A process's resident memory and its peak, in MB."""
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(status["VmRSS"].split()[0]) / 1024, int(status["VmHWM"].split()[0]) / 1024


def measure(model: Path, n: int, bound: int | None) -> tuple[float, float]:
    """RSS and peak (MB) of `streamer serve` once each of ``n`` models answered."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "repo"
        names = repository(folder, model, n)
        port = free_port()
        proc = subprocess.Popen([sys.executable, "-m", "streamer", "serve", "--config", str(config(folder, port, bound))],
                                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            ready(port, proc)
            for name in names:
                infer(port, name)
            return memory_mb(proc.pid)
        finally:
            proc.terminate()
            proc.wait(TIMEOUT_S)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", type=int, default=20)
    parser.add_argument("--bound", type=int, default=5)
    args = parser.parse_args()
    print(f"{'model':8} {'setting':22} {'RSS MB':>8} {'peak MB':>8}")
    for label, path in FILES.items():
        one = measure(path, 1, None)
        every = measure(path, args.models, None)
        bounded = measure(path, args.models, args.bound)
        for setting, (rss, peak) in (("1 model", one), (f"{args.models} loaded", every),
                                     (f"{args.models}, max_loaded {args.bound}", bounded)):
            print(f"{label:8} {setting:22} {rss:8.1f} {peak:8.1f}")
        print(f"{label:8} {'per loaded model':22} {(every[0] - one[0]) / (args.models - 1):8.2f}")


if __name__ == "__main__":
    main()
