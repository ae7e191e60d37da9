"""A topic replay stopped every way a user stops one, resumed by its run id until it finishes: a
read_committed reader of the backfill topic sees each prediction of the run exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from streamer.commands.demo import synthetic_events
from streamer.formats.configured import input_codec, output_codec
from tests.conftest import Topics, committed_offsets, end_offsets, make_config
from tests.support.faults import ROOT, read_all, settled, wait_until, write_config, written

pytestmark = pytest.mark.kafka
EVENTS = 300_000
RUN = "eos"


def produce_bulk(bootstrap: str, topic: str, template: bytes, marker: bytes, n: int, partitions: int) -> None:
    """``n`` events, pre-encoded: ``template`` with its fixed-width event id ``marker`` replaced by
    ``evt-000000``, ``evt-000001``, ...; spread over the partitions in turn."""
    before, after = template.split(marker)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10_000,
                         "queue.buffering.max.messages": 500_000, "compression.type": "lz4"})
    for i in range(n):
        producer.produce(topic, before + b"evt-%06d" % i + after, partition=i % partitions)
        if i % 50_000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


class Run:
    """One `python -m streamer replay` of the run, its output in a log file."""

    def __init__(self, config: Path, log: Path, *flags: str) -> None:
        self.log = log
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "streamer", "replay", "--config", str(config), "--from", "earliest",
                 "--run-id", RUN, *flags], stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"})

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def until(self, condition: Callable[[], bool], what: str) -> None:
        def met() -> bool:
            assert self.proc.poll() is None, f"the replay exited ({self.proc.returncode}) before {what}:\n" \
                                             f"{self.output()[-3000:]}"
            return condition()

        wait_until(met, 120, what, lambda: self.output()[-3000:])

    def stop(self, sig: int) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(timeout=120)


@pytest.mark.timeout(400)
def test_a_replay_stopped_and_resumed_every_way_writes_each_prediction_once(
        bootstrap: str, topics: Topics, tmp_path: Path) -> None:
    cfg = make_config(bootstrap, topics)
    codec = input_codec(cfg.input)
    event = dict(synthetic_events(1, 32)[0], event_id="evt-XXXXXX")
    produced_at = time.monotonic()
    produce_bulk(bootstrap, topics.input, codec.encode(event), b"evt-XXXXXX", EVENTS, 3)
    assert sum(end_offsets(bootstrap, topics.input).values()) == EVENTS
    produce_s = time.monotonic() - produced_at

    common = {"bootstrap": bootstrap, "input_topic": topics.input, "output_topic": topics.output,
              "group": topics.group, "guarantee": "at_least_once"}  # the live stream's; a replay's is its own
    # No periodic commit within the test: a stop comes before the run's first commit.
    rare = write_config(tmp_path / "rare.yaml", **common,
                        processing={"commit_interval_ms": 300_000, "transaction_timeout_ms": 600_000})
    often = write_config(tmp_path / "often.yaml", **common, processing={"commit_interval_ms": 200})
    group, backfill = f"{topics.group}.replay.{RUN}", f"{topics.output}.backfill"
    paced = ("--batch-size", "256", "--max-wait-ms", "5")  # the stopped runs leave most of the range

    def committed() -> int:
        return sum(max(o, 0) for o in committed_offsets(bootstrap, group, topics.input).values())

    started = time.monotonic()
    stops = [(signal.SIGKILL, rare), (signal.SIGINT, rare), (signal.SIGTERM, rare),
             (signal.SIGKILL, often), (signal.SIGINT, often), (signal.SIGTERM, often)]
    seen: list[tuple[str, int, int]] = []  # (signal, committed before, after)
    for n, (sig, config) in enumerate(stops):
        before, wrote = committed(), written(bootstrap, backfill)
        run = Run(config, tmp_path / f"run{n}.log", *paced)
        if config is rare:  # writing inside its first transaction, nothing of it committed
            # (more than the markers with which its fence aborts the killed run's transaction)
            run.until(lambda: written(bootstrap, backfill) > wrote + 1000, "the run's first writes")
            assert committed() == before
        else:  # a transaction of this run committed
            run.until(lambda: committed() > before, "a commit of the run's progress")
        code = run.stop(sig)
        out = run.output()
        assert "Traceback" not in out and "KeyboardInterrupt" not in out, out[-3000:]
        if sig == signal.SIGKILL:
            assert code == -signal.SIGKILL
        else:  # a clean stop: the open batch written and committed, the summary, exit 6
            assert code == 6, out[-3000:]
            assert f"replay {RUN} {'resumed and ' if n else ''}stopped" in out
            assert out.rstrip().endswith(f"resume with --run-id {RUN}")
            assert committed() > before
        seen.append((signal.Signals(sig).name, before, committed()))
    assert seen[0][2] == 0, "the first run was killed before any commit"
    assert committed() < EVENTS, "the stopped runs must leave some of the range to the last one"

    last = Run(often, tmp_path / "last.log")
    code = last.proc.wait(timeout=240)
    out = last.output()
    assert code == 0 and f"replay {RUN} resumed and finished" in out, out[-3000:]
    replay_s = time.monotonic() - started

    wait_until(lambda: settled(bootstrap, backfill), 30, "the last transaction's commit markers")
    values = [m.value() for m in read_all(bootstrap, backfill)]  # read_committed
    assert len(values) == EVENTS, f"{len(values)} predictions of {EVENTS} events"
    # Decoding 300,000 predictions takes longer than the replay: every one is read by its bytes (the
    # event id is the first field, "\x14" its length; the run id, degraded and degraded_reason the
    # last three), and one in 97 decoded in full says those bytes mean what the test takes them to.
    out_codec = output_codec(cfg)
    for value in values[::97]:
        prediction = out_codec.decode(value)
        assert (prediction["event_id"].encode(), prediction["run_id"]) == (value[1:11], RUN)
        assert value.endswith(b"\x02\x06" + RUN.encode() + b"\x00\x00")
    assert all(v[0] == 0x14 and v.endswith(b"\x02\x06" + RUN.encode() + b"\x00\x00") for v in values)
    assert len({v[1:11] for v in values}) == EVENTS  # 300,000 distinct event ids
    assert committed() == EVENTS
    assert "exactly once" in out and f"dead letters to {backfill}.dlq" in out
    print(f"produced {EVENTS} in {produce_s:.1f} s; stops {seen}; replay runs {replay_s:.1f} s in all; "
          f"backfill offsets {written(bootstrap, backfill)} for {EVENTS} predictions")
