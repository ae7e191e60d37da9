"""`streamer replay`: score a bounded range of a topic under a run id, apart from live traffic.

A run reads ``[from, to)`` of every input partition with a consumer group of its own
(``<group_id>.replay.<run_id>``, never the live group) and writes to a backfill topic, its dead
letters to ``<backfill topic>.dlq``. Its bounds are saved in the metadata of its first commit, and
every later commit carries them, so that a crashed run resumes exactly where it stopped, with the
same bounds, even when ``--from 2h`` would now mean another time. A finished run refuses to run
again unless forced.

Exactly once by default: predictions, dead letters and the run's offsets go in Kafka transactions
(kafka/checkpoint.py ``Transactional``) under the transactional.id ``<group_id>.replay.<run_id>``,
so a resumed run fences a zombie of the run it resumes and continues from its last committed
transaction; a read_committed reader sees each prediction of the run once. ``exactly_once=False``
(``--at-least-once``) commits through the consumer instead: a resumed run then writes again what
the stopped run wrote after its last commit, and its summary gives the bound (:attr:`ReplaySummary.again_at_most`).

A stop (``stop`` set: SIGTERM or Ctrl+C) ends reading; the open batch is scored and written, the
acknowledged progress committed, and the summary says ``stopped`` with the offsets left.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

from confluent_kafka import Consumer, Producer, TopicPartition

from streamer.config import Config
from streamer.errors import ConfigError, ReplayFinishedError
from streamer.house import Scope, new_run_id
from streamer.kafka import clients
from streamer.kafka.checkpoint import Transactional
from streamer.kafka.ranges import Ranges, When, resolve
from streamer.kafka.topics import partitions
from streamer.observe.bar import ProgressBar
from streamer.observe.stats import Stats
from streamer.wiring.stream import build_processor

log = logging.getLogger(__name__)
# Rows per model call of a replay unless --batch-size: nobody waits on a backfill's latency, so
# it batches for throughput (a larger batching.max_size in the config is kept).
REPLAY_BATCH_SIZE = 4096


@dataclass(frozen=True, slots=True)
class ReplaySummary:
    """What a run did. ``events`` counts the offsets in its range, and for a finished run they add
    up: ``events == predictions + dead letters + without_event - again``. Worked example: an input
    written in transactions, one event each, has 40 offsets for 20 events (each commit marker takes
    an offset): ``events in range 40 = predictions 20 + dead letters 0 + offsets without an event
    20``. The processor's own log counts every message it read, those past the range's end in the
    same fetch included (``outside``), so its event count is not the range's. A stopped run
    (``left`` > 0) counts what it committed and the offsets left for the run that resumes it."""

    run_id: str
    output_topic: str
    events: int  # offsets in [from, to) of every partition, as planned (or left, when resumed)
    resumed: bool
    stats: Stats
    seconds: float
    exactly_once: bool = True
    left: int = 0  # offsets of the range not committed when a stop ended the run (0: finished)

    @property
    def dead_letter_topic(self) -> str:
        return f"{self.output_topic}.dlq"

    @property
    def stopped(self) -> bool:
        return self.left > 0

    @property
    def handled(self) -> int:
        """Events of the range predicted or dead-lettered, acknowledged (exactly once: committed)."""
        return self.stats.predictions + sum(self.stats.dead_letters.values())

    @property
    def without_event(self) -> int:
        """Offsets of the range that hold no event: transaction markers and aborted transactions'
        records, which a read_committed consumer never sees. A run returns only once its consumer
        passed every partition's end, so every offset not handled is one of these."""
        return max(self.events - self.left - self.handled, 0)

    @property
    def again(self) -> int:
        """Events handled twice (written again after a failed delivery or a replaced producer)."""
        return max(self.handled - (self.events - self.left), 0)

    @property
    def again_at_most(self) -> int:
        """At least once: how many of this run's predictions and dead letters may be copies of ones
        already written. Those it handled twice itself (:attr:`again`); and when it resumes a
        stopped run, every event it handled: the stopped run committed its progress, but may have
        written any event after its last commit before it stopped. Exactly once: 0."""
        if self.exactly_once:
            return 0
        return self.handled if self.resumed else self.again

    @property
    def outside(self) -> int:
        """Messages read and left alone: past the range's end in the same fetch, or read again
        after a hold (a Schema Registry away)."""
        return max(self.stats.events - (self.handled - self.again), 0)

    def lines(self) -> list[str]:
        s = self.stats
        done = f"{'resumed and ' if self.resumed else ''}{'stopped' if self.stopped else 'finished'}"
        if self.stopped:
            counts = (f"events in range {self.events}: predictions {s.predictions} + dead letters "
                      f"{sum(s.dead_letters.values())} committed, {self.left} offsets left")
        else:
            counts = (f"events in range {self.events} = predictions {s.predictions} + dead letters "
                      f"{sum(s.dead_letters.values())} + offsets without an event {self.without_event} "
                      f"(transaction markers, aborted records)")
            if self.again:
                counts += f" - handled twice {self.again}"
        why = ("resumed: the stopped run may have written any event after its last commit" if self.resumed
               else "handled twice by this run")
        guarantee = ("exactly once: in Kafka transactions (read the topics with isolation.level=read_committed)"
                     if self.exactly_once else
                     f"at least once: up to {self.again_at_most} of them may have been written already ({why})")
        lines = [f"replay {self.run_id} {done}",
                 f"{counts}, to {self.output_topic}",
                 f"dead letters to {self.dead_letter_topic} (streamer dlq inspect --topic {self.dead_letter_topic})",
                 guarantee,
                 f"read and left alone {self.outside} (past the range's end, or read again after a hold or an abort)",
                 f"throughput {self.handled / max(self.seconds, 1e-9):,.0f} events/s scored and written "
                 f"(predictions and dead letters over the run's time), {self.seconds:.1f} s in all"]
        return [*lines, f"resume with --run-id {self.run_id}"] if self.stopped else lines

    @property
    def all_dead_lettered(self) -> bool:
        """Every event in range became a dead letter: the model or the schemas do not fit the data."""
        return self.events > 0 and self.stats.predictions == 0 and self.stats.outputs > 0


def run_replay(cfg: Config, start: When, end: When | None = None, *, run_id: str | None = None,
               output_topic: str | None = None, model_path: Path | None = None,
               model_version: str | None = None, force: bool = False,
               batch_size: int | None = None, max_wait_ms: int | None = None,
               allow_live_output: bool = False, progress: TextIO | None = None,
               exactly_once: bool = True, stop: threading.Event | None = None,
               on_rows: Callable[[int, int], None] | None = None) -> ReplaySummary:
    """Plan (or resume) the run, score its range, and return when every partition is done, or
    when ``stop`` is set (the open batch scored and written, the progress committed).

    ``batch_size`` (None: :data:`REPLAY_BATCH_SIZE`, or ``batching.max_size`` when larger) and
    ``max_wait_ms`` (None: as configured) override ``batching`` of ``cfg``; each consume takes up to
    a batch of messages. ``exactly_once``: write in Kafka transactions (else at least once).
    The run's config is built, and so validated, before anything talks to the broker: a bad
    override raises :class:`ConfigError` naming ``batching.max_size`` at once.
    """
    run_id = new_run_id(run_id)
    output_topic = output_topic or f"{cfg.output.topic}.backfill"
    if output_topic == cfg.output.topic and not allow_live_output:
        raise ConfigError("--output-topic", f"{output_topic!r} is the live output topic; a replay "
                                            "writes to a backfill topic (or pass --allow-live-output)")
    group = f"{cfg.input.group_id}.replay.{run_id}"
    batch = max(cfg.batching.max_size, REPLAY_BATCH_SIZE) if batch_size is None else batch_size
    rcfg = replace(
        cfg, input=replace(cfg.input, group_id=group,
                           consume_max_messages=max(cfg.input.consume_max_messages, batch)),
        output=replace(cfg.output, topic=output_topic),
        model=replace(cfg.model, path=model_path or cfg.model.path,  # one model for the whole run
                      version=model_version or cfg.model.version, reload_check_ms=0),
        batching=replace(cfg.batching,
                         max_size=batch,
                         max_wait_ms=cfg.batching.max_wait_ms if max_wait_ms is None else max_wait_ms),
        # its own dead-letter topic, created like its output topic (whatever create_dead_letter_topic
        # says of the live one): a replay's topics are its own. Its own transactional.id, the run's
        # group: the stream's would fence the live processor, and a host name in it would let a
        # resumed run on another host (a Job's new pod) miss the zombie of the one it resumes.
        processing=replace(cfg.processing, dead_letter_topic=f"{output_topic}.dlq", create_dead_letter_topic=True,
                           guarantee="exactly_once" if exactly_once else "at_least_once", transactional_id=group),
        metrics=replace(cfg.metrics, port=0))  # an ephemeral port: the live processor holds metrics.port
    bounds, resumed = _plan(rcfg, run_id, start, end or When("latest"), force)
    clients.ensure_topic(rcfg, output_topic, like=cfg.input.topics[0])
    total = sum(e - s for s, e in bounds.values())
    log.info("replay %s: %d events in range, %s", run_id, total,
             ", ".join(f"{t}[{p}] {s}..{e}" for (t, p), (s, e) in sorted(bounds.items())))
    meta = {tp: json.dumps({"run": run_id, "end": e}) for tp, (_, e) in bounds.items()}
    processor = build_processor(rcfg, scope=Scope(bounds, run_id, meta.__getitem__),
                                model_version=model_version)  # the label asked for, verbatim
    bar = ProgressBar(total, progress or sys.stderr)
    asked = stop or threading.Event()

    def until(stats: Stats) -> bool:  # the bounds' end is the processor's own test
        bar.update(stats.outputs)
        if on_rows is not None:  # (offsets read, offsets in range): a job's status
            on_rows(stats.outputs, total)
        return asked.is_set()

    started = time.monotonic()
    processor.run(until=until)
    bar.close(processor.stats.outputs)
    seconds = time.monotonic() - started
    left = _left(rcfg, bounds) if asked.is_set() else 0  # a stop after the last row is a finish
    return ReplaySummary(run_id, output_topic, total, resumed, processor.stats, seconds, exactly_once, left)


def _fence(cfg: Config) -> None:
    """Take the run's transactional.id: a zombie of a crashed run is fenced and its open
    transaction aborted, so the offsets it sent with that transaction are settled (a read of the
    committed offsets waits on them while it is open)."""
    producer = Producer(clients.producer_config(cfg, **Transactional.producer_settings(cfg)))
    try:
        clients.retrying(lambda: producer.init_transactions(30), "taking the run's transactional.id")
    finally:
        producer.close()


def _committed(consumer: Consumer, cfg: Config) -> list[TopicPartition]:
    """The run group's committed offsets, with their metadata, of every input partition."""
    tps = []
    for topic in cfg.input.topics:
        tps += [TopicPartition(topic, p) for p in partitions(consumer, topic, 30)]
    result: list[TopicPartition] = clients.retrying(lambda: consumer.committed(tps, timeout=30),
                                                    "reading the run's offsets")
    return result


def _left(cfg: Config, bounds: Ranges) -> int:
    """Offsets of the range that no commit covers yet."""
    consumer = Consumer(clients.consumer_config(cfg))
    try:
        at = {(tp.topic, tp.partition): tp.offset for tp in _committed(consumer, cfg)}
    finally:
        consumer.close()
    return sum(e - min(max(at.get(tp, s), s), e) for tp, (s, e) in bounds.items())


def _plan(cfg: Config, run_id: str, start: When, end: When, force: bool) -> tuple[Ranges, bool]:
    """The run's bounds: from its saved commit metadata when resuming, else resolved now and saved."""
    if cfg.processing.guarantee == "exactly_once":
        _fence(cfg)  # first: an open transaction of a crashed run would hold back the offsets read here
    consumer = Consumer(clients.consumer_config(cfg))
    try:
        committed = _committed(consumer, cfg)
        saved: Ranges = {}
        for tp in committed:
            info = _metadata(tp.metadata)
            if tp.offset >= 0 and info.get("run") == run_id:
                saved[(tp.topic, tp.partition)] = (tp.offset, int(info["end"]))
        if len(saved) == len(committed) and not force:
            if all(s >= e for s, e in saved.values()):
                raise ReplayFinishedError(f"replay run {run_id!r} already finished; "
                                          "pass --force to run it again")
            return saved, True
        bounds = resolve(consumer, [TopicPartition(tp.topic, tp.partition) for tp in committed], start, end)
        plan = [TopicPartition(t, p, s, metadata=json.dumps({"run": run_id, "end": e}))
                for (t, p), (s, e) in bounds.items()]
        clients.retrying(lambda: consumer.commit(offsets=plan, asynchronous=False), "saving the run's bounds")
        return bounds, False
    finally:
        consumer.close()


def _metadata(text: str | None) -> dict[str, Any]:
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
