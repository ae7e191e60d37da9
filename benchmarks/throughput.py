"""Throughput of the processor against its limits, on one broker, in one run.

    python benchmarks/throughput.py [--events N] [--naive-events M] [--batch B]

(a) Kafka pass-through: consume and re-produce the same bytes, same client settings, no decoding.
(b) The model alone on pre-built float32 arrays at the configured batch size.
(c) The processor (decode, batch, infer, encode, produce, commit after acks).
(d) A naive loop: one message at a time: poll, decode, predict, produce, wait for the ack, commit.
Prints each figure in events/s and the ratios c/a, c/b, c/d. A benchmark, not a test: the figures
are only comparable within one run on one machine.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
from confluent_kafka import Consumer, Producer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from streamer import clients  # noqa: E402
from streamer.app import build_processor, input_codec, model_runner, output_codec  # noqa: E402
from streamer.broker import create_topics, kafka_cluster  # noqa: E402
from streamer.config import Config  # noqa: E402
from streamer.demo import demo_config, produce_events, synthetic_events  # noqa: E402
from streamer.events import EventValidator  # noqa: E402


def fresh(base: Config, tag: str) -> Config:
    """The base config with its own group and output topic, so the runs share only the input."""
    run = uuid.uuid4().hex[:6]
    return replace(base, input=replace(base.input, group_id=f"bench-{tag}-{run}"),
                   output=replace(base.output, topic=f"bench-{tag}-out-{run}"))


def timed(fn: Callable[[], int]) -> float:
    start = time.perf_counter()
    n = fn()
    return n / (time.perf_counter() - start)


def pass_through(cfg: Config, n: int) -> int:
    consumer = Consumer(clients.consumer_config(cfg))
    producer = Producer(clients.producer_config(cfg))
    consumer.subscribe(list(cfg.input.topics))
    done = 0
    acked = [0]

    def ack(err: object, _m: object) -> None:
        acked[0] += 1

    while done < n:
        for m in consumer.consume(cfg.input.consume_max_messages, 0.1):
            if m.error():
                continue
            while True:
                try:
                    producer.produce(cfg.output.topic, m.value(), m.key(), on_delivery=ack)
                    break
                except BufferError:
                    producer.poll(0.05)
            done += 1
        producer.poll(0)
    producer.flush(60)
    consumer.commit(asynchronous=False)
    consumer.close()
    assert acked[0] >= n
    return n


def model_only(cfg: Config, n: int) -> Callable[[], int]:
    runner = model_runner(cfg)
    runner.warm_up(cfg.batching.max_size)
    arrays = np.random.default_rng(3).normal(size=(n, runner.n_features)).astype(np.float32)
    size = cfg.batching.max_size

    def run() -> int:
        for i in range(0, n, size):
            runner.run(arrays[i:i + size])
        return n
    return run


def processor_run(cfg: Config, n: int) -> int:
    processor = build_processor(cfg)
    processor.runner.warm_up(cfg.batching.max_size)
    processor.run(until=lambda s: s.outputs >= n)
    return n


def naive(cfg: Config, n: int) -> int:
    """The loop people write first: every message waits for its own ack and commit."""
    runner = model_runner(cfg)
    decoder, encoder = input_codec(cfg), output_codec(cfg)
    validator = EventValidator(cfg.input, runner.n_features)
    consumer = Consumer(clients.consumer_config(cfg))
    producer = Producer(clients.producer_config(cfg))
    consumer.subscribe(list(cfg.input.topics))
    done = 0
    while done < n:
        m = consumer.poll(0.1)
        if m is None or m.error():
            continue
        rec = validator.to_record(decoder.decode(m.value()), m.topic(), m.partition(), m.offset(),
                                  m.key(), m.timestamp()[1])
        score = runner.run(rec.features[None, :])[0]
        producer.produce(cfg.output.topic, encoder.encode({
            "event_id": rec.event_id, "entity_id": rec.entity_id, "scores": score.tolist(),
            "model_name": cfg.model.name, "model_version": cfg.model.version,
            "source_topic": rec.topic, "source_partition": rec.partition,
            "source_offset": rec.offset, "event_time": rec.event_time_ms,
            "scored_at": int(time.time() * 1000)}), m.key())
        producer.flush(30)
        consumer.commit(offsets=[TopicPartition(m.topic(), m.partition(), m.offset() + 1)],
                        asynchronous=False)
        done += 1
    consumer.close()
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--naive-events", type=int, default=2_000,
                    help="the naive loop is slow: it scores this many (its rate is what counts)")
    ap.add_argument("--batch", type=int, default=512)
    args = ap.parse_args()
    with kafka_cluster() as bootstrap:
        base = demo_config(bootstrap, uuid.uuid4().hex[:6], args.batch)
        create_topics(bootstrap, {base.input.topics[0]: 3})
        codec = input_codec(base)
        events = synthetic_events(args.events, 32)
        produce_events(bootstrap, base.input.topics[0], [codec.encode(e) for e in events],
                       [str(e["entity_id"]).encode() for e in events])
        figures = {}
        for tag, fn in (("a", lambda c: pass_through(c, args.events)),
                        ("c", lambda c: processor_run(c, args.events)),
                        ("d", lambda c: naive(c, args.naive_events))):
            cfg = fresh(base, tag)
            create_topics(bootstrap, {cfg.output.topic: 3, f"{cfg.input.topics[0]}.dlq": 1})
            figures[tag] = timed(lambda: fn(cfg))
        figures["b"] = timed(model_only(base, args.events))
    names = {"a": "kafka pass-through", "b": "model alone", "c": "processor", "d": "naive loop"}
    print(f"events {args.events} (naive {args.naive_events}), batch {args.batch}, "
          f"provider {model_runner(base).provider}")
    for k in "abcd":
        print(f"({k}) {names[k]:<20} {figures[k]:>12,.0f} events/s")
    print(f"c/a {figures['c'] / figures['a']:.3f}   c/b {figures['c'] / figures['b']:.3f}   "
          f"c/d {figures['c'] / figures['d']:.1f}")


if __name__ == "__main__":
    main()
