"""The key-value sink on a real Redis: a run's shards, its switch, the expiry of the run it replaced,
its rejects, its checkpoint and its refusals."""

from __future__ import annotations

import asyncio
from typing import Any

import pyarrow as pa
import pytest

from streamer.dev.redis import LocalRedis
from streamer.errors import ConfigError, ReplayFinishedError, StaleCommitError, StoreError
from streamer.lake.columns import TIMESTAMP, rejects_table
from streamer.lake.sink import Shard
from streamer.stores.keys import KeySpace
from streamer.stores.precomputed import PredictionStore
from streamer.stores.sink import KvSink
from tests.support.redis import client, kv_config

SCHEMA = pa.schema([
    pa.field("event_id", pa.string()), pa.field("entity_id", pa.string()), pa.field("scores", pa.list_(pa.float32())),
    pa.field("model_name", pa.string()), pa.field("model_version", pa.string()), pa.field("run_id", pa.string()),
    pa.field("scored_at", TIMESTAMP), pa.field("event_time", TIMESTAMP), pa.field("source_topic", pa.string()),
    pa.field("source_partition", pa.int32()), pa.field("source_offset", pa.int64()), pa.field("degraded", pa.bool_()),
    pa.field("degraded_reason", pa.string()),
])
PLAN = {("t", 0): (0, 4), ("t", 1): (0, 4)}  # shard 0 of 2 takes partition 0, shard 1 partition 1


def rows(run: str, partition: int, offsets: range, score: float = 0.5, entities: list[str | None] | None = None,
         ) -> pa.Table:
    ids = entities if entities is not None else [f"u{partition}-{o}" for o in offsets]
    n = len(offsets)
    return pa.table({
        "event_id": [f"e{partition}-{o}" for o in offsets], "entity_id": ids, "scores": [[score, 1 - score]] * n,
        "model_name": ["m"] * n, "model_version": ["3"] * n, "run_id": [run] * n,
        "scored_at": pa.array([1_767_225_600_000_000] * n, pa.int64()).cast(TIMESTAMP),
        "event_time": pa.array([1_767_225_000_000_000 + o for o in offsets], pa.int64()).cast(TIMESTAMP),
        "source_topic": ["t"] * n, "source_partition": pa.array([partition] * n, pa.int32()),
        "source_offset": pa.array(list(offsets), pa.int64()), "degraded": [False] * n, "degraded_reason": [None] * n,
    }, schema=SCHEMA)


def shard_run(kv: Any, run: str, shard: Shard, score: float = 0.5) -> KvSink:
    """One shard's whole run, committed in two steps and finished."""
    sink = KvSink(kv, kv.prefix, SCHEMA)
    resume = sink.resume(run, shard, {tp: r for tp, r in PLAN.items() if shard.takes(tp[1])}, False)
    assert resume.reached == {} and resume.seq == 0
    p = shard.index
    sink.write(rows(run, p, range(0, 2), score), None)
    sink.commit({("t", p): (0, 2)})
    sink.write(rows(run, p, range(2, 4), score), None)
    sink.commit({("t", p): (2, 4)})
    sink.finish()
    return sink


def lookup(kv: Any, entity: str) -> Any:
    async def get() -> Any:
        store = PredictionStore(kv)
        try:
            return await store.get(entity)
        finally:
            await store.close()

    return asyncio.run(get())


def test_readers_switch_when_the_last_shard_finishes_and_the_replaced_run_expires(redis_server: LocalRedis) -> None:
    kv = kv_config(redis_server, keep_previous_s=300)
    keys, r = KeySpace(kv.prefix), client(redis_server)
    for shard in (Shard(0, 2), Shard(1, 2)):
        shard_run(kv, "r1", shard, 0.25)
    assert r.get(keys.current) == b"r1"
    first = lookup(kv, "u1-3")
    assert first.run_id == "r1" and first.fields["scores"] == [0.25, 0.75] and first.fields["model_version"] == "3"
    assert first.fields["scored_at"] == 1_767_225_600_000 and first.scored_at_ms == 1_767_225_600_000
    assert "degraded_reason" not in first.fields  # a null field is left out

    shard_run(kv, "r2", Shard(0, 2), 0.75)
    assert r.get(keys.current) == b"r1"  # one shard of two: readers keep the complete run
    assert lookup(kv, "u0-0").run_id == "r1" and r.ttl(keys.run("r1")) == -1
    shard_run(kv, "r2", Shard(1, 2), 0.75)
    assert r.get(keys.current) == b"r2"
    assert lookup(kv, "u1-3").fields["scores"] == [0.75, 0.25]
    assert r.zrange(keys.runs, 0, -1) == [b"r1", b"r2"]
    assert r.hget(keys.run("r2"), "finished_at") is not None and r.hget(keys.run("r2"), "model_name") == b"m"
    replaced = [keys.run("r1"), *r.scan_iter(match=keys.entities("r1"), count=10_000)]
    assert len(replaced) == 9
    assert all(0 < r.ttl(k) <= 300 for k in replaced)  # a reader that resolved r1 a moment ago still finds it
    assert all(r.ttl(k) == -1 for k in [keys.run("r2"), *r.scan_iter(match=keys.entities("r2"), count=10_000)])


def test_a_resumed_shard_starts_after_its_last_commit_and_a_finished_run_is_refused(redis_server: LocalRedis) -> None:
    kv = kv_config(redis_server)
    keys, r = KeySpace(kv.prefix), client(redis_server)
    plan = {("t", 0): (0, 4)}
    sink = KvSink(kv, kv.prefix, SCHEMA)
    sink.resume("r1", Shard(), plan, False)
    sink.write(rows("r1", 0, range(0, 2)), None)
    sink.commit({("t", 0): (0, 2)})
    sink.write(rows("r1", 0, range(2, 3)), rejects_table("r1", [(ValueError("no"), _Message(3))]))  # then a crash

    again = KvSink(kv, kv.prefix, SCHEMA)
    resume = again.resume("r1", Shard(), None, False)  # the plan is the saved one
    assert resume.reached == {("t", 0): 2} and resume.seq == 1 and resume.resumed
    assert again.committed_rows == (2, 0)
    assert r.xlen(keys.rejects("r1")) == 0  # the crash's reject: written again by the resumed run
    again.write(rows("r1", 0, range(2, 4)), rejects_table("r1", [(ValueError("no"), _Message(3))]))
    again.commit({("t", 0): (2, 4)})
    with pytest.raises(StaleCommitError, match="commit 0"):  # the first writer of the shard lost it
        sink.commit({("t", 0): (2, 4)})
    assert again.committed_rows == (4, 1)
    assert r.get(keys.current) is None  # not before finish
    again.finish()
    assert r.get(keys.current) == b"r1"
    with pytest.raises(ReplayFinishedError) as done:
        KvSink(kv, kv.prefix, SCHEMA).resume("r1", Shard(), plan, False)
    assert done.value.committed == (4, 1, 4)
    with pytest.raises(ConfigError, match="--force"):  # the run readers use is not rewritten in place
        KvSink(kv, kv.prefix, SCHEMA).resume("r1", Shard(), plan, True)
    with pytest.raises(ConfigError, match="shards"):
        KvSink(kv, kv.prefix, SCHEMA).resume("r1", Shard(0, 2), plan, False)


def test_a_run_that_crashed_between_its_last_commit_and_the_switch_switches_when_resumed(
        redis_server: LocalRedis) -> None:
    kv = kv_config(redis_server)
    sink = KvSink(kv, kv.prefix, SCHEMA)
    sink.resume("r1", Shard(), {("t", 0): (0, 2)}, False)
    sink.write(rows("r1", 0, range(0, 2)), None)
    sink.commit({("t", 0): (0, 2)})  # no finish: the process died
    with pytest.raises(ReplayFinishedError):
        KvSink(kv, kv.prefix, SCHEMA).resume("r1", Shard(), None, False)
    assert client(redis_server).get(KeySpace(kv.prefix).current) == b"r1"


def test_rejects_go_to_the_runs_stream_and_ttl_sets_each_predictions_expiry(redis_server: LocalRedis) -> None:
    kv = kv_config(redis_server, ttl_s=3600)
    keys, r = KeySpace(kv.prefix), client(redis_server)
    sink = KvSink(kv, kv.prefix, SCHEMA, entity_field="user")
    sink.resume("r1", Shard(), {("t", 0): (0, 3)}, False)
    unkept = sink.write(rows("r1", 0, range(0, 3), entities=["a", None, ""]),
                        rejects_table("r1", [(ValueError("a bad row"), _Message(7))]))
    assert unkept == 2  # the run counts them as rejects, not predictions
    sink.commit({("t", 0): (0, 3)})
    assert sink.committed_rows == (1, 3)
    assert 3500 < r.ttl(keys.entity("r1", "a")) <= 3600
    entries = [fields for _, fields in r.xrange(keys.rejects("r1"))]
    assert [(e[b"source"], e[b"partition"], e[b"offset"]) for e in entries] == [
        (b"t", b"0", b"1"), (b"t", b"0", b"2"), (b"t", b"0", b"7")]
    assert all(b"'user'" in e[b"reason"] for e in entries[:2]) and entries[2][b"reason"] == b"a bad row"
    assert entries[2][b"original"] == b"original 7" and entries[2][b"stage"] == b"infer"


def test_a_stalled_store_is_a_store_error_naming_the_address_and_never_the_password(
        redis_server: LocalRedis) -> None:
    kv = kv_config(redis_server, timeout_ms=200)
    sink = KvSink(kv, kv.prefix, SCHEMA)
    sink.resume("r1", Shard(), {("t", 0): (0, 2)}, False)
    redis_server.pause()
    try:
        with pytest.raises(StoreError, match=redis_server.address) as caught:
            sink.write(rows("r1", 0, range(0, 2)), None)
    finally:
        redis_server.resume()
    assert redis_server.password not in str(caught.value)


class _Message:
    """A dead letter's record, as rejects_table reads one."""

    def __init__(self, offset: int) -> None:
        self._offset = offset

    def topic(self) -> str:
        return "t"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes:
        return f"original {self._offset}".encode()


def test_a_row_written_again_replaces_the_whole_hash_a_null_field_keeps_no_earlier_value(
        redis_server: LocalRedis) -> None:
    kv = kv_config(redis_server)
    keys, r = KeySpace(kv.prefix), client(redis_server)
    sink = KvSink(kv, kv.prefix, SCHEMA)
    sink.resume("r1", Shard(), {("t", 0): (0, 2)}, False)
    first = rows("r1", 0, range(0, 1), entities=["u1"])
    first = first.set_column(first.schema.get_field_index("degraded"), "degraded", pa.array([True]))
    first = first.set_column(first.schema.get_field_index("degraded_reason"), "degraded_reason", pa.array(["breaker"]))
    sink.write(first, None)
    sink.write(rows("r1", 0, range(1, 2), 0.25, entities=["u1"]), None)  # the same entity, scored again
    stored = r.hgetall(keys.entity("r1", "u1"))
    assert stored[b"degraded"] == b"false" and b"degraded_reason" not in stored and stored[b"event_id"] == b"e0-1"


def test_a_run_that_completes_after_a_run_started_later_does_not_take_the_readers_back(
        redis_server: LocalRedis) -> None:
    """Monday's run, killed and resumed after Tuesday's completed: readers keep Tuesday's, and
    Monday's expires as a replaced run does."""
    kv = kv_config(redis_server, keep_previous_s=60)
    keys, r = KeySpace(kv.prefix), client(redis_server)
    monday = KvSink(kv, kv.prefix, SCHEMA)
    monday.resume("mon", Shard(), {("t", 0): (0, 2)}, False)
    monday.write(rows("mon", 0, range(0, 1)), None)
    monday.commit({("t", 0): (0, 1)})
    r.hset(keys.run("mon"), "started_at", 1_000)  # started first
    tuesday = KvSink(kv, kv.prefix, SCHEMA)
    tuesday.resume("tue", Shard(), {("t", 0): (0, 2)}, False)
    tuesday.write(rows("tue", 0, range(0, 2)), None)
    tuesday.commit({("t", 0): (0, 2)})
    tuesday.finish()
    assert r.get(keys.current) == b"tue"
    monday.write(rows("mon", 0, range(1, 2)), None)
    monday.commit({("t", 0): (1, 2)})
    monday.finish()
    assert r.get(keys.current) == b"tue" and r.ttl(keys.run("tue")) == -1
    assert 0 < r.ttl(keys.run("mon")) <= 60 and 0 < r.ttl(keys.entity("mon", "u0-0")) <= 60


def test_a_prediction_field_of_bytes_is_refused_naming_it(redis_server: LocalRedis) -> None:
    kv = kv_config(redis_server)
    with pytest.raises(ConfigError, match="--to-kv.*'payload' holds bytes"):
        KvSink(kv, kv.prefix, SCHEMA.append(pa.field("payload", pa.binary())))
