"""The tests' Feast feature server: `feast serve` from its own environment (.cache/feast, `make feast`),
on a feature repository whose online store is the tests' Redis, materialized from a Parquet file.

:class:`LocalFeast` writes the repository (feature_store.yaml, an entity of the Parquet file's key
column, a FileSource on the file, a FeatureView of every other column but the event timestamp and
a FeatureService of the view), runs ``feast apply`` and ``feast materialize``, and serves it on a
free loopback port; it is ready when ``/health`` answers, never after a fixed sleep. The server
runs in a process group of its own (gunicorn's master and its worker), which :meth:`pause` stops
with SIGSTOP, as a stuck feature server stalls in production. Each instance has its own Feast
project, so its keys in the shared Redis are its own.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from streamer.config import FeaturesConfig
from streamer.dev.redis import LocalRedis

ROOT = Path(__file__).resolve().parents[2]
FEAST = ROOT / ".cache" / "feast" / "bin" / "feast"
START_TIMEOUT_S = 120.0
TIMESTAMP = "event_timestamp"  # the Parquet file's event time column, as the FileSource reads it
# `feast -c FOLDER <command>` for each command of the JSON list of argument lists, in turn.
IN_TURN = """
import json, sys
from feast.cli.cli import cli
for command in json.loads(sys.argv[2]):
    cli.main(["-c", sys.argv[1], *command], prog_name="feast", standalone_mode=False)
"""


def feast_binary() -> Path:
    if not FEAST.exists():
        raise RuntimeError(f"no Feast at {FEAST}: run `make feast` (its own environment, feast[redis] pinned)")
    return FEAST


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def feast_type(kind: pa.DataType, column: str) -> str:
    """The feast.types name of a Parquet column's Arrow type (``Array(Float32)``)."""
    scalars = {pa.float32(): "Float32", pa.float64(): "Float64", pa.int32(): "Int32", pa.int64(): "Int64",
               pa.string(): "String", pa.large_string(): "String", pa.bool_(): "Bool"}
    if kind in scalars:
        return scalars[kind]
    if pa.types.is_list(kind) and kind.value_type in scalars:
        return f"Array({scalars[kind.value_type]})"
    raise ValueError(f"column {column!r}: no Feast type for {kind}")


def entity_rows(count: int = 200, width: int = 32, seed: int = 7) -> pa.Table:
    """Rows of features by entity, as a feature repository and ``streamer features load`` take them:
    ``entity_id`` (e0000, e0001, ...), ``features`` (``width`` float32s: the example model's input),
    ``amount`` (float64, null every 10th row), ``country`` (strings, some of digits: ``"07"``),
    ``visits`` (int64) and the event time column."""
    rnd = random.Random(seed)
    return pa.table({
        "entity_id": [f"e{i:04d}" for i in range(count)],
        "features": pa.array([[rnd.uniform(-2, 2) for _ in range(width)] for _ in range(count)],
                             pa.list_(pa.float32())),
        "amount": pa.array([None if i % 10 == 3 else round(rnd.uniform(0, 500), 2) for i in range(count)],
                           pa.float64()),
        "country": [rnd.choice(["FR", "DE", "07", "1e3", "US"]) for _ in range(count)],
        "visits": pa.array([rnd.randrange(0, 1000) for _ in range(count)], pa.int64()),
        TIMESTAMP: pa.array([1_764_900_000_000_000 + 1000 * i for i in range(count)], pa.timestamp("us", tz="UTC")),
    })


@dataclass(frozen=True)
class FeatureRepo:
    """What a test reads of the served repository."""

    url: str
    view: str
    service: str
    entity_key: str
    parquet: Path
    names: tuple[str, ...]  # the view's features, in the file's column order

    @property
    def refs(self) -> tuple[str, ...]:
        return tuple(f"{self.view}:{name}" for name in self.names)

    def features_config(self, **overrides: Any) -> FeaturesConfig:
        """An ``online.features`` of kind feast asking for every feature of the view (``overrides``:
        other keys, ``feature_service=repo.service, features=()`` for the service)."""
        return replace(FeaturesConfig(kind="feast", url=self.url, features=self.refs, entity_key=self.entity_key,
                                      timeout_ms=500), **overrides)


class LocalFeast:
    """`feast serve` of a repository in ``folder`` on the rows of ``parquet``, keyed by its
    ``entity_key`` column, its online store ``redis``."""

    def __init__(self, folder: Path, parquet: Path, redis: LocalRedis, entity_key: str = "entity_id",
                 view: str = "entity_features", service: str = "scoring") -> None:
        self.folder, self.parquet, self.redis = folder, parquet, redis
        self.entity_key, self.view, self.service = entity_key, view, service
        self.project = f"t{uuid.uuid4().hex[:10]}"
        self.port = _free_port()
        self._proc: subprocess.Popen[bytes] | None = None
        schema = pq.read_schema(parquet)
        self.names = tuple(n for n in schema.names if n not in (entity_key, TIMESTAMP))
        self._types = {n: feast_type(schema.field(n).type, n) for n in self.names}

    @property
    def repo(self) -> FeatureRepo:
        return FeatureRepo(f"http://127.0.0.1:{self.port}", self.view, self.service, self.entity_key,
                           self.parquet, self.names)

    def write_repo(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        store = self.folder / "feature_store.yaml"
        store.write_text(
            f"project: {self.project}\nregistry: {self.folder / 'registry.db'}\nprovider: local\n"
            f"online_store:\n  type: redis\n"
            f'  connection_string: "{self.redis.address},password={self.redis.password}"\n'
            f"offline_store:\n  type: file\nentity_key_serialization_version: 3\n")
        store.chmod(0o600)  # it holds the password
        fields = ",\n        ".join(f"Field(name={n!r}, dtype={t})" for n, t in self._types.items())
        (self.folder / "features.py").write_text(f'''
from datetime import timedelta

from feast import Entity, FeatureService, FeatureView, Field, FileSource
from feast.types import Array, Bool, Float32, Float64, Int32, Int64, String
from feast.value_type import ValueType

entity = Entity(name="entity", join_keys=[{self.entity_key!r}], value_type=ValueType.STRING)
source = FileSource(path={str(self.parquet)!r}, timestamp_field={TIMESTAMP!r})
view = FeatureView(
    name={self.view!r}, entities=[entity], ttl=timedelta(days=3650), online=True, source=source,
    schema=[
        {fields}
    ])
service = FeatureService(name={self.service!r}, features=[view])
''')

    def _feast(self, *commands: tuple[str, ...]) -> None:
        """Run ``feast -c FOLDER <command>`` for each command in turn, in one process of Feast's
        environment (its CLI, through click): Feast's import, seconds long, is paid once."""
        done = subprocess.run([str(feast_binary().parent / "python"), "-c", IN_TURN, str(self.folder),
                               json.dumps(commands)], capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise RuntimeError(f"feast {commands} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")

    def start(self) -> None:
        """Apply the repository, materialize every row into Redis, serve it; ready when /health answers."""
        self.write_repo()
        self._feast(("apply",), ("materialize", "--disable-event-timestamp"))
        log = (self.folder / "serve.log").open("wb")
        self._proc = subprocess.Popen(
            [str(feast_binary()), "-c", str(self.folder), "serve", "-h", "127.0.0.1", "-p", str(self.port),
             "--no-access-log", "--workers", "1", "--max-requests", "0"],  # 0: gunicorn never recycles the worker
            stdout=log, stderr=subprocess.STDOUT, process_group=0)
        log.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                break
            if self.healthy():
                return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"feast serve did not answer on port {self.port}; its log:\n{self._log_tail()}")

    def healthy(self, timeout_s: float = 1.0) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=timeout_s) as answer:
                return bool(answer.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    def pause(self) -> None:
        """SIGSTOP the server's process group (gunicorn's master and worker): requests hang unanswered."""
        os.killpg(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.killpg(self.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self._proc is None:
            return
        if self._proc.poll() is None:
            os.killpg(self.pid, signal.SIGCONT)  # a paused one could not act on the TERM
            os.killpg(self.pid, signal.SIGTERM)
            try:
                self._proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.pid, signal.SIGKILL)
                self._proc.wait(10)
        self._proc = None

    def _log_tail(self) -> str:
        path = self.folder / "serve.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else "(no log)"


@contextmanager
def local_feast(folder: Path, parquet: Path, redis: LocalRedis, **options: str) -> Iterator[LocalFeast]:
    """A started :class:`LocalFeast`, stopped on exit."""
    server = LocalFeast(folder, parquet, redis, **options)
    try:
        server.start()
        yield server
    finally:
        server.stop()
