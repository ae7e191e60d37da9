"""Submitting and cancelling jobs: the status first, then the job on the jobs topic, on the partition of the least busy worker.

A submission writes the job's message (keyed by its id; the value is its ``queued`` status) and
then that status: a submission stopped in between leaves a job that a worker starts (its status
made from the message), never a status with no message behind it. A job id that is queued, running, completed or expired is not queued again:
:func:`submit` answers its status as it is, so a schedule's slot or a trigger's snapshot submitted
twice is one job. A failed or cancelled job is queued again, a retry, and resumes from its last
commit. The partition is that of the group member with the fewest jobs queued or running (a
running job is not committed until it ends), so an idle worker takes a new job at once; with no
member, the key's partition.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Mapping
from dataclasses import replace

import orjson
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import OffsetSpec

from streamer.errors import ConfigError
from streamer.jobs.board import Board, JobsSections, ensure_topics
from streamer.jobs.spec import JobSource, JobSpec, new_job_id, slot_id
from streamer.jobs.states import JobStatus, State
from streamer.kafka import clients, topics
from streamer.kafka.ranges import parse_when

log = logging.getLogger(__name__)
CANCEL_TRIES = 5


def submit(cfg: JobsSections, spec: JobSpec, board: Board, *, slot: dt.datetime | None = None,
           now: dt.datetime | None = None) -> tuple[JobStatus, bool]:
    """Queue ``spec`` (a schedule's ``slot`` of it); the job's status, and whether it was queued by
    this call (False: the job exists already and is left as it is)."""
    now = now or dt.datetime.now(dt.UTC)
    if spec.trigger is not None:
        raise ConfigError("job.trigger", "a triggered spec makes its jobs under `streamer jobs watch`, not submit")
    if spec.schedule is not None and slot is None:
        raise ConfigError("--slot", "a scheduled spec is submitted per slot: --slot latest, or the slot's time")
    assert spec.source is not None
    job_id = slot_id(spec.name or "job", slot) if slot is not None else new_job_id(spec, now)
    job = spec.with_id(job_id, _fixed(spec.source, now))
    ensure_topics(cfg)
    previous = board.get(job_id)
    if previous is not None and previous.state not in (State.FAILED, State.CANCELLED):
        return previous, False
    now_ms = int(now.timestamp() * 1000)
    status = JobStatus.queued(job_id, job, now_ms, previous=previous)
    if slot is not None and spec.schedule is not None and spec.name is not None:
        status = replace(status, schedule={"name": spec.name, "schedule": spec.schedule, "timezone": spec.timezone})
    _produce(cfg, board, status)  # the message first: a submit stopped before its status leaves a job, not a ghost
    return board.write(status), True


def requeue(cfg: JobsSections, board: Board, status: JobStatus) -> None:
    """Put a queued job (a parked one that is due) on the queue again."""
    _produce(cfg, board, status)


def cancel(board: Board, job_id: str) -> JobStatus:
    """Ask a job to stop: a queued one is cancelled at once, a running one at its next commit. A
    worker's write that crossed the request is answered: a progress write by asking again, a final
    status (the job ended just before) by writing that status back over the request."""
    for _ in range(CANCEL_TRIES):
        status = board.must(job_id)
        if status.state in (State.CANCELLING, State.CANCELLED) or status.final:
            return status
        asked = board.write(status.cancel_asked(int(time.time() * 1000)))
        board.load()  # what a worker wrote meanwhile, if anything
        now, before = board.must(job_id), board.before(job_id)
        if now == asked and before is not None and before.final and before.state != State.CANCELLED:
            return board.write(before)  # the job ended before the request: it stays as it ended
        if now.state in (State.CANCELLING, State.CANCELLED) or now.final:
            return now
    return board.must(job_id)


def _fixed(source: JobSource, now: dt.datetime) -> JobSource:
    """A topic range's relative times (``2h``) fixed at submission: the job means that range
    whenever a worker starts it, and however often it resumes."""
    if source.topic_from is None:
        return source
    now_ms = int(now.timestamp() * 1000)

    def fix(text: str | None, key: str) -> str | None:
        if text is None:
            return None
        when = parse_when(text, key, now_ms)
        if when.kind != "timestamp":
            return text
        return dt.datetime.fromtimestamp(when.timestamp_ms / 1000, dt.UTC).isoformat()

    return replace(source, topic_from=fix(source.topic_from, "job.source.topic.from"),
                   topic_to=fix(source.topic_to, "job.source.topic.to") or now.astimezone(dt.UTC).isoformat())


def _produce(cfg: JobsSections, board: Board, status: JobStatus) -> None:
    partition = least_busy(cfg)
    board.send(cfg.jobs.topic, status.id, orjson.dumps(status.to_dict()),
               partition=-1 if partition is None else partition, what=f"job {status.id!r}")


def least_busy(cfg: JobsSections, timeout_s: float = 10.0) -> int | None:
    """The partition of the group member with the fewest uncommitted jobs (its least loaded
    partition); None when the group has no member or cannot be asked."""
    admin = clients.config_admin(cfg)
    group, topic = cfg.jobs.group_id, cfg.jobs.topic
    try:
        described = admin.describe_consumer_groups([group], request_timeout=timeout_s)[group].result(timeout_s)
        members = {m.member_id: [tp.partition for tp in m.assignment.topic_partitions if tp.topic == topic]
                   for m in described.members}
        members = {k: v for k, v in members.items() if v}
        if not members:
            return None
        parts = topics.partitions(admin, topic, timeout_s)
        ends = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in parts},
                                  request_timeout=timeout_s)
        end = {tp.partition: f.result(timeout_s).offset for tp, f in ends.items()}
        done = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(
            group, [TopicPartition(topic, p) for p in parts])], request_timeout=timeout_s)[group].result(timeout_s)
        committed = {tp.partition: max(tp.offset, 0) for tp in done.topic_partitions}
    except Exception as exc:  # noqa: BLE001 (any answer short of a full one: the key's partition)
        log.info("jobs: the least busy worker is not known (%s): the job goes to its key's partition", exc)
        return None
    lag: Mapping[int, int] = {p: end.get(p, 0) - committed.get(p, 0) for p in parts}
    member = min(members.values(), key=lambda ps: (sum(lag[p] for p in ps), min(ps)))
    return min(member, key=lambda p: (lag[p], p))
