"""Shared fixtures: one real Kafka broker per test session, fresh topics per test, topic readers."""

from __future__ import annotations

import gc
import importlib.util
import signal
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from streamer.config import Config
from streamer.config_file import load_config
from streamer.dev.broker import kafka_cluster
from streamer.dev.redis import LocalRedis, local_redis
from streamer.kafka.topics import create_topics
from streamer.observe.stats import Stats
from streamer.processor import Processor
from tests.support import faults
from tests.support.feast import LocalFeast, entity_rows, local_feast
from tests.support.objectstore import ObjectStore, seaweedfs
from tests.support.schema_registry import SchemaRegistry
from tests.support.schema_registry import schema_registry as running_registry

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "deploy" / "config" / "example.yaml"


@pytest.fixture(scope="session")
def bootstrap() -> Iterator[str]:
    """A real broker: KAFKA_BOOTSTRAP, else Docker, else Apache Kafka's jars. Never a fake.

    If none can be had the fixture raises, and every Kafka test errors loudly. Before it stops, no
    Kafka client of the session may be left alive: one would retry the stopped broker after the
    session's summary (``Connect ... failed``), and in a service it is a leaked connection.
    """
    with kafka_cluster() as address:
        yield address
        faults.forget_clients()
        gc.collect()
        alive = [type(o).__name__ for o in gc.get_objects() if isinstance(o, (Producer, Consumer, AdminClient))]
        assert not alive, f"Kafka clients left alive after the last test: {alive}"


@pytest.fixture(scope="session")
def schema_registry() -> Iterator[SchemaRegistry]:
    """A real Schema Registry (Apicurio's Confluent-compatible API, tests/support/schema_registry.py)
    for the session; tests keep apart by subject (their topics are fresh). Fails loudly if none starts."""
    with running_registry() as registry:
        yield registry


@pytest.fixture(scope="session")
def object_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ObjectStore]:
    """A real S3 store (SeaweedFS, tests/support/objectstore.py) for the session, started by the
    first test that asks for it; tests keep apart by bucket. Fails loudly if none starts."""
    with seaweedfs(tmp_path_factory.mktemp("seaweedfs")) as store:
        yield store


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRedis]:
    """A real Redis (Debian's redis-server, streamer/dev/redis.py) with a password, for the session;
    tests keep apart by key prefix (tests/support/redis.py's kv_config). Fails loudly if none starts."""
    with local_redis(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture(scope="session")
def feast_server(redis_server: LocalRedis, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFeast]:
    """Feast's feature server (`feast serve`, from .cache/feast) on tests/support/feast.py's
    entity_rows, materialized into the session's Redis: started once, its cost paid once."""
    folder = tmp_path_factory.mktemp("feast")
    pq.write_table(entity_rows(), folder / "rows.parquet")
    with local_feast(folder / "repo", folder / "rows.parquet", redis_server) as server:
        yield server


@pytest.fixture(scope="session")
def converter_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real converters' models (models/build_converter_models.py: scikit-learn + skl2onnx,
    LightGBM and XGBoost + onnxmltools), trained and converted once per session, with manifest.json."""
    spec = importlib.util.spec_from_file_location("build_converter_models",
                                                  ROOT / "models" / "build_converter_models.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    out = tmp_path_factory.mktemp("converter-models")
    script.write_models(out)
    return out


@dataclass(frozen=True)
class Topics:
    input: str
    output: str
    dlq: str
    group: str


@pytest.fixture
def topics(bootstrap: str) -> Topics:
    """Fresh input (3 partitions), output (3) and dead-letter (1) topics and a fresh group id."""
    run = uuid.uuid4().hex[:8]
    t = Topics(f"features-{run}", f"predictions-{run}", f"features-{run}.dlq", f"group-{run}")
    create_topics(bootstrap, {t.input: 3, t.output: 3, t.dlq: 1})
    return t


def make_config(bootstrap: str, topics: Topics, **env: str) -> Config:
    """The shipped example config pointed at the test broker and topics."""
    return load_config(EXAMPLE, env={"KAFKA_BOOTSTRAP": bootstrap, "INPUT_TOPIC": topics.input,
                                     "OUTPUT_TOPIC": topics.output, "GROUP_ID": topics.group,
                                     **env})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# Readers shared with the fault-injection suite and the chaos benchmark.
read_all = faults.read_all
end_offsets = faults.end_offsets
committed_offsets = faults.committed_offsets


@pytest.fixture
def own_signals() -> Iterator[None]:
    """A command run in the test's process takes SIGTERM and SIGINT for its stop: give them back
    to the session after the test (modules use it with ``pytest.mark.usefixtures``)."""
    kept = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    yield
    for sig, handler in kept.items():
        signal.signal(sig, handler)


@pytest.fixture(autouse=True)
def no_stray_processors() -> Iterator[None]:
    """A failed fault test must not leave its child processors running into the next test."""
    yield
    faults._kill_children()


def run_until_outputs(processor: Processor, n: int, timeout_s: float = 120.0, stall_s: float = 20.0) -> None:
    """Run ``processor`` in this thread until it has handled ``n`` inputs, then assert exactly ``n``.

    A processor that loses rows never reaches ``n``: the run stops once outputs have not moved
    for ``stall_s`` (after the first one), or at ``timeout_s``, and the assertion names what it
    got, instead of the test hanging.
    """
    started = time.monotonic()
    last = {"outputs": -1, "at": started}
    why: list[str] = []

    def until(stats: Stats) -> bool:
        now = time.monotonic()
        if stats.outputs != last["outputs"]:
            last.update(outputs=stats.outputs, at=now)
        if stats.outputs >= n:
            return True
        if now - started > timeout_s:
            why.append(f"after the {timeout_s:.0f} s deadline")
        elif stats.outputs > 0 and now - last["at"] > stall_s:
            why.append(f"with no progress for {stall_s:.0f} s")
        return bool(why)

    processor.run(until=until)
    s = processor.stats
    assert s.outputs == n, (f"expected {n} inputs handled, got {s.outputs} ({s.predictions} "
                            f"predictions, {dict(s.dead_letters)} dead letters) {' '.join(why)}")
