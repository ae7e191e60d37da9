"""Predictions precomputed into a real Redis from a Parquet file of 100,000 entities: by a job on the
real broker, read by online lookups as the same rows scored into Parquet; and a precompute killed
mid-way and resumed while a reader checks that the alias never names a partial run."""

from __future__ import annotations

import asyncio
import io
import json
import os
import random
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streamer import cli
from streamer.commands.lake import run_score
from streamer.config_file import load_config
from streamer.dev.redis import LocalRedis
from streamer.errors import ConfigError
from streamer.jobs.spec import JobTarget, parse_spec
from streamer.jobs.states import State
from streamer.stores.keys import KeySpace
from streamer.stores.precomputed import PredictionStore
from streamer.wiring.lake import Target
from tests.jobs.support import await_status, jobs_config, start_worker, stop_workers
from tests.stores.precompute import entities_file, kv_jobs_config, same_row, scored_into_parquet, store_rows
from tests.support.redis import client, kv_config

ROOT = Path(__file__).resolve().parents[2]
ENTITIES = 100_000


@pytest.fixture(scope="module")
def scored(tmp_path_factory: pytest.TempPathFactory, redis_server: LocalRedis) -> tuple[Path, dict[str, Any]]:
    """The entities' file, and each entity's row as the config's model scores it into Parquet."""
    folder = tmp_path_factory.mktemp("precompute")
    source = entities_file(folder / "entities.parquet", ENTITIES)
    config = kv_jobs_config(folder, "127.0.0.1:9", redis_server, "unused")  # Parquet in, Parquet out: no broker
    return source, scored_into_parquet(config, source, folder / "reference")


def lookups(kv: Any, entities: list[str]) -> list[Any]:
    """``entities`` looked up as the online server does (PredictionStore)."""
    async def get() -> list[Any]:
        store = PredictionStore(kv)
        try:
            return [await store.get(e) for e in entities]
        finally:
            await store.close()

    return asyncio.run(get())


@pytest.mark.kafka
@pytest.mark.timeout(180)
def test_a_job_precomputes_every_entity_and_lookups_read_the_rows_the_table_has(
        bootstrap: str, tmp_path: Path, redis_server: LocalRedis, scored: tuple[Path, dict[str, Any]]) -> None:
    source, reference = scored
    kv = kv_config(redis_server)
    config = kv_jobs_config(tmp_path, bootstrap, redis_server, kv.prefix)
    worker = start_worker(config, "w1", tmp_path / "w1.log")
    try:
        spec = tmp_path / "job.yaml"
        spec.write_text(f"source: {{parquet: {source}}}\ntarget: {{kv: }}\n")  # kv: the config's kv.prefix
        assert cli.main(["jobs", "submit", "--config", str(config), str(spec), "--id", "pre-1"]) == 0
        status = await_status(config, "pre-1", lambda s: s.final, timeout_s=150)
    finally:
        stop_workers(worker)
    assert status.state == State.COMPLETED, (status, (tmp_path / "w1.log").read_text()[-3000:])
    assert (status.rows_done, status.predictions, status.rejects) == (ENTITIES, ENTITIES, 0)
    assert status.output == f"kv {redis_server.address} {kv.prefix}"
    assert client(redis_server).get(KeySpace(kv.prefix).current) == b"pre-1"
    entities = random.Random(5).sample(sorted(reference), 1000)
    found = lookups(kv, entities)
    assert all(f is not None and f.run_id == "pre-1" for f in found)
    assert {e: same_row(f.fields, reference[e]) for e, f in zip(entities, found, strict=True)
            if same_row(f.fields, reference[e])} == {}


class Reader:
    """Looks entities up throughout a run, as the online server does (the alias resolved before
    every lookup), and records each lookup's run and whether that run was complete then (every
    shard's recorded progress at its plan's end)."""

    def __init__(self, kv: Any, server: LocalRedis) -> None:
        self.kv, self.keys, self.r = kv, KeySpace(kv.prefix), client(server)
        self.seen: list[tuple[str | None, bool]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._read()), daemon=True)
        self.thread.start()

    async def _read(self) -> None:
        store, rng = PredictionStore(self.kv, refresh_s=0.0), random.Random(3)
        try:
            while not self.stop.is_set():
                found = await store.get(f"u{rng.randrange(2000)}")
                run = found.run_id if found is not None else await store.current_run()
                self.seen.append((run, run is None or self.complete(run)))
                await asyncio.sleep(0.005)  # a lookup every few ms, not a busy loop beside the run
        finally:
            await store.close()

    def complete(self, run: str) -> bool:
        shards = {k: json.loads(v) for k, v in self.r.hgetall(self.keys.run(run)).items() if k.startswith(b"shard:")}
        return bool(shards) and all(
            all(p["reached"].get(tp, [0, 0])[1] >= end for tp, (_, end) in p["bounds"].items())
            for p in shards.values())

    def close(self) -> list[tuple[str | None, bool]]:
        self.stop.set()
        self.thread.join(30)
        return self.seen


@pytest.fixture
def reader_of() -> Iterator[Any]:
    made: list[Reader] = []

    def start(kv: Any, server: LocalRedis) -> Reader:
        made.append(Reader(kv, server))
        return made[-1]

    yield start
    for reader in made:
        reader.close()


def _score(config: Path, source: Path, run_id: str, kill_after: int | None = None) -> subprocess.CompletedProcess[str]:
    head = [sys.executable, "-m", "streamer"] if kill_after is None else [
        sys.executable, "-m", "tests.support.lake_kill", str(kill_after)]
    return subprocess.run([*head, "score", "--config", str(config), "--from", str(source), "--to-kv",
                           "--run-id", run_id], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.timeout(180)
def test_a_precompute_killed_mid_way_resumes_and_readers_only_ever_see_a_complete_run(
        tmp_path: Path, redis_server: LocalRedis, scored: tuple[Path, dict[str, Any]], reader_of: Any) -> None:
    source, reference = scored
    kv = kv_config(redis_server, commit_rows=30_000, keep_previous_s=120)
    keys, r = KeySpace(kv.prefix), client(redis_server)
    config = kv_jobs_config(tmp_path, "127.0.0.1:9", redis_server, kv.prefix, commit_rows=30_000,
                            keep_previous_s=120)
    before = entities_file(tmp_path / "before.parquet", 2000)  # the complete run readers use meanwhile
    run_score(load_config(config), str(before), Target(kv=""), run_id="before", progress=io.StringIO())
    reader = reader_of(kv, redis_server)

    killed = _score(config, source, "next", kill_after=1)  # one commit made; the next one's rows written
    assert killed.returncode == -9, killed.stderr[-3000:]
    progress = json.loads(r.hget(keys.run("next"), "shard:0-of-1"))
    (done,) = [to for _, to in progress["reached"].values()]
    assert 0 < done < ENTITIES and r.get(keys.current) == b"before"
    assert sum(1 for _ in r.scan_iter(match=keys.entities("next"), count=10_000)) > done  # past the commit: unseen

    resumed = _score(config, source, "next")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    lines = resumed.stdout.splitlines()
    assert lines[0] == f"score next resumed and finished into kv {redis_server.address} {kv.prefix}", lines
    assert lines[1] == f"rows {ENTITIES - done} = predictions {ENTITIES - done} + rejects 0", lines  # from its commit on
    seen = reader.close()

    assert r.get(keys.current) == b"next"
    assert [run for run, complete in seen if not complete] == []  # never a partial run
    assert len(seen) > 20 and seen[0][0] == "before" and {run for run, _ in seen} <= {"before", "next"}, set(seen)
    assert all(run is not None for run, _ in seen)
    head = len(keys.entity("next", ""))
    stored = {k.decode()[head:] for k in r.scan_iter(match=keys.entities("next"), count=10_000)}
    assert stored == set(reference)  # every entity, once
    sample = random.Random(9).sample(sorted(reference), 2000)  # read back 2,000 (100,000 replies take 12 s to parse)
    rows = store_rows(redis_server, kv.prefix, "next", sample)
    assert {e: same_row(row, reference[e]) for e, row in rows.items() if same_row(row, reference[e])} == {}
    assert 0 < r.ttl(keys.run("before")) <= 120  # the replaced run expires; readers of it have two minutes
    assert r.zrange(keys.runs, 0, -1) == [b"before", b"next"]


def test_rows_without_an_entity_id_count_as_rejects_in_the_run_s_summary(tmp_path: Path,
                                                                          redis_server: LocalRedis) -> None:
    """The model scores them, but the store cannot keep a row by no key: the summary's equation
    and the committed counts say rejects, as the rejects stream holds them."""
    kv = kv_config(redis_server)
    source = entities_file(tmp_path / "some.parquet", 10)
    table = pq.read_table(source)
    entity = pa.array([None if i in (3, 7) else f"u{i}" for i in range(10)], pa.string())
    pq.write_table(table.set_column(table.schema.get_field_index("entity_id"), "entity_id", entity), source)
    config = kv_jobs_config(tmp_path, "127.0.0.1:9", redis_server, kv.prefix)
    summary = run_score(load_config(config), str(source), Target(kv=""), run_id="r1", progress=io.StringIO())
    assert (summary.counts.predictions, summary.counts.rejects) == (8, 2)
    assert summary.lines()[1] == "rows 10 = predictions 8 + rejects 2"
    assert summary.committed_rows == (8, 2)
    assert client(redis_server).xlen(KeySpace(kv.prefix).rejects("r1")) == 2


def test_to_kv_without_an_address_names_the_key_and_a_job_target_kv_takes_a_prefix(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = jobs_config(tmp_path, "127.0.0.1:9")
    for command in (["score", "--from", str(tmp_path / "x.parquet")], ["replay", "--from", "earliest"]):
        code = cli.main([*command, "--config", str(config), "--to-kv", "scores"])
        assert code == 2 and "kv.address" in capsys.readouterr().err  # before the model loads or Kafka is asked
    for bad in ("a b", "p*", 5, ["p"]):
        with pytest.raises(ConfigError, match="job.target.kv"):
            parse_spec({"source": {"parquet": "x.parquet"}, "target": {"kv": bad}})
    for given, target in ((None, JobTarget(kv="")), ("", JobTarget(kv="")), ("scores", JobTarget(kv="scores"))):
        spec = parse_spec({"source": {"parquet": "x.parquet"}, "target": {"kv": given}})
        assert spec.target == target and parse_spec(spec.to_dict()) == spec
