"""A topic's range as a lake run's source: ``[from, to)`` of each partition, read with partitions assigned.

No consumer group commits: the sink is the checkpoint (sink.py), so the consumer starts at the
positions the sink says were reached. Each chunk is decoded and validated by the stream's stages
(the columnar fast paths included); a partition is done when the consumer's position, not the
last offset seen (transaction markers take offsets too), reached its end.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from streamer.config import Config
from streamer.kafka import clients
from streamer.kafka.clients import consume_batch
from streamer.kafka.messages import consumed
from streamer.kafka.ranges import Ranges, When, resolve
from streamer.kafka.topics import partitions
from streamer.lake.run import Chunk
from streamer.lake.sink import Resume, Shard
from streamer.pipeline.records import Messages, Partition
from streamer.pipeline.stages import Reject, Stages

log = logging.getLogger(__name__)
POLL_S = 0.5
IDLE_S = 10.0  # no message for this long with partitions left: ask the broker where they stand
# The messages of a chunk a run scores, and the rejects of those it cannot tell (an evaluation
# of one model of a route: the events the route sends that model, pipeline/route.py)
Only = Callable[[Messages], tuple[Messages, list[Reject]]]


class TopicSource:
    """Reads a resumed run's range of the input topics (``only``: the messages of each chunk it
    keeps; the others are passed over, their offsets reached all the same)."""

    def __init__(self, cfg: Config, stages: Stages, only: Only | None = None) -> None:
        self.cfg, self.stages, self.only = cfg, stages, only

    def chunks(self, resume: Resume) -> Iterator[Chunk]:
        bounds = resume.bounds
        start = {tp: max(resume.reached.get(tp, s), s) for tp, (s, _) in bounds.items()}
        todo = {tp for tp, (_, e) in bounds.items() if start[tp] < e}
        if not todo:
            return
        consumer: Any = Consumer(clients.consumer_config(self.cfg, **{"enable.auto.commit": False}))
        try:
            gone = self._deleted(consumer, todo, start, bounds)
            if gone:
                done = {tp for tp in todo if start[tp] >= bounds[tp][1]}
                todo -= done
                yield Chunk(self.stages.empty, [], {tp: start[tp] for tp in bounds}, gone)
            if not todo:
                return
            consumer.assign([TopicPartition(t, p, start[(t, p)]) for t, p in sorted(todo)])
            n = self.cfg.input.consume_max_messages
            last = time.monotonic()
            where = dict(start)
            while todo:
                messages = consume_batch(consumer, n, POLL_S)
                if messages:
                    last = time.monotonic()
                elif time.monotonic() - last > IDLE_S:
                    done = self._idle(consumer, todo, where, bounds)
                    last = time.monotonic()
                    if done:
                        consumer.incremental_unassign([TopicPartition(t, p) for t, p in sorted(done)])
                        todo -= done
                        yield Chunk(self.stages.empty, [], {tp: bounds[tp][1] for tp in done})
                    continue
                chunk = consumed(messages).within(todo, lambda tp, offsets: offsets >= bounds[tp][1])
                kept, passed = (chunk, []) if self.only is None else self.only(chunk)
                rows, rejects = self.stages.decode(kept)
                rejects = passed + rejects
                reached = {}
                for tp in consumer.position([TopicPartition(t, p) for t, p in sorted(todo)]):
                    key = (tp.topic, tp.partition)
                    if tp.offset >= 0:
                        reached[key] = where[key] = min(tp.offset, bounds[key][1])
                done = {tp for tp, at in reached.items() if at >= bounds[tp][1]}
                if done:
                    consumer.incremental_unassign([TopicPartition(t, p) for t, p in sorted(done)])
                    todo -= done
                if len(chunk) or done:
                    yield Chunk(rows, rejects, reached)
        finally:
            consumer.close()

    @staticmethod
    def _deleted(consumer: Any, todo: set[Partition], start: dict[Partition, int],
                 bounds: Ranges) -> int:
        """Offsets of the range the broker deleted (retention) before the run read them: counted,
        logged, and ``start`` moved past them."""
        gone = 0
        for t, p in sorted(todo):
            low, _ = consumer.get_watermark_offsets(TopicPartition(t, p), timeout=10)
            if low > start[(t, p)]:
                lost = min(low, bounds[(t, p)][1]) - start[(t, p)]
                log.warning("%s[%d]: offsets %d..%d of the range were deleted by the broker (retention) before "
                            "this run read them: %d events not scored", t, p, start[(t, p)], low - 1, lost)
                gone += lost
                start[(t, p)] = min(low, bounds[(t, p)][1])
        return gone

    @staticmethod
    def _idle(consumer: Any, todo: set[Partition], where: dict[Partition, int],
              bounds: Ranges) -> set[Partition]:
        """Partitions left whose range has nothing more to read (their end is past what the broker
        holds: records deleted by retention, or aborted ones at the end); the others are asked for
        again from where they stand."""
        done = set()
        for t, p in sorted(todo):
            _, high = consumer.get_watermark_offsets(TopicPartition(t, p), timeout=10, cached=False)
            if where[(t, p)] >= min(high, bounds[(t, p)][1]):
                log.warning("%s[%d]: nothing more to read at %d (broker's end %d, range's end %d)", t, p,
                            where[(t, p)], high, bounds[(t, p)][1])
                done.add((t, p))
            else:
                log.warning("%s[%d]: no records for %.0f s at %d of [%d, %d); reading it again from there",
                            t, p, IDLE_S, where[(t, p)], *bounds[(t, p)])
                try:
                    consumer.seek(TopicPartition(t, p, where[(t, p)]))
                except KafkaException as exc:  # not fetching yet: it is asked for anyway
                    log.warning("%s[%d]: %s", t, p, exc)
        return done


def replay_plan(cfg: Config, start: When, end: When, shard: Shard) -> Ranges:
    """The range's ``[start, end)`` offsets of this shard's partitions, as of now."""
    consumer = Consumer(clients.consumer_config(cfg))
    try:
        tps = [TopicPartition(t, p) for t in cfg.input.topics for p in partitions(consumer, t, 30)
               if shard.takes(p)]
        return resolve(consumer, tps, start, end) if tps else {}
    finally:
        consumer.close()
