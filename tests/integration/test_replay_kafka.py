"""Replays on the real broker: exact windows, bounded while producers write, resumable, apart
from the live group and its output."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from streamer.commands.demo import synthetic_events
from streamer.commands.replay import run_replay
from streamer.config import Config
from streamer.errors import ConfigError, ReplayFinishedError
from streamer.formats.configured import input_codec, output_codec
from streamer.kafka.ranges import When, parse_when
from streamer.wiring.stream import build_processor
from tests.conftest import Topics, committed_offsets, end_offsets, make_config, run_until_outputs
from tests.support.faults import read_all, settled, wait_until, write_config

pytestmark = pytest.mark.kafka
T0 = 1_700_000_000_000  # event i is stamped T0 + i seconds


def produce_stamped(bootstrap: str, cfg: Config, topic: str, first: int, n: int, *,
                    base_ms: int = T0, step_ms: int = 1000) -> None:
    """Events ``first..first+n-1``; event i is stamped ``base_ms + i * step_ms``."""
    codec = input_codec(cfg.input)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10})
    for i, e in enumerate(synthetic_events(n, 32, seed=first), start=first):
        stamp = base_ms + i * step_ms
        event = dict(e, event_id=f"evt-{i}", event_time=stamp)
        producer.produce(topic, codec.encode(event), str(e["entity_id"]).encode(), timestamp=stamp)
        producer.poll(0)
    assert producer.flush(60) == 0


def scored(bootstrap: str, cfg: Config, topic: str) -> list[dict[str, Any]]:
    """The predictions of ``topic``, once the last transaction's markers are written (a replay's)."""
    wait_until(lambda: settled(bootstrap, topic), 30, f"the commit markers of {topic}")
    codec = output_codec(cfg)
    return [dict(codec.decode(m.value())) for m in read_all(bootstrap, topic)]


def test_parse_when_forms() -> None:
    assert parse_when("earliest", "--from") == When("earliest")
    assert parse_when("2h", "--from", now_ms=10_000_000) == When("timestamp", 10_000_000 - 7_200_000)
    assert parse_when("2026-11-29T10:00:00Z", "--from").timestamp_ms == 1_795_946_400_000
    assert parse_when("0:10,2:5", "--from") == When("offsets", offsets=((0, 10), (2, 5)))
    with pytest.raises(ConfigError, match="--to"):
        parse_when("yesterday-ish", "--to")


def test_replay_scores_exactly_the_window_apart_from_live(bootstrap: str, topics: Topics) -> None:
    cfg = make_config(bootstrap, topics)
    produce_stamped(bootstrap, cfg, topics.input, 0, 3000)
    run_until_outputs(build_processor(cfg), 3000)  # the live group, caught up
    live_before = committed_offsets(bootstrap, topics.group, topics.input)
    live_out_before = len(read_all(bootstrap, topics.output))

    t1, t2 = T0 + 1000 * 1000, T0 + 2000 * 1000  # events 1000..1999
    summary = run_replay(cfg, When("timestamp", t1), When("timestamp", t2), run_id="window",
                         model_version="2-candidate", progress=io.StringIO())
    assert summary.events == 1000 and summary.stats.predictions == 1000
    # The counts add up: every offset in range predicted, none dead-lettered, none without an event
    # (the input is not transactional); what the consumer read past the window's end is left alone.
    assert (summary.handled, summary.without_event, summary.again) == (1000, 0, 0)
    assert summary.outside == summary.stats.events - 1000 >= 0
    assert summary.lines()[1].startswith("events in range 1000 = predictions 1000 + dead letters 0 + "
                                         "offsets without an event 0 ")
    out = scored(bootstrap, cfg, f"{topics.output}.backfill")
    assert sorted(int(p["event_id"][4:]) for p in out) == list(range(1000, 2000))
    assert {p["run_id"] for p in out} == {"window"}
    assert {p["model_version"] for p in out} == {"2-candidate"}
    # The live group and the live output are untouched.
    assert committed_offsets(bootstrap, topics.group, topics.input) == live_before
    assert len(read_all(bootstrap, topics.output)) == live_out_before
    assert all(p.get("run_id") is None for p in scored(bootstrap, cfg, topics.output))
    with pytest.raises(ReplayFinishedError):
        run_replay(cfg, When("timestamp", t1), When("timestamp", t2), run_id="window")
    with pytest.raises(ConfigError, match="live output"):
        run_replay(cfg, When("earliest"), output_topic=topics.output, run_id="oops")


def test_replay_counts_add_up_over_an_input_written_in_transactions(bootstrap: str, topics: Topics) -> None:
    """One event per transaction: each commit marker takes an offset, so 20 events span 40
    offsets; the summary names the markers instead of letting 20 events look lost."""
    cfg = make_config(bootstrap, topics)
    codec = input_codec(cfg.input)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topics.input}-writer",
                         "partitioner": "murmur2_random"})
    producer.init_transactions(30)
    for i, e in enumerate(synthetic_events(20, 32, seed=5)):
        producer.begin_transaction()
        producer.produce(topics.input, codec.encode(dict(e, event_id=f"evt-{i}")), str(e["entity_id"]).encode())
        producer.commit_transaction(30)
    summary = run_replay(cfg, When("earliest"), run_id="txn", progress=io.StringIO())
    assert summary.events == 40 and summary.stats.predictions == 20
    assert (summary.without_event, summary.again) == (20, 0)
    assert summary.events == (summary.stats.predictions + sum(summary.stats.dead_letters.values())
                              + summary.without_event)
    assert "events in range 40 = predictions 20 + dead letters 0 + offsets without an event 20 " \
        in "\n".join(summary.lines())


def test_replay_ends_at_the_captured_end_while_producers_write(bootstrap: str, topics: Topics) -> None:
    cfg = make_config(bootstrap, topics)
    produce_stamped(bootstrap, cfg, topics.input, 0, 2000)
    stop, batches = threading.Event(), []

    def keep_writing() -> None:
        while not stop.is_set():
            produce_stamped(bootstrap, cfg, topics.input, 10_000 + 100 * len(batches), 100)
            batches.append(100)

    writer = threading.Thread(target=keep_writing, daemon=True)
    writer.start()
    try:
        summary = run_replay(cfg, When("earliest"), run_id="moving", progress=io.StringIO(),
                             batch_size=64, max_wait_ms=5)
    finally:
        stop.set()
        writer.join(60)
    assert batches, "the producer wrote nothing while the replay ran"
    # The range ends where the input ended when the run started: 2000 events plus whatever the
    # writer had added by then, and nothing the writer added later.
    ids = sorted(int(p["event_id"][4:]) for p in scored(bootstrap, cfg, f"{topics.output}.backfill"))
    assert summary.stats.predictions == summary.events == len(ids)
    assert ids[:2000] == list(range(2000))
    assert sum(end_offsets(bootstrap, topics.input).values()) > len(ids)  # more came; not scored


def test_killed_replay_resumes_with_the_same_bounds(bootstrap: str, topics: Topics, tmp_path: Path) -> None:
    """SIGKILL an at-least-once replay mid-range; the rerun must resume at the committed offsets and
    stop at the end saved by the first run, though its ``--from 1h`` and default ``--to`` now mean
    more; its summary bounds what it may have written again."""
    cfg = make_config(bootstrap, topics)
    now = int(time.time() * 1000)
    prefix, size, later = 2000, 30_000, 3000
    # Events stamped 3 h ago (before the window), then the range, stamped 30 min ago.
    produce_stamped(bootstrap, cfg, topics.input, 0, prefix, base_ms=now - 3 * 3_600_000, step_ms=0)
    start = end_offsets(bootstrap, topics.input)
    produce_stamped(bootstrap, cfg, topics.input, prefix, size, base_ms=now - 1_800_000, step_ms=0)
    end = end_offsets(bootstrap, topics.input)  # the default --to: the end when the run starts
    assert sum(end[p] - start[p] for p in end) == size and all(end[p] > start[p] for p in end)

    config = write_config(tmp_path / "cfg.yaml", bootstrap=bootstrap, input_topic=topics.input,
                          output_topic=topics.output, group=topics.group, guarantee="at_least_once",
                          processing={"commit_interval_ms": 100},  # commits early and often
                          kafka={"queue.buffering.max.messages": 1000})  # progress paced by acks
    argv = [sys.executable, "-m", "streamer", "replay", "--config", str(config), "--from", "1h",
            "--run-id", "crash", "--batch-size", "64", "--max-wait-ms", "5", "--at-least-once"]
    group, backfill = f"{topics.group}.replay.crash", f"{topics.output}.backfill"
    log = tmp_path / "replay.log"
    with log.open("ab") as out:
        first = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        def progressed() -> bool:  # a commit past the start, on any partition, by the run itself
            assert first.poll() is None, f"the replay exited ({first.returncode}) before its kill"
            return any(o > start[p] for p, o in committed_offsets(bootstrap, group, topics.input).items())

        wait_until(progressed, 120, "a commit of progress by the replay", lambda: log.read_text()[-3000:])
    finally:
        first.kill()
        first.wait()
    assert first.returncode == -signal.SIGKILL
    done = committed_offsets(bootstrap, group, topics.input)  # as the kill left them: final now
    at_kill = end_offsets(bootstrap, backfill, committed_only=False)
    assert all(start[p] <= done[p] <= end[p] for p in end), (start, done, end)
    assert sum(done[p] - start[p] for p in end) > 0 and sum(end[p] - done[p] for p in end) > 0, \
        "the kill must fall after some progress was committed and before the end"

    # Later events: after the saved end, stamped now, so inside what "--from 1h" to latest means now.
    produce_stamped(bootstrap, cfg, topics.input, prefix + size, later, base_ms=int(time.time() * 1000),
                    step_ms=0)
    rerun = subprocess.run(argv, capture_output=True, text=True, timeout=180)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr[-3000:]
    assert "replay crash resumed and finished" in rerun.stdout
    left = sum(end[p] - done[p] for p in end)
    assert f"events in range {left} = " in rerun.stdout, rerun.stdout  # planned from the commit

    codec = output_codec(cfg)
    before: list[tuple[int, int]] = []  # (input partition, offset) scored by the killed run
    after: list[tuple[int, int]] = []  # ... and by the rerun: beyond the backfill's end at the kill
    for m in read_all(bootstrap, backfill):
        pred = codec.decode(m.value())
        assert pred["run_id"] == "crash" and pred["source_topic"] == topics.input
        (after if m.offset() >= at_kill[m.partition()] else before).append(
            (pred["source_partition"], pred["source_offset"]))
    # The rerun scored exactly [committed at the kill, saved end) of each partition, once each.
    assert sorted(after) == [(p, o) for p in sorted(end) for o in range(done[p], end[p])]
    # The killed run scored its committed prefix once and nothing outside the range; only its
    # uncommitted tail is scored twice.
    assert len(set(before)) == len(before)
    assert all(start[p] <= o < end[p] for p, o in before)
    assert ({(p, o) for p, o in before if o < done[p]}
            == {(p, o) for p in end for o in range(start[p], done[p])})
    tail = sum(1 for p, o in before if o >= done[p])
    assert len(before) + len(after) == size + tail
    # What the summary says may have been written again covers what was: the killed run's tail.
    assert f"at least once: up to {left} of them may have been written already (resumed: " in rerun.stdout
    assert tail <= left
    # Finished at the saved ends, which the commits still carry.
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        final = consumer.committed([TopicPartition(topics.input, p) for p in end], timeout=30)
    finally:
        consumer.close()
    assert {tp.partition: tp.offset for tp in final} == end
    assert all(json.loads(tp.metadata) == {"run": "crash", "end": end[tp.partition]} for tp in final)
    print(f"committed at kill {done} of {start}..{end}; outputs before the kill {len(before)} "
          f"(uncommitted tail {tail}), by the rerun {len(after)}")
