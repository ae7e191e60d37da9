"""The status topic: each job's latest status (compacted, keyed by its id), read into memory and written through one producer.

Every reader of job states goes through a :class:`Board`: ``jobs status``, ``list`` and ``wait``
read the topic to its end once; a worker and the HTTP API follow it on a thread. A write is
acknowledged (acks=all, idempotent) before :meth:`Board.write` returns, and the board shows it at
once. The jobs topic and the status topic are made on first use (:func:`ensure_topics`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import orjson
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from streamer.config import JobsConfig
from streamer.errors import BrokerError, NoSuchJob, NoSuchTopic
from streamer.jobs.states import JobStatus, State
from streamer.kafka import clients, topics

log = logging.getLogger(__name__)
STATUS_PARTITIONS = 6
BOARD_GROUP = "streamer-jobs-board"  # named, never joined: a board assigns itself every partition
TIMEOUT_S = 30.0


class JobsSections(Protocol):
    """The config a jobs client reads: ``kafka`` and ``jobs`` (a Config or an UnscoredConfig)."""

    @property
    def kafka(self) -> Any: ...
    @property
    def jobs(self) -> JobsConfig: ...


def ensure_topics(cfg: JobsSections, timeout_s: float = TIMEOUT_S) -> None:
    """The jobs topic (``jobs.partitions``, no retention limit) and the compacted status topic,
    made unless they exist."""
    admin = clients.config_admin(cfg)
    # kept until deleted by hand: a job waiting past the broker's retention (a not_before weeks
    # ahead, workers down for a long weekend) is never lost; a submission is about a kilobyte
    topics.create(admin, {cfg.jobs.topic: cfg.jobs.partitions}, timeout_s=timeout_s, config={"retention.ms": "-1"})
    topics.create(admin, {cfg.jobs.status_topic: STATUS_PARTITIONS}, timeout_s=timeout_s,
                  config={"cleanup.policy": "compact", "min.compaction.lag.ms": "3600000"})


class Board:
    """The jobs' latest statuses; :meth:`follow` keeps reading on a thread, :meth:`load` reads to the end once."""

    def __init__(self, cfg: JobsSections) -> None:
        self.cfg, self.topic = cfg, cfg.jobs.status_topic
        self._jobs: dict[str, JobStatus] = {}
        self._seen: dict[str, float] = {}  # when this board last read a status of each job (its own clock)
        # a cancel read for a job since it was last queued: a worker's own write after it must not hide it
        self._cancels: dict[str, JobStatus] = {}
        self._before: dict[str, JobStatus] = {}  # each job's status before its latest one
        self._changed = threading.Condition()
        self._producer: Producer | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._read: dict[int, int] = {}  # the follower's position per partition

    # ---- reading --------------------------------------------------------------------------

    def load(self, timeout_s: float = TIMEOUT_S) -> Board:
        """Read the topic from its start to the end offsets of now (a followed board: wait until
        the follower has read that far, never reading older records over newer ones)."""
        if self._thread is not None:
            self.sync(timeout_s)
            return self
        consumer = clients.config_consumer(self.cfg, BOARD_GROUP)
        try:
            for m in clients.read_to_end(consumer, self.topic, False, timeout_s):
                with self._changed:
                    self._take(m.key(), m.value())
        except NoSuchTopic:  # no job was ever submitted: an empty board
            pass
        finally:
            consumer.close()
        return self

    def follow(self) -> Board:
        """Read on a thread from the start, and keep reading; returns once the board holds what the
        topic held when it was called."""
        consumer = clients.config_consumer(self.cfg, BOARD_GROUP)
        parts = topics.partitions(consumer, self.topic, TIMEOUT_S)
        consumer.assign([TopicPartition(self.topic, p, 0) for p in parts])  # 0: from the start of each
        self._thread = threading.Thread(target=self._run, args=(consumer,), name="jobs-board", daemon=True)
        self._thread.start()
        self.sync()
        return self

    def sync(self, timeout_s: float = TIMEOUT_S) -> None:
        """Wait until the follower has read everything written before this call."""
        assert self._thread is not None, "follow() first"
        deadline = time.monotonic() + timeout_s
        probe = clients.config_consumer(self.cfg, BOARD_GROUP)
        try:
            ends = {p: self._end(probe, p, deadline) for p in topics.partitions(probe, self.topic, timeout_s)}
        finally:
            probe.close()
        with self._changed:
            while any(self._read.get(p, 0) < end for p, end in ends.items()):
                if not self._changed.wait(max(deadline - time.monotonic(), 0)) and time.monotonic() > deadline:
                    raise BrokerError(f"reading {self.topic}: not at its end after {timeout_s:.0f} s")

    def _end(self, probe: Consumer, partition: int, deadline: float) -> int:
        """A partition's end offset, asked again while its leader is not known yet (a topic just
        made by another client)."""
        while True:
            try:
                return int(probe.get_watermark_offsets(TopicPartition(self.topic, partition), timeout=5.0)[1])
            except KafkaException as exc:
                if time.monotonic() > deadline:
                    raise BrokerError(f"reading {self.topic}: {exc.args[0]}") from exc
                time.sleep(0.1)  # a leader being elected: asked again

    def _run(self, consumer: Consumer) -> None:
        try:
            while not self._stop.is_set():
                batch = consumer.consume(500, 0.2)
                with self._changed:
                    for m in batch:
                        err, p, o = m.error(), m.partition(), m.offset()
                        if err is not None:
                            if err.code() != KafkaError._PARTITION_EOF:
                                log.warning("reading %s: %s", self.topic, err)
                            continue
                        self._take(m.key(), m.value())
                        if p is not None and o is not None:
                            self._read[p] = o + 1
                    for tp in consumer.position(consumer.assignment()):  # past commit markers too
                        if tp.offset >= 0:
                            self._read[tp.partition] = max(self._read.get(tp.partition, 0), tp.offset)
                    self._changed.notify_all()
        finally:
            consumer.close()

    def _take(self, key: bytes | None, value: bytes | None) -> None:
        if key is None:
            return
        job_id = key.decode()
        if value is None:  # a tombstone: the job is forgotten
            for known in (self._jobs, self._seen, self._cancels, self._before):
                known.pop(job_id, None)
            return
        try:
            status = JobStatus.of(orjson.loads(value))
            if job_id in self._jobs:
                self._before[job_id] = self._jobs[job_id]
            self._jobs[job_id] = status
            self._seen[job_id] = time.monotonic()
            if status.state in (State.CANCELLING, State.CANCELLED):
                self._cancels[job_id] = status
            elif status.state == State.QUEUED:  # submitted (again): an earlier cancel is not this run's
                self._cancels.pop(job_id, None)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("%s: the status of %r cannot be read (%s); it is skipped", self.topic, job_id, exc)

    def get(self, job_id: str) -> JobStatus | None:
        with self._changed:
            return self._jobs.get(job_id)

    def must(self, job_id: str) -> JobStatus:
        status = self.get(job_id)
        if status is None:
            raise NoSuchJob(job_id, self.topic)
        return status

    def before(self, job_id: str) -> JobStatus | None:
        """The job's status before its latest one, as the topic holds them (a cancel written from
        a stale copy finds here the final status it went over)."""
        with self._changed:
            return self._before.get(job_id)

    def cancel_of(self, job_id: str) -> JobStatus | None:
        """The cancel read for the job since it was last queued, if any, whatever was written after
        it (a running job's progress, written by a worker that had not read the cancel yet)."""
        with self._changed:
            return self._cancels.get(job_id)

    def quiet_s(self, job_id: str) -> float:
        """Seconds since this board last read a status of the job (a running job's worker writes
        one every ``jobs.progress_ms``: a long silence means it is gone)."""
        with self._changed:
            return time.monotonic() - self._seen.get(job_id, float("-inf"))

    def all(self) -> list[JobStatus]:
        with self._changed:
            return sorted(self._jobs.values(), key=lambda s: (s.submitted_at_ms, s.id))

    def wait(self, job_id: str, done: Callable[[JobStatus], bool], timeout_s: float | None) -> JobStatus | None:
        """The job's status once ``done`` holds for it (following), or its last one at the timeout."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._changed:
            while True:
                status = self._jobs.get(job_id)
                if status is not None and done(status):
                    return status
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return status
                self._changed.wait(0.5 if left is None else min(left, 0.5))

    # ---- writing --------------------------------------------------------------------------

    def write(self, status: JobStatus) -> JobStatus:
        """Write ``status`` and wait for its acknowledgement (BrokerError when there is none)."""
        self._send(status.id, orjson.dumps(status.to_dict()))
        with self._changed:
            self._jobs[status.id] = status
            self._changed.notify_all()
        return status

    def _send(self, job_id: str, value: bytes | None) -> None:
        self.send(self.topic, job_id, value, what=f"the status of job {job_id!r}")

    def send(self, topic: str, job_id: str, value: bytes | None, *, partition: int = -1, what: str = "") -> None:
        """A record keyed by a job's id, acknowledged before this returns (BrokerError when not):
        the board's one producer writes statuses and jobs (its producer id is fetched once)."""
        if self._producer is None:
            self._producer = clients.config_producer(self.cfg, **{"linger.ms": 0})
        failed: list[Any] = []
        self._producer.produce(topic, value, job_id.encode(), partition=partition,  # -1: the key's partition
                               on_delivery=lambda err, _m: failed.append(err) if err else None)
        if self._producer.flush(TIMEOUT_S) or failed:
            raise BrokerError(f"cannot write {what or f'job {job_id!r}'} to {topic}: "
                              f"{failed[0] if failed else 'no acknowledgement in %.0f s' % TIMEOUT_S}")

    def forget(self, job_id: str) -> None:
        """Remove a job from the topic (a tombstone: compaction drops its statuses) and the board."""
        self._send(job_id, None)
        with self._changed:
            self._jobs.pop(job_id, None)
            self._changed.notify_all()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
            self._thread = None
        if self._producer is not None:
            self._producer.flush(TIMEOUT_S)
            self._producer = None
