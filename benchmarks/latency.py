"""The latency runs: p50/p99 from event time to read, scored and acknowledged, under a paced producer.

The pacer runs in a process of its own (``throughput.py --pace``), on the broker's core under
``--pin``. It produces with librdkafka's default linger.ms (5 ms) and its connection made first;
with the 0 ms it had, the broker took a request per event, and the events of its first 0.7 s
waited.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from confluent_kafka import Consumer, Producer
from harness import PINNED, ROOT, fresh

from streamer.commands.demo import synthetic_events
from streamer.config import Config
from streamer.formats.avro import AvroCodec, load_schema
from streamer.formats.varint import avro_string, zigzag
from streamer.kafka import clients
from streamer.kafka.delivery import produce
from streamer.kafka.topics import create_topics
from streamer.wiring.stream import build_processor

ENTRY = Path(__file__).resolve().with_name("throughput.py")  # its hidden --pace runs pace() below
Percentiles = dict[str, tuple[float, float]]  # stage -> (p50, p99) in ms


class StageTimes:
    """Event time to each stage, per event (ms): read (decoded from the consumed chunk) and scored
    (its prediction encoded); the end, acknowledged, is the processor's own latency figure. An
    observer of the loop (streamer.house.Observer)."""

    def __init__(self) -> None:
        self.read: list[float] = []
        self.scored_ms: list[float] = []

    def decoded(self, rows: Any) -> None:
        self.read.extend((time.time() * 1000 - rows.event_times).tolist())

    def scored(self, batch: Any, seconds: float, out: Any, predicted: Any) -> None:
        self.scored_ms.extend((time.time() * 1000 - predicted.event_times).tolist())

    def acked(self, acked: Any) -> None:
        pass


def paced(cfg: Config, rate: float, seconds: float) -> int:
    """Run the paced producer into the input topic; how many events it sent. It runs in a process
    of its own: in this one it would share the GIL with the client it measures."""
    pacer = subprocess.run([sys.executable, str(ENTRY), "--pace", cfg.kafka["bootstrap.servers"],  # type: ignore[list-item]
                            cfg.input.topics[0], str(rate), str(seconds)], capture_output=True, text=True,
                           check=True, preexec_fn=PINNED.beside_broker)
    return int(pacer.stdout.split()[-1])


def percentiles(**stages: list[float]) -> Percentiles:
    return {name: (float(np.percentile(v, 50)), float(np.percentile(v, 99))) for name, v in stages.items()}


def latency_run(cfg: Config, rate: float, seconds: float = 5.0) -> Percentiles:
    """p50 and p99 (ms) from event time to each stage (read, scored, acknowledged), at a paced
    ``rate`` events/s: the transport's share (to read) apart from the processor's."""
    stages = StageTimes()
    processor = build_processor(cfg, observers=(stages,))
    stop = threading.Event()
    thread = threading.Thread(target=processor.run, kwargs={"until": lambda s: stop.is_set()}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not processor.status().ready:
        assert time.monotonic() < deadline, "the processor did not join the group"
        time.sleep(0.05)
    started = time.monotonic()
    sent = paced(cfg, rate, seconds)
    while processor.stats.outputs < sent and time.monotonic() - started < seconds + 60:
        time.sleep(0.05)
    stop.set()
    thread.join(60)
    return percentiles(read=stages.read, scored=stages.scored_ms, acknowledged=processor.stats.latencies_ms)


def pass_through_latency(cfg: Config, rate: float, seconds: float = 5.0) -> Percentiles:
    """The same paced run through (a)'s pass-through: p50 and p99 (ms) from the event's timestamp
    (set by the pacer's produce call) to read, and to its copy acknowledged. What Kafka and this
    machine take without the processor: the floor under the processor's figures."""
    consumer = Consumer(clients.consumer_config(cfg))
    producer = Producer(clients.producer_config(cfg))
    consumer.subscribe(list(cfg.input.topics))
    read: list[float] = []
    acked: list[float] = []

    def ack(err: object, m: Any) -> None:
        if err is None:
            acked.append(time.time() * 1000 - m.timestamp()[1])

    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            for m in consumer.consume(cfg.input.consume_max_messages, 0.005):
                if m.error():
                    continue
                read.append(time.time() * 1000 - m.timestamp()[1])
                produce(producer, lambda: producer.poll(0.05), cfg.output.topic, m.value(), m.key(),
                        timestamp=m.timestamp()[1], on_delivery=ack)
            producer.poll(0)
        producer.flush(30)

    deadline = time.monotonic() + 60
    while not consumer.assignment():
        assert time.monotonic() < deadline, "the pass-through did not join the group"
        consumer.poll(0.05)
    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    started = time.monotonic()
    sent = paced(cfg, rate, seconds)
    while len(acked) < sent and time.monotonic() - started < seconds + 60:
        time.sleep(0.05)
    stop.set()
    thread.join(60)
    consumer.close()
    return percentiles(read=read, acknowledged=acked)


def pace(bootstrap: str, topic: str, rate: float, seconds: float) -> None:
    """Produce events stamped as they are sent, at ``rate`` per second; print how many.

    Each event is its bytes before and after the event_time field, encoded once: stamping one is a
    join with the varint of now, so the pacer costs little CPU next to the processor it measures.
    """
    codec = AvroCodec(load_schema(ROOT / "streamer" / "schemas" / "feature_event.avsc"))
    producer = clients.plain_producer(bootstrap, linger_ms=5)  # librdkafka's default: a producer as users run it
    pieces = []
    for e in synthetic_events(1000, 32, seed=9):
        whole = codec.encode({**e, "event_time": 0})
        head = avro_string(str(e["event_id"])) + avro_string(str(e["entity_id"]))
        assert whole[:len(head) + 1] == head + b"\0", "the event's fields are not in the expected order"
        pieces.append((head, whole[len(head) + 1:], str(e["entity_id"]).encode()))
    # One event first, waited for: the producer's connection, metadata and idempotent id are set
    # up before pacing starts (the first 0.7 s of events waited for them, and made the p99).
    head, tail, key = pieces[0]
    produce(producer, lambda: producer.poll(0.05), topic, b"".join((head, zigzag(int(time.time() * 1000)), tail)), key)
    assert producer.flush(30) == 0
    sent, started = 1, time.monotonic()
    while (elapsed := time.monotonic() - started) < seconds:
        due = int(elapsed * rate) + 1 - sent
        if due > 0:
            stamp = zigzag(int(time.time() * 1000))
            for _ in range(due):  # pacing a load generator
                head, tail, key = pieces[sent % len(pieces)]
                produce(producer, lambda: producer.poll(0.05), topic, b"".join((head, stamp, tail)), key)
                sent += 1
        producer.poll(0)
        time.sleep(0.0005)
    assert producer.flush(30) == 0
    print(sent)


def latency_runs(base: Config, bootstrap: str,
                 peak: float) -> tuple[dict[float, Percentiles], dict[float, Percentiles]]:
    """At half and at a tenth of ``peak`` ((c)'s median events/s): the processor's latency run, and
    the pass-through's for the floor, each paced into a topic of its own."""
    latency, floor = {}, {}
    for share in (0.5, 0.1):
        cfg = fresh(base, f"lat{share}")
        topic = f"{cfg.input.topics[0]}-lat-{cfg.input.group_id}"
        cfg = replace(cfg, input=replace(cfg.input, topics=(topic,)))
        create_topics(bootstrap, {topic: 3, cfg.output.topic: 3, f"{topic}.dlq": 1})
        latency[share] = latency_run(cfg, share * peak)
        cfg = fresh(cfg, f"lat{share}a")  # the pass-through, paced into a topic of its own
        topic = f"{topic}-a"
        cfg = replace(cfg, input=replace(cfg.input, topics=(topic,)))
        create_topics(bootstrap, {topic: 3, cfg.output.topic: 3})
        floor[share] = pass_through_latency(cfg, share * peak)
    return latency, floor


def print_latency(latency: dict[float, Percentiles], floor: dict[float, Percentiles], max_wait_ms: float,
                  batch: int, peak: float) -> None:
    """Each share's p50/p99 against its bound, max_wait_ms + 2 (at a tenth: 1) batch times + 5 ms
    (a batch time = batch / peak), and the pass-through's at the same rate under it."""
    batch_ms = 1000 * batch / peak if peak else 0.0  # the latency runs need (c)
    for share, split in latency.items():
        bound = max_wait_ms + (2 if share == 0.5 else 1) * batch_ms + 5
        p50, p99 = split["acknowledged"]
        steps = ", ".join(f"{k} {a:.0f}/{b:.0f}" for k, (a, b) in split.items() if k != "acknowledged")
        print(f"latency at {share:.0%} of peak ({share * peak:,.0f} events/s): p50 {p50:.0f} ms, "
              f"p99 {p99:.0f} ms, bound {bound:.0f} ms (p50/p99 from event time to {steps})")
        (r50, r99), (a50, a99) = floor[share]["read"], floor[share]["acknowledged"]
        print(f"  the pass-through at the same rate: p50 {a50:.0f} ms, p99 {a99:.0f} ms (to read {r50:.0f}/{r99:.0f})")
