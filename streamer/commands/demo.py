"""`streamer demo`: a real broker, synthetic feature events, the processor, and a summary."""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from streamer.config import Config, dead_letter_topic
from streamer.config_file import load_config
from streamer.dev.broker import kafka_cluster
from streamer.formats.codec import Codec
from streamer.formats.configured import input_codec
from streamer.kafka.clients import plain_producer
from streamer.kafka.delivery import produce
from streamer.kafka.topics import create_topics
from streamer.observe.stats import Stats
from streamer.wiring.stream import build_processor

log = logging.getLogger(__name__)
EXAMPLE_CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "config" / "example.yaml"
PARTITIONS = 3


@dataclass(frozen=True, slots=True)
class Summary:
    events: int
    stats: Stats
    seconds: float

    def lines(self) -> list[str]:
        s = self.stats
        lat = np.asarray(s.latencies_ms) if s.latencies_ms else np.zeros(1)
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(s.flushes.items())) or "none"
        return [
            f"events          {self.events}",
            f"predictions     {s.predictions}",
            f"dead letters    {sum(s.dead_letters.values())}",
            f"batches         {s.batches} (mean size {s.rows_batched / max(s.batches, 1):.1f})",
            f"flushes         {reasons}",
            f"throughput      {s.events_per_s():,.0f} events/s (first event consumed to last ack; "
            f"{self.seconds:.1f} s in all, group join included)",
            f"latency p50/p99 {np.percentile(lat, 50):.0f} / {np.percentile(lat, 99):.0f} ms "
            "(event time to acknowledged prediction, including time queued in the topic)",
        ]


def synthetic_events(n: int, n_features: int, seed: int = 7) -> list[dict[str, object]]:
    """Feature events for the demo and benchmarks: a few entities, 32 normal features each."""
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(n, n_features)).astype(np.float32)
    now = int(time.time() * 1000)
    return [{"event_id": f"evt-{i}", "entity_id": f"acct-{i % 997}", "event_time": now,
             "features": features[i].tolist()} for i in range(n)]


def produce_events(bootstrap: str, topic: str, messages: Iterable[tuple[bytes, bytes]]) -> int:
    """Produce ``(key, value)`` pairs and wait for every ack; returns how many were acknowledged.

    Raises if any message was not acknowledged: a demo or test built on lost input proves nothing.
    """
    producer = plain_producer(bootstrap, linger_ms=20)
    errors: list[str] = []
    sent = 0

    def ack(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(str(err))

    for key, value in messages:
        produce(producer, lambda: producer.poll(0.05), topic, value, key, on_delivery=ack)
        producer.poll(0)
        sent += 1
    left = producer.flush(60)
    if left or errors:
        raise RuntimeError(f"producing events to {topic} failed: {left} unacknowledged, {errors[:3]}")
    return sent


def encoded_events(codec: Codec, payloads: list[dict[str, object]],
                   stamp_now: bool = False) -> Iterator[tuple[bytes, bytes]]:
    """``(key, value)`` pairs; with ``stamp_now`` each event's time is the moment it is encoded."""
    for p in payloads:
        if stamp_now:
            p = {**p, "event_time": int(time.time() * 1000)}
        yield str(p["entity_id"]).encode(), codec.encode(p)


def demo_config(bootstrap: str, run_id: str, max_size: int | None = None) -> Config:
    """The shipped example config, pointed at ``bootstrap`` with this run's own topics and group."""
    env = dict(os.environ, KAFKA_BOOTSTRAP=bootstrap, INPUT_TOPIC=f"demo-features-{run_id}",
               OUTPUT_TOPIC=f"demo-predictions-{run_id}", GROUP_ID=f"demo-{run_id}")
    if max_size is not None:
        env["MAX_BATCH_SIZE"] = str(max_size)
    return load_config(EXAMPLE_CONFIG, env=env)


def run_demo(events: int, brokers: int = 1) -> Summary:
    """Score ``events`` synthetic events on a broker of its own (``brokers`` 3: a three-node
    cluster, replication 3), or on ``KAFKA_BOOTSTRAP``'s cluster."""
    with kafka_cluster(brokers) as bootstrap:
        run_id = uuid.uuid4().hex[:8]
        cfg = demo_config(bootstrap, run_id)
        in_topic, out_topic = cfg.input.topics[0], cfg.output.topic
        create_topics(bootstrap, {in_topic: PARTITIONS, out_topic: PARTITIONS,
                                  dead_letter_topic(cfg): 1}, replication_factor=-1)  # the cluster's default
        processor = build_processor(cfg)
        codec = input_codec(cfg.input)
        payloads = synthetic_events(events, processor.runner.contract.feature_width)
        print(f"producing {events} feature events to {in_topic} on {bootstrap} "
              f"while the processor scores them", flush=True)
        # Produce while the processor runs, each event stamped as it is sent, as a live stream
        # would be, and only once the processor has joined its group: latency then measures
        # scoring (and any backlog the feeder builds), not the group join.
        feeder = threading.Thread(target=produce_events, daemon=True, args=(
            bootstrap, in_topic, encoded_events(codec, payloads, stamp_now=True)))

        def until(stats: Stats) -> bool:
            if feeder.ident is None and processor.status().ready:  # not started yet
                feeder.start()
            return stats.outputs >= events

        started = time.monotonic()
        processor.run(until=until)
        seconds = time.monotonic() - started
        feeder.join()
        return Summary(events, processor.stats, seconds)
