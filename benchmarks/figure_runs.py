"""The runs of figures (a) to (g), each a call that returns events/s over its measured window.

(a) and the processor figures mark their window on ``harness.WINDOW`` (from the first event to the
last output acknowledged by the broker); the others are timed whole. The processor figures, (i),
(j), (n) and (o) included, are :func:`processor_run` on their own config.
"""

from __future__ import annotations

import io
import time
from typing import Any

import harness
import numpy as np
from confluent_kafka import Consumer, Producer, TopicPartition
from stages import STAGES, StageCpu, staged

from streamer.commands.replay import run_replay
from streamer.config import Config
from streamer.formats.configured import input_codec, output_codec
from streamer.kafka import clients
from streamer.kafka.delivery import produce
from streamer.kafka.ranges import When
from streamer.model.contract import SCORES
from streamer.model.runner import model_runner
from streamer.observe.stats import Stats
from streamer.pipeline.records import ModelId, Partition, Stamp, prediction_fields
from streamer.pipeline.validate import EventValidator
from streamer.testing import PoisonRunner, score_matrix
from streamer.wiring.stream import build_processor

POISON = 9999.0
COMMIT_TAILS: dict[str, list[float]] = {}  # per figure: ms from the last ack to the outputs committed


def pass_through(cfg: Config, n: int) -> float:
    """(a): consume and re-produce the same bytes, commit after the acks; events/s from the first message."""
    consumer = Consumer(clients.consumer_config(cfg))
    producer = Producer(clients.producer_config(cfg, **harness.WAKEUPS.settings()))
    consumer.subscribe(list(cfg.input.topics))
    done, acked, started = 0, [0], None
    positions: dict[Partition, int] = {}

    def ack(err: object, _m: object) -> None:
        acked[0] += err is None

    while done < n:
        for m in consumer.consume(cfg.input.consume_max_messages, 0.1):
            if m.error():
                continue
            if started is None:
                started = time.perf_counter()
                harness.WINDOW.start()
            produce(producer, lambda: producer.poll(0.05), cfg.output.topic, m.value(), m.key(),
                    on_delivery=ack)
            positions[(m.topic(), m.partition())] = m.offset() + 1
            done += 1
        producer.poll(0)
    producer.flush(60)
    consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in positions.items()],
                    asynchronous=False)
    elapsed = time.perf_counter() - (started or 0)
    harness.WINDOW.stop()
    consumer.close()
    assert acked[0] >= n, f"pass-through: only {acked[0]} of {n} acknowledged"
    return n / elapsed


def model_only(cfg: Config, n: int) -> float:
    """(b): the runner alone on pre-built arrays at the configured batch size."""
    runner = model_runner(cfg)
    runner.warm_up(cfg.batching.max_size)
    arrays = np.random.default_rng(3).normal(size=(n, runner.contract.feature_width)).astype(np.float32)
    size = cfg.batching.max_size
    started = time.perf_counter()
    for i in range(0, n, size):
        score_matrix(runner, arrays[i:i + size])
    return n / (time.perf_counter() - started)


def replay_run(cfg: Config, exactly_once: bool = True) -> float:
    """(g): `streamer replay` of the whole input to ``<output topic>.backfill``, in transactions
    (its default); (p) with ``--at-least-once``. Events/s from the first event read to the last
    output acknowledged."""
    return run_replay(cfg, When("earliest"), run_id=cfg.input.group_id, output_topic=f"{cfg.output.topic}.backfill",
                      progress=io.StringIO(), exactly_once=exactly_once).stats.events_per_s()


class AckClock:
    """When the broker has acknowledged ``n`` outputs: the end of a processor figure's window.

    Under exactly-once an output counts (Stats) only once its transaction commits, which a finite
    input reaches after a quiet spell (``MIN_QUIET_MS``, 100 ms, with nothing read) and the
    commit's round trips: a tail that a continuous stream never waits for, and that the other
    figures' windows leave out (their last offsets commit after their window too). So every
    processor figure is timed to its last acknowledged output, and (f)'s tail to committed is
    printed apart. An observer of the loop (streamer.house.Observer)."""

    def __init__(self, n: int) -> None:
        self.n, self.outputs, self.at = n, 0, None

    def decoded(self, rows: Any) -> None:
        pass

    def scored(self, batch: Any, seconds: float, out: Any, predicted: Any) -> None:
        pass

    def acked(self, acked: Any) -> None:
        self.outputs += sum(len(rows) for rows in acked.batches) + len(acked.outputs)
        if self.at is None and self.outputs >= self.n:
            self.at = time.monotonic()
            harness.WINDOW.stop()


def processor_run(cfg: Config, n: int, poisoned: int = 0, tag: str | None = None) -> float:
    """(c), (e), (f) and the processor on any config: events/s from the first event to the last
    output acknowledged (AckClock); with ``tag``, the run's stages timed too (StageCpu), kept in
    STAGES under it."""
    runner: Any = PoisonRunner(model_runner(cfg), POISON) if poisoned else None
    kafka = harness.probed(cfg)
    clock = AckClock(n)
    stages = StageCpu()
    if tag is not None:
        runner, kafka = staged(cfg, stages)
    processor = build_processor(cfg, runner=runner, clients=kafka,
                                observers=(clock,) if tag is None else (clock, stages))

    def until(s: Stats) -> bool:
        if s.events:
            harness.WINDOW.start()
        return s.outputs >= n

    processor.run(until=until)
    stats = processor.stats
    assert stats.predictions == n - poisoned
    assert stats.dead_letters["infer"] == poisoned
    assert clock.at is not None and stats.first_event_at is not None and stats.last_ack_at is not None
    COMMIT_TAILS.setdefault(cfg.processing.guarantee, []).append((stats.last_ack_at - clock.at) * 1000)
    if tag is not None:
        STAGES.setdefault(tag, []).append(stages.per_event(n))
    return n / (clock.at - stats.first_event_at)


def poisoned_copy(events: list[dict[str, object]], every: int) -> list[dict[str, object]]:
    """(e)'s input: the same events with every ``every``-th one made to fail in the model."""
    out = [dict(e) for e in events]
    for e in out[::every]:
        e["features"] = [POISON, *list(e["features"])[1:]]  # type: ignore[call-overload]
    return out


def naive(cfg: Config, n: int) -> float:
    """(d): the loop people write first: every message waits for its own ack and commit."""
    runner = model_runner(cfg)
    decoder, encoder = input_codec(cfg.input), output_codec(cfg)
    validator = EventValidator(cfg.input, runner.contract)
    consumer = Consumer(clients.consumer_config(cfg))
    producer = Producer(clients.producer_config(cfg))
    consumer.subscribe(list(cfg.input.topics))
    done, started = 0, None
    while done < n:
        m = consumer.poll(0.1)
        if m is None or m.error():
            continue
        started = started or time.perf_counter()
        rec = validator.to_record(decoder.decode(m.value()), m.topic(), m.partition(), m.offset(),
                                  m.key(), m.timestamp()[1])
        score = score_matrix(runner, rec.features[None, :])[0]
        fields = prediction_fields(rec, {SCORES: score.tolist()}, Stamp(ModelId(cfg.model.name, cfg.model.version), int(time.time() * 1000)))
        producer.produce(cfg.output.topic, encoder.encode(fields), m.key())
        if producer.flush(30):
            raise RuntimeError("naive loop: a prediction was not acknowledged")
        consumer.commit(offsets=[TopicPartition(m.topic(), m.partition(), m.offset() + 1)],
                        asynchronous=False)
        done += 1
    elapsed = time.perf_counter() - (started or 0)
    consumer.close()
    return n / elapsed
