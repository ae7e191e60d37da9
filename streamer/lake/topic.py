"""A topic's range as a lake run's source: ``[from, to)`` of each partition, read with partitions assigned.

No consumer group commits: the sink is the checkpoint (sink.py), so the consumer starts at the
positions the sink says were reached. Each chunk is decoded and validated by the stream's stages
(the columnar fast paths included); a partition is done when the consumer's position, not the
last offset seen (transaction markers take offsets too), reached its end.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from streamer.config import Config
from streamer.kafka import clients
from streamer.kafka.clients import consume_batch
from streamer.kafka.messages import consumed
from streamer.lake.run import Chunk
from streamer.lake.sink import Resume
from streamer.pipeline.stages import Stages

POLL_S = 0.5


class TopicSource:
    """Reads a resumed run's range of the input topics."""

    def __init__(self, cfg: Config, stages: Stages) -> None:
        self.cfg, self.stages = cfg, stages

    def chunks(self, resume: Resume) -> Iterator[Chunk]:
        bounds = resume.bounds
        start = {tp: max(resume.reached.get(tp, s), s) for tp, (s, _) in bounds.items()}
        todo = {tp for tp, (_, e) in bounds.items() if start[tp] < e}
        if not todo:
            return
        consumer: Any = Consumer(clients.consumer_config(self.cfg, **{"enable.auto.commit": False}))
        try:
            consumer.assign([TopicPartition(t, p, start[(t, p)]) for t, p in sorted(todo)])
            n = self.cfg.input.consume_max_messages
            while todo:
                messages = consume_batch(consumer, n, POLL_S)
                chunk = consumed(messages).within(todo, lambda tp, offsets: offsets >= bounds[tp][1])
                rows, rejects = self.stages.decode(chunk)
                reached = {}
                for tp in consumer.position([TopicPartition(t, p) for t, p in sorted(todo)]):
                    key = (tp.topic, tp.partition)
                    if tp.offset >= 0:
                        reached[key] = min(tp.offset, bounds[key][1])
                done = {tp for tp, at in reached.items() if at >= bounds[tp][1]}
                if done:
                    consumer.incremental_unassign([TopicPartition(t, p) for t, p in sorted(done)])
                    todo -= done
                if len(chunk) or done:
                    yield Chunk(rows, rejects, reached)
        finally:
            consumer.close()
