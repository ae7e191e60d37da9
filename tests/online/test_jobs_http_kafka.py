"""The jobs API over HTTP on the real parts: `streamer serve` and `streamer worker` as processes, the
jobs' topics on the real broker. A file of 10,000 requests is scored as ONNX Runtime scores it
offline; a request without the token is 401 and queues nothing; 413, 422 naming the field, a
cancel, and 409 for results before completion."""

from __future__ import annotations

import datetime as dt
import http.client
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from tests.conftest import ROOT, end_offsets
from tests.online.doubler import free_port
from tests.support.faults import write_config

pytestmark = pytest.mark.kafka
TOKEN = "tok-" + uuid.uuid4().hex
LIMIT = 16_000_000  # jobs.max_upload_bytes: the 10,000 requests (about 7 MB) fit
ROWS = 10_000
READY_S = 60.0
JOB_S = 120.0


@dataclass(frozen=True)
class Api:
    port: int
    files: Path  # jobs.files
    bootstrap: str
    jobs_topic: str
    status_topic: str
    server_log: Path

    def call(self, method: str, path: str, body: bytes | Iterable[bytes] | None = None, *,
             token: str | None = TOKEN, **headers: str) -> tuple[int, Any, http.client.HTTPResponse]:
        """One request: its status, its body (JSON decoded when it is JSON) and the response."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            if token is not None:
                headers["authorization"] = f"Bearer {token}"
            chunked = body is not None and not isinstance(body, bytes)
            conn.request(method, path, body, {k.replace("_", "-"): v for k, v in headers.items()},
                         encode_chunked=chunked)
            response = conn.getresponse()
            raw = response.read()
        finally:
            conn.close()
        kind = response.headers.get("content-type", "")
        return response.status, json.loads(raw) if kind == "application/json" else raw, response

    def status(self, job_id: str) -> dict[str, Any]:
        code, body, _ = self.call("GET", f"/v1/jobs/{job_id}")
        assert code == 200, body
        return body

    def ends(self) -> tuple[int, int]:
        """The jobs topic's and the status topic's offsets in all: what was ever queued and written."""
        return (sum(end_offsets(self.bootstrap, self.jobs_topic, False).values()),
                sum(end_offsets(self.bootstrap, self.status_topic, False).values()))


def start(args: list[str], config: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "JOBS_API_TOKEN": TOKEN, "PYTHONPATH": str(ROOT)}
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-m", "streamer", *args, "--config", str(config)], env=env,
                                stdout=out, stderr=subprocess.STDOUT)


@pytest.fixture(scope="module")
def api(bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    """One server and one worker for the module, on topics of their own."""
    run = uuid.uuid4().hex[:8]
    tmp = tmp_path_factory.mktemp("jobs-http")
    config = write_config(tmp / "config.yaml", bootstrap=bootstrap, input_topic=f"jh-in-{run}",
                          output_topic=f"jh-out-{run}", group=f"jh-{run}", guarantee="at_least_once",
                          model={"providers": ["cpu"]})
    doc = yaml.safe_load(config.read_text())
    port = free_port()
    doc["online"] = {"host": "127.0.0.1", "http_port": port, "grpc_port": 0}
    doc["lake"] = {"warehouse": str(tmp / "lake")}
    doc["jobs"] = {"topic": f"jh-jobs-{run}", "status_topic": f"jh-jobs-{run}.status", "group_id": f"jh-workers-{run}",
                   "partitions": 4, "progress_ms": 500, "api_token": "${JOBS_API_TOKEN}",
                   "files": str(tmp / "uploads"), "max_upload_bytes": LIMIT}
    config.write_text(yaml.safe_dump(doc))
    server = start(["serve"], config, tmp / "serve.log")
    worker = start(["worker"], config, tmp / "worker.log")
    api = Api(port, tmp / "uploads", bootstrap, doc["jobs"]["topic"], doc["jobs"]["status_topic"], tmp / "serve.log")
    try:
        deadline = time.monotonic() + READY_S
        while True:  # readiness is the condition, polled as a load balancer would
            try:
                if api.call("GET", "/v2/health/ready", token=None)[0] == 200:
                    break
            except OSError:
                pass
            assert server.poll() is None and worker.poll() is None, (tmp / "serve.log").read_text()
            assert time.monotonic() < deadline, "the server is not ready in time"
            time.sleep(0.05)
        yield api
    finally:
        for proc in (server, worker):
            proc.send_signal(signal.SIGTERM)
        for proc in (server, worker):
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def requests(n: int, seed: int, prefix: str) -> tuple[bytes, np.ndarray]:
    """``n`` events as JSON Lines, and their features."""
    x = np.random.default_rng(seed).normal(size=(n, 32)).astype(np.float32)
    lines = [json.dumps({"event_id": f"{prefix}-{i}", "entity_id": f"acct-{i % 13}", "event_time": 1_764_900_000_000 + i,
                         "features": row.tolist()}) for i, row in enumerate(x)]
    return ("\n".join(lines) + "\n").encode(), x


def polled(api: Api, job_id: str, timeout_s: float = JOB_S) -> dict[str, Any]:
    """The job's status once it is final (or the last one at the timeout)."""
    deadline = time.monotonic() + timeout_s
    while True:
        status = api.status(job_id)
        if status["state"] in ("completed", "failed", "expired", "cancelled") or time.monotonic() > deadline:
            return status
        time.sleep(0.2)


def test_without_the_token_401_and_nothing_is_queued(api: Api) -> None:
    assert api.call("GET", "/v1/jobs")[0] == 200  # the topics exist from here on
    before = api.ends()
    spec = json.dumps({"id": "no-token", "source": {"parquet": "x.parquet"}, "target": {"parquet": "out"}}).encode()
    body, _ = requests(5, 1, "nt")
    for token in (None, "wrong", TOKEN + "x", ""):
        assert api.call("POST", "/v1/jobs", spec, token=token, content_type="application/json")[0] == 401
        code, answer, response = api.call("POST", "/v1/jobs?id=no-token-file", body, token=token,
                                          content_type="application/x-ndjson")
        assert code == 401 and "error" in answer and response.headers["www-authenticate"].startswith("Bearer")
        for method, path in (("GET", "/v1/jobs"), ("GET", "/v1/jobs/no-token"), ("POST", "/v1/jobs/no-token/cancel"),
                             ("GET", "/v1/jobs/no-token/results")):
            assert api.call(method, path, token=token)[0] == 401
    assert api.ends() == before  # no job queued, no status written
    assert not (api.files / "no-token-file").exists()
    assert TOKEN not in api.server_log.read_text()


def test_a_file_of_10000_requests_is_scored_as_onnx_runtime_scores_it_offline(api: Api) -> None:
    body, x = requests(ROWS, 7, "ev")
    code, answer, response = api.call("POST", "/v1/jobs?id=file-10k&within=1h", body,
                                      content_type="application/x-ndjson")
    assert code == 202, answer
    assert answer == {"id": "file-10k", "state": "queued", "location": "/v1/jobs/file-10k"}
    assert response.headers["location"] == "/v1/jobs/file-10k"
    status = polled(api, "file-10k")
    assert status["state"] == "completed", status
    assert (status["predictions"], status["rejects"]) == (ROWS, 0)

    code, raw, response = api.call("GET", "/v1/jobs/file-10k/results")
    assert code == 200 and response.headers["content-type"].startswith("application/x-ndjson")
    rows = [json.loads(line) for line in raw.splitlines()]
    assert len(rows) == ROWS
    scores = {r["event_id"]: r["scores"] for r in rows}
    got = np.array([scores[f"ev-{i}"] for i in range(ROWS)], np.float32)
    offline = ort.InferenceSession(str(ROOT / "models" / "fraud_mlp.onnx")).run(None, {"features": x})[0]
    np.testing.assert_allclose(got, offline, rtol=0, atol=1e-6)
    assert api.call("GET", "/v1/jobs/file-10k/errors")[1] == b""  # no rejects
    listed = api.call("GET", "/v1/jobs?status=completed")[1]["jobs"]
    assert "file-10k" in [j["id"] for j in listed]
    code, answer, _ = api.call("POST", "/v1/jobs?id=file-10k", body[:1000], content_type="application/x-ndjson")
    assert code == 409 and "used once" in answer["error"], answer  # its files are left as they are
    assert (api.files / "file-10k" / "requests.parquet").stat().st_size > 0


def test_a_parquet_file_is_scored_and_its_rejects_are_its_errors(api: Api) -> None:
    x = np.random.default_rng(5).normal(size=(50, 32)).astype(np.float32)
    short = {7, 20, 41}  # rows of 31 features: each a reject
    table = pa.table({"event_id": [f"pq-{i}" for i in range(50)], "entity_id": ["acct"] * 50,
                      "event_time": pa.array(range(50), pa.int64()),
                      "features": pa.array([row[:31].tolist() if i in short else row.tolist() for i, row in enumerate(x)],
                                           pa.list_(pa.float32()))})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    code, answer, _ = api.call("POST", "/v1/jobs?id=parquet-50", sink.getvalue().to_pybytes(),
                               content_type="application/vnd.apache.parquet")
    assert code == 202, answer
    status = polled(api, "parquet-50")
    assert (status["state"], status["predictions"], status["rejects"]) == ("completed", 47, 3), status
    results = [json.loads(line) for line in api.call("GET", "/v1/jobs/parquet-50/results")[1].splitlines()]
    assert sorted(r["event_id"] for r in results) == sorted(f"pq-{i}" for i in range(50) if i not in short)
    errors = [json.loads(line) for line in api.call("GET", "/v1/jobs/parquet-50/errors")[1].splitlines()]
    assert sorted(json.loads(e["original"])["event_id"] for e in errors) == sorted(f"pq-{i}" for i in short)
    assert all("32" in e["reason"] for e in errors), errors[0]


def test_a_file_past_the_limit_is_413_and_nothing_is_kept(api: Api) -> None:
    before = api.ends()
    line = requests(1, 3, "big")[0]

    def chunks() -> Iterator[bytes]:  # sent chunked: the size is known only as it arrives
        piece = line * (1_000_000 // len(line) + 1)
        for _ in range(LIMIT // len(piece) + 2):
            yield piece

    code, answer, _ = api.call("POST", "/v1/jobs?id=too-big", chunks(), content_type="application/x-ndjson")
    assert code == 413 and "jobs.max_upload_bytes" in answer["error"], answer
    assert not (api.files / "too-big").exists()

    conn = http.client.HTTPConnection("127.0.0.1", api.port, timeout=60)  # a declared size: refused unread
    try:
        conn.putrequest("POST", "/v1/jobs?id=too-big-declared")
        for k, v in (("authorization", f"Bearer {TOKEN}"), ("content-type", "application/vnd.apache.parquet"),
                     ("content-length", str(LIMIT + 1)), ("expect", "100-continue")):
            conn.putheader(k, v)
        conn.endheaders()
        response = conn.getresponse()
        assert response.status == 413, response.read()
    finally:
        conn.close()
    assert api.ends() == before


def test_422_names_the_field_and_nothing_is_queued(api: Api) -> None:
    before = api.ends()
    spec = {"id": "bad-window", "source": {"parquet": "x.parquet"}, "target": {"parquet": "out"}, "within": "soon"}
    code, answer, _ = api.call("POST", "/v1/jobs", json.dumps(spec).encode(), content_type="application/json")
    assert code == 422 and answer["field"] == "job.within" and "job.within" in answer["error"], answer
    code, answer, _ = api.call("POST", "/v1/jobs?priority=high", b'{"event_id": "a"}\n',
                               content_type="application/x-ndjson")
    assert code == 422 and answer["field"] == "job.priority", answer

    no_features = b"".join(json.dumps({"event_id": f"n{i}", "entity_id": "a", "event_time": i, "feats": [0.5] * 32})
                           .encode() + b"\n" for i in range(10))
    code, answer, _ = api.call("POST", "/v1/jobs?id=no-features", no_features, content_type="application/x-ndjson")
    assert code == 422 and "'features'" in answer["error"], answer
    assert not (api.files / "no-features").exists()
    assert api.call("GET", "/v1/jobs/no-features")[0] == 404
    assert api.call("POST", "/v1/jobs", b"{not json", content_type="application/json")[0] == 400
    code, answer, _ = api.call("POST", "/v1/jobs?id=..", no_features, content_type="application/x-ndjson")
    assert code == 422 and answer["field"] == "job.id", answer  # an id names a folder under jobs.files
    assert api.ends() == before


def test_a_job_not_due_yet_has_no_results_409_and_is_cancelled(api: Api) -> None:
    later = (dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    body, _ = requests(5, 11, "later")
    code, answer, _ = api.call("POST", f"/v1/jobs?id=later&not_before={later}", body,
                               content_type="application/x-ndjson")
    assert code == 202, answer
    code, answer, _ = api.call("GET", "/v1/jobs/later/results")
    assert code == 409 and answer["state"] == "queued", answer
    code, answer, _ = api.call("POST", "/v1/jobs/later/cancel")
    assert code == 200 and answer["state"] == "cancelled", answer
    assert api.status("later")["state"] == "cancelled"
    code, answer, _ = api.call("GET", "/v1/jobs/later/errors")
    assert code == 409 and answer["state"] == "cancelled", answer
    assert "later" in [j["id"] for j in api.call("GET", "/v1/jobs?status=cancelled")[1]["jobs"]]
    assert api.call("POST", "/v1/jobs/nobody/cancel")[0] == 404


def test_a_spec_is_queued_once_however_often_it_is_posted(api: Api) -> None:
    later = (dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)).isoformat()
    spec = {"id": "spec-once", "source": {"parquet": str(api.files / "later" / "requests.parquet")},
            "target": {"parquet": str(api.files / "spec-once")}, "not_before": later}
    code, answer, response = api.call("POST", "/v1/jobs", json.dumps(spec).encode(), content_type="application/json")
    assert code == 202 and answer["state"] == "queued" and response.headers["location"] == "/v1/jobs/spec-once"
    before = api.ends()
    code, answer, _ = api.call("POST", "/v1/jobs", yaml.safe_dump(spec).encode(), content_type="application/yaml")
    assert (code, answer["id"], answer["state"]) == (200, "spec-once", "queued")
    assert api.ends()[0] == before[0]  # not queued again (the worker may park it meanwhile: a status)
    assert api.call("POST", "/v1/jobs/spec-once/cancel")[1]["state"] == "cancelled"
