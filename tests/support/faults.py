"""Fault injection for the test suite and the chaos benchmark: processors as child processes,
and an exact audit of what reached the output and dead-letter topics.

The audit reads with ``isolation.level=read_committed``, as downstream users must, and maps every
prediction and dead letter back to the input offset it stands for.
"""

from __future__ import annotations

import atexit
import functools
import os
import signal
import subprocess
import sys
import time
import uuid
import weakref
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import KafkaException, Message, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from streamer.errors import BrokerError
from streamer.formats.avro import AvroCodec, load_schema
from streamer.kafka.clients import (
    admin_consumer,
    is_transient,
    plain_admin,
    plain_producer,
    read_to_end,
    retrying,
)
from streamer.kafka.topics import partitions

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "deploy" / "config" / "example.yaml"


def write_config(path: Path, *, bootstrap: str, input_topic: str, output_topic: str, group: str,
                 guarantee: str, instance: str | None = None, kafka: dict[str, Any] | None = None,
                 processing: dict[str, Any] | None = None, batching: dict[str, Any] | None = None,
                 metrics_port: int | None = None, model: dict[str, Any] | None = None) -> Path:
    """The example config with these topics, group and guarantee (pipelined), written to ``path``."""
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["kafka"] = {"bootstrap.servers": bootstrap, "session.timeout.ms": 6000,
                    "heartbeat.interval.ms": 1000, **(kafka or {})}
    if instance is not None:
        doc["kafka"]["group.instance.id"] = instance  # static membership: restarts do not rebalance
    doc["input"].update(topics=[input_topic], group_id=group)
    doc["output"]["topic"] = output_topic
    doc["batching"] = {"max_size": 256, "max_wait_ms": 20, **(batching or {})}
    doc["processing"] = {"guarantee": guarantee, "commit_interval_ms": 500,
                         "transaction_timeout_ms": 15000, **(processing or {})}
    if metrics_port is not None:
        doc["metrics"] = {"enabled": True, "host": "127.0.0.1", "port": metrics_port}
    for section, key in (("input", "schema"), ("model", "path"), ("output", "schema")):
        doc[section][key] = str((EXAMPLE.parent / doc[section][key]).resolve())
    # The fault suite runs pipelined (issue 15): the harder path, with batches on the inference
    # thread when a kill, a rebalance or an abort comes. Tests that build a Config directly run
    # the default (auto: inline for the light demo model).
    doc["model"].update({"pipelined": True, **(model or {})})
    path.write_text(yaml.safe_dump(doc))
    return path


STARTED = "kafka settings: "  # `streamer run` logs it once its signal handlers are in place (cli._run)


class ChildProcessor:
    """`streamer run` in a child process that can be killed, stopped and continued.

    Every child still running when this process exits is killed, so that a failed test or an
    interrupted benchmark leaves no processor behind. ``module`` is what runs as
    ``python -m MODULE run --config CONFIG``: the tests put a fault-planting wrapper there.
    """

    def __init__(self, config: Path, log: Path, env: dict[str, str] | None = None,
                 module: tuple[str, ...] = ("streamer",), args: tuple[str, ...] = ()) -> None:
        self.config, self.log, self.module, self.args = config, log, module, args
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ChildProcessor:
        self._runs = self._started_runs() + 1
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", *self.module, "run", "--config",
                                          str(self.config), *self.args], env=self.env, stdout=out,
                                         stderr=subprocess.STDOUT, cwd=ROOT)
        _CHILDREN.add(self)
        return self

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def terminate(self, timeout_s: float = 60) -> int:
        """SIGTERM and wait for the graceful exit; returns the exit code. A process still starting
        (Python importing, no handler yet: the signal would kill it) is given its handlers first."""
        assert self.proc is not None
        proc = self.proc
        wait_until(lambda: self._started_runs() >= self._runs or proc.poll() is not None, timeout_s,
                   f"{self.log.name} to show the run started (its signal handlers in place)", self.tail)
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout_s)

    def _started_runs(self) -> int:
        return self.log.read_text(errors="replace").count(STARTED) if self.log.exists() else 0

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_for_log(self, text: str, timeout_s: float = 60) -> None:
        """Wait until the process's log shows ``text`` (e.g. 'assigned': it joined the group)."""
        wait_until(lambda: text in self.log.read_text(errors="replace"), timeout_s,
                   f"{self.log.name} to log {text!r}", self.tail)

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


_CHILDREN: weakref.WeakSet[ChildProcessor] = weakref.WeakSet()


@atexit.register
def _kill_children() -> None:
    for child in list(_CHILDREN):
        if child.proc is not None and child.proc.poll() is None:
            child.proc.send_signal(signal.SIGCONT)
            child.proc.kill()


def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str,
               explain: Callable[[], str] = lambda: "") -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}\n{explain()}")
        time.sleep(0.05)


def end_offsets(bootstrap: str, topic: str, committed_only: bool = True) -> dict[int, int]:
    """Each partition's end: with ``committed_only`` (read_committed) the last stable offset,
    which an open transaction holds back; else the high watermark."""
    consumer = admin_consumer(bootstrap, "watermarks", read_committed=committed_only)
    try:  # retried: a broker being restarted (the rolling-restart test) answers with a timeout
        return retrying(lambda: {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                                 for p in partitions(consumer, topic, 10)}, "reading the partitions' ends")
    finally:
        consumer.close()


def committed_offsets(bootstrap: str, group: str, topic: str, stable: bool = True) -> dict[int, int]:
    """The group's committed offsets (-1001 where none).

    Read by a consumer that names the group but never joins it. Not with the admin client's
    list_consumer_group_offsets: in librdkafka 2.16 its response handler crashes the process
    (SIGSEGV in rd_kafka_cgrp_op) when a restarted broker answers "coordinator loading".

    ``stable`` (read_committed, librdkafka's require_stable): while a transaction holding offsets
    of the group is open, the broker answers "unstable" and the read waits for its end, up to its
    transaction timeout when its producer died. Without it the same committed offsets come at
    once: the open transaction's offsets are not among them either way.
    """
    consumer = admin_consumer(bootstrap, group, read_committed=stable)
    try:
        tps = [TopicPartition(topic, p) for p in partitions(consumer, topic, 10)]
        result = retrying(lambda: consumer.committed(tps, timeout=30), "reading committed offsets")
        return {tp.partition: tp.offset for tp in result}
    finally:
        consumer.close()


def caught_up(bootstrap: str, group: str, topic: str) -> bool:
    """Has the group committed every input offset? (False while the broker cannot say.)"""
    try:
        return committed_offsets(bootstrap, group, topic) == end_offsets(bootstrap, topic)
    except BrokerError:
        return False  # a restarted broker is still loading its coordinators
    except KafkaException as exc:
        if is_transient(exc.args[0]):
            return False
        raise


@functools.lru_cache(maxsize=8)
def _admin(bootstrap: str) -> Any:
    return plain_admin(bootstrap)  # one per cluster: the waits below ask many times a second


def forget_clients() -> None:
    """Let go of the clients kept for the waits (the session's end: none outlives its broker)."""
    _admin.cache_clear()


def owners(bootstrap: str, group: str) -> dict[int, int]:
    """Partition -> how many members own it, as the group coordinator says now ({} while the
    coordinator cannot say: it may be moving after a broker's death)."""
    try:
        desc = _admin(bootstrap).describe_consumer_groups([group])[group].result(timeout=10)
    except (KafkaException, TimeoutError):  # TimeoutError: no answer in 10 s (futures' own)
        return {}
    count: dict[int, int] = {}
    for member in desc.members:
        for tp in member.assignment.topic_partitions:
            count[tp.partition] = count.get(tp.partition, 0) + 1
    return count


def written(bootstrap: str, topic: str) -> int:
    """Messages written to ``topic`` so far, committed or not (a progress signal, not an audit);
    0 while the broker cannot say."""
    try:
        return sum(end_offsets(bootstrap, topic, committed_only=False).values())
    except (KafkaException, BrokerError):
        return 0


def settled(bootstrap: str, topic: str) -> bool:
    """No transaction holds ``topic`` back: each partition's last stable offset is its high
    watermark. A commit_transaction returns before the coordinator has written its commit markers
    to the partitions; until they are, a read_committed reader stops short of the transaction."""
    try:
        return end_offsets(bootstrap, topic) == end_offsets(bootstrap, topic, committed_only=False)
    except (KafkaException, BrokerError):
        return False


def read_all(bootstrap: str, topic: str, timeout_s: float = 60.0) -> list[Message]:
    """Every committed message of ``topic`` up to its end offsets as of now (read_committed)."""
    consumer = admin_consumer(bootstrap, f"reader-{uuid.uuid4().hex}", read_committed=True)
    try:
        return list(read_to_end(consumer, topic, from_committed=False, timeout_s=timeout_s))
    finally:
        consumer.close()


@dataclass(frozen=True, slots=True)
class Audit:
    """What a run left behind, counted against every input offset."""

    events: int
    lost: int  # input offsets with no prediction and no dead letter
    duplicated: int  # input offsets with more than one
    out_of_order: int  # predictions behind a later offset of the same input partition
    # First predictions behind a later offset of the same input partition: at-least-once redoes
    # an uncommitted tail (out_of_order counts that), but a first prediction is never late.
    reordered: int = 0
    extra: int = 0  # outputs beyond one per input offset (the sum of the duplicates' copies)

    def line(self) -> str:
        return (f"events {self.events}, lost {self.lost}, duplicated {self.duplicated} "
                f"({self.extra} extra outputs), out of order {self.out_of_order}, "
                f"reordered {self.reordered}")


def audit(bootstrap: str, input_topic: str, output_topic: str, dlq_topic: str) -> Audit:
    """Count outputs per input offset over the committed output and dead-letter topics."""
    ends = end_offsets(bootstrap, input_topic)
    decoder = AvroCodec(load_schema(ROOT / "streamer" / "schemas" / "prediction.avsc"))
    seen: Counter[tuple[int, int]] = Counter()
    out_of_order = reordered = 0
    last: dict[tuple[int, int], int] = {}  # (output partition, input partition) -> last offset
    first_last: dict[tuple[int, int], int] = {}  # the same, over first predictions only
    for m in read_all(bootstrap, output_topic):
        p = decoder.decode(m.value())
        source = (p["source_partition"], p["source_offset"])
        seen[source] += 1
        lane = (m.partition(), source[0])
        if source[1] < last.get(lane, -1):
            out_of_order += 1
        last[lane] = source[1]
        if seen[source] == 1:
            if source[1] < first_last.get(lane, -1):
                reordered += 1
            first_last[lane] = source[1]
    for m in read_all(bootstrap, dlq_topic):
        h = {k: v for k, v in m.headers() or []}
        seen[(int(h["streamer.dlq.original.partition"]), int(h["streamer.dlq.original.offset"]))] += 1
    expected = {(p, o) for p, end in ends.items() for o in range(end)}
    return Audit(events=len(expected), lost=len(expected - set(seen)),
                 duplicated=sum(1 for k, c in seen.items() if c > 1 and k in expected),
                 out_of_order=out_of_order, reordered=reordered,
                 extra=sum(c - 1 for k, c in seen.items() if c > 1 and k in expected))


def set_topic_config(bootstrap: str, topic: str, settings: dict[str, str]) -> None:
    """Change topic-level settings (incrementally: others keep their values)."""
    admin = plain_admin(bootstrap)
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in settings.items()])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


def markers_visible(bootstrap: str, topic: str, timeout_s: float = 30.0) -> bool:
    """Write a marker to every partition; can a read_committed reader see them all (no hanging
    transaction holding the partition's last stable offset back)?"""
    parts = end_offsets(bootstrap, topic)
    producer = plain_producer(bootstrap)
    for p in parts:
        producer.produce(topic, b"marker", partition=p)
    if producer.flush(30):
        return False
    try:
        got = read_all(bootstrap, topic, timeout_s)
    except BrokerError:  # no progress: an open transaction holds the partition back
        return False
    return sum(m.value() == b"marker" for m in got) == len(parts)
