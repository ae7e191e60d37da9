"""Throughput of the processor against its limits, on one broker, in one run.

    python benchmarks/throughput.py [--events N] [--naive-events M] [--batch B]

(a) Kafka pass-through: consume and re-produce the same bytes, same client settings, no decoding.
(b) The model alone on pre-built float32 arrays at the configured batch size.
(c) The processor (decode, batch, infer, encode, produce, commit after acks).
(d) A naive loop: one message at a time: poll, decode, predict, produce, wait for the ack, commit.
(e) The processor on a copy of the input where 1% of the rows make the model fail (bisection and
    dead letters at work); its ratio against (c) is the cost of poison rows.
(f) The processor with processing.guarantee exactly_once; its ratio against (c) is the cost of
    transactions.
(g) `streamer replay` of the whole input, against (a) and (b).
Then the processor again with `model.intra_op_threads` 0 (ONNX Runtime's own pool) and 2, against
the default 1; and a latency run: a paced producer at half of (c)'s rate, then at a tenth, for
5 s each, with the p50/p99 from event time (stamped when produced) to acknowledged prediction,
against the bound max_wait_ms + 2 batch times + 5 ms (a batch time = batch / (c)), and from event
time to the event read and to it scored (the transport's share apart from the processor's). The
pacer produces with librdkafka's default linger.ms (5 ms) and its connection made first; with the
0 ms it had, the broker took a request per event, and the events of its first 0.7 s waited.
(h) The same job as an idiomatic faust-streaming agent (benchmarks/faust_peer.py); c/h.
(i) The processor on the same 32 features sent as 32 named float fields (model.inputs stacks
    them into the same model's input); i/c is the cost of named fields (columnar_fields.py).
(j) A mixed-type 12-field event (strings, a nullable float, a long, an enum, a boolean) into a
    scikit-learn ColumnTransformer model (models/build_converter_models.py, 5 inputs) with a label
    and a probability mapped out.
(n) (j)'s events as named-field JSON (input.format json): the JSON named-field path
    (formats/columnar/json_fields.py), (j)'s model and outputs.
(o) (j)'s events as protobuf-confluent (order.proto, written by Confluent's ProtobufSerializer;
    the test Schema Registry, tests/support/schema_registry.py, runs for it: Java 21 and the
    app in .cache/registry), (j)'s model and outputs.
(c), (j), (n) and (o) are broken down per event into decode, model, encode and loop, in us of CPU
(StageCpu: observer callbacks and marks of the injected clients and runner; the loop is the rest of
the figure's CPU/event: consume, batching, produce, delivery reports, commits, librdkafka). The
model's share is the runner's calls: for (j), (n), (o) the ColumnTransformer model's own cost,
ONNX Runtime's, not the processor's, and reported apart. Each of (j), (n), (o) is printed with its
CPU/event against (a)'s, and against (c)'s on the non-model part: "j/c on the non-model part" is
(c's CPU/event - c's model share) / (j's CPU/event - j's model share), the ratio events/s would
give if the model cost nothing (target >= 0.8); the same for n/c and o/c. (c)'s CPU/event against
(a)'s is printed per round too (the two run in every round), so "<= 1.5x in 5 of 5 runs" reads off.
`--figures a,c,i` runs only those (`--latency` adds the latency runs; they need c).
Each figure runs ``--repeat`` times (3), in a shuffled order each round (seeded by the round): the
median and the min are printed, ratios are of medians,
with the process CPU time per event of each (this process: the client, librdkafka's threads
included; the broker is another process; beside it the Python side's share, every thread but
librdkafka's), over the window its rate is measured on: from the first event to the last output
acknowledged by the broker for (a), (c), (e), (f), (i), (j), (n), (o) (start-up and shutdown left out; for
(f) the wait from there to its outputs committed, which a finite input ends with, is printed
apart: AckClock), the whole call for the others. ``--pin`` puts the broker (and the latency run's paced
producer) on one core and this process on another (``sched_setaffinity``, as ``taskset`` does), so
the two do not take each other's time and CPU figures compare across runs. Kafka rates run from the first consumed
message to the last ack, so group joins are not counted. The input's events, which this process
keeps, are frozen out of the garbage collector's way before each figure (streamer/heap.py), as every
processor freezes its own start-up heap: no figure pays full collections that walk them. ``--kafka
KEY=VALUE`` sets a librdkafka property for the clients of every figure, the pass-through's included
(a tuning compared on the same footing), but faust's (h) and the latency runs' pacer. A benchmark, not a test: the
figures are only comparable within one run on one machine.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from confluent_kafka import Consumer, Producer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from streamer import heap  # noqa: E402
from streamer.commands.demo import demo_config, encoded_events, produce_events, synthetic_events  # noqa: E402
from streamer.commands.replay import run_replay  # noqa: E402
from streamer.config import Config, InputSource, OutputTarget, RegistryConfig  # noqa: E402
from streamer.dev.broker import kafka_cluster  # noqa: E402
from streamer.formats.avro import AvroCodec, load_schema
from streamer.formats.varint import avro_string, zigzag  # noqa: E402
from streamer.kafka import clients  # noqa: E402
from streamer.kafka.delivery import produce  # noqa: E402
from streamer.kafka.ranges import When  # noqa: E402
from streamer.kafka.topics import create_topics  # noqa: E402
from streamer.model.contract import SCORES  # noqa: E402
from streamer.observe.stats import Stats  # noqa: E402
from streamer.pipeline.records import ModelId, Stamp, prediction_fields  # noqa: E402
from streamer.pipeline.validate import EventValidator  # noqa: E402
from streamer.testing import PoisonRunner, score_matrix  # noqa: E402
from streamer.wiring import build_processor, checked_runner, input_codec, model_runner, output_codec  # noqa: E402

POISON = 9999.0
ALL = "abcdefghijno"  # the figures a run without --figures makes
ROOT = Path(__file__).resolve().parent.parent


class Pinning:
    """``--pin``: the broker's core and the client's (this process). Affinity is per thread and
    inherited: set before the broker starts, it is the broker's; set after, every thread this
    process starts later (librdkafka's, ONNX Runtime's) gets the client's."""

    def __init__(self) -> None:
        self.broker: int | None = None
        self.client: int | None = None

    def choose(self) -> None:
        cores = sorted(os.sched_getaffinity(0))
        if len(cores) < 2:
            raise SystemExit("--pin needs two cores")
        self.broker, self.client = cores[0], cores[1]
        os.sched_setaffinity(0, {self.broker})  # the broker, started next, inherits it

    def client_side(self) -> None:
        if self.client is not None:
            os.sched_setaffinity(0, {self.client})

    def beside_broker(self) -> None:  # a helper process (the paced producer): off the client's core
        if self.broker is not None:
            os.sched_setaffinity(0, {self.broker})

    def __str__(self) -> str:
        return "unpinned" if self.client is None else f"broker on core {self.broker}, client on core {self.client}"


PINNED = Pinning()


def fresh(base: Config, tag: str) -> Config:
    """The base config with its own group and output topic, so the runs share only the input."""
    run = uuid.uuid4().hex[:6]
    return replace(base, input=replace(base.input, group_id=f"bench-{tag}-{run}"),
                   output=replace(base.output, topic=f"bench-{tag}-out-{run}"))


def pass_through(cfg: Config, n: int) -> float:
    """Consume and re-produce the same bytes, commit after the acks; events/s from the first message."""
    consumer = Consumer(clients.consumer_config(cfg))
    producer = Producer(clients.producer_config(cfg, **WAKEUPS.settings()))
    consumer.subscribe(list(cfg.input.topics))
    done, acked, started = 0, [0], None
    positions: dict[tuple[str, int], int] = {}

    def ack(err: object, _m: object) -> None:
        acked[0] += err is None

    while done < n:
        for m in consumer.consume(cfg.input.consume_max_messages, 0.1):
            if m.error():
                continue
            if started is None:
                started = time.perf_counter()
                WINDOW.start()
            produce(producer, lambda: producer.poll(0.05), cfg.output.topic, m.value(), m.key(),
                    on_delivery=ack)
            positions[(m.topic(), m.partition())] = m.offset() + 1
            done += 1
        producer.poll(0)
    producer.flush(60)
    consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in positions.items()],
                    asynchronous=False)
    elapsed = time.perf_counter() - (started or 0)
    WINDOW.stop()
    consumer.close()
    assert acked[0] >= n, f"pass-through: only {acked[0]} of {n} acknowledged"
    return n / elapsed


def model_only(cfg: Config, n: int) -> float:
    """The runner alone on pre-built arrays at the configured batch size."""
    runner = model_runner(cfg)
    runner.warm_up(cfg.batching.max_size)
    arrays = np.random.default_rng(3).normal(size=(n, runner.contract.feature_width)).astype(np.float32)
    size = cfg.batching.max_size
    started = time.perf_counter()
    for i in range(0, n, size):
        score_matrix(runner, arrays[i:i + size])
    return n / (time.perf_counter() - started)


def replay_run(cfg: Config) -> float:
    """(g): `streamer replay` of the whole input to ``<output topic>.backfill``; events/s from the
    first event read to the last output acknowledged."""
    return run_replay(cfg, When("earliest"), run_id=cfg.input.group_id, output_topic=f"{cfg.output.topic}.backfill",
                      progress=io.StringIO()).stats.events_per_s()


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
            WINDOW.stop()


COMMIT_TAILS: dict[str, list[float]] = {}  # per figure: ms from the last ack to the outputs committed


def processor_run(cfg: Config, n: int, poisoned: int = 0, tag: str | None = None) -> float:
    """Events/s from the first event to the last output acknowledged (AckClock); with ``tag``, the
    run's stages timed too (StageCpu), kept in STAGES under it."""
    runner: Any = PoisonRunner(model_runner(cfg), POISON) if poisoned else None
    kafka = probed(cfg)
    clock = AckClock(n)
    stages = StageCpu()
    if tag is not None:
        runner, kafka = staged(cfg, stages)
    processor = build_processor(cfg, runner=runner, clients=kafka,
                                observers=(clock,) if tag is None else (clock, stages))

    def until(s: Stats) -> bool:
        if s.events:
            WINDOW.start()
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


class StageCpu:
    """CPU per event of each stage of a processor figure, within its window (CpuWindow), in the
    thread CPU time (``time.thread_time``) of the loop's thread, between marks that its observer
    callbacks (streamer.house.Observer) and its injected clients and runner set:

    - decode: from the consumed chunk in hand (the consumer's call returned) to its rows decoded
      and validated (``decoded``);
    - model: the runner's calls (contract feed, the ONNX Runtime session, outputs collected), on
      whichever thread runs them (the loop's, or the inference thread when pipelined): for the
      ColumnTransformer figures that is ONNX Runtime's cost, not the processor's;
    - encode: from the model's answer (inline), or the loop's previous mark (pipelined: the
      previous batch handed to the producer, or the rows decoded, so the batcher's join of the
      batch falls in it), to its predictions encoded (``scored``);
    - loop: the rest of the figure's process CPU: consume, batching, produce, delivery reports,
      commits, and librdkafka's threads (the Kafka client's share).

    The marks cost a clock read each, a few per batch: nothing per event."""

    def __init__(self) -> None:
        self.loop_thread = threading.get_ident()  # the processor runs on the thread that builds it
        self.mark: float | None = None
        self.spent = {"decode": 0.0, "model": 0.0, "encode": 0.0}

    def step(self, stage: str | None) -> None:
        """A mark on the loop's thread: the time since the last one goes to ``stage`` (None: the loop's)."""
        if threading.get_ident() != self.loop_thread:
            return
        now = time.thread_time()
        if stage is not None and self.mark is not None and WINDOW.started is not None and WINDOW.stopped is None:
            self.spent[stage] += now - self.mark
        self.mark = now

    def model(self, seconds: float) -> None:
        if WINDOW.started is not None and WINDOW.stopped is None:
            self.spent["model"] += seconds

    def decoded(self, rows: Any) -> None:
        self.step("decode")

    def scored(self, batch: Any, seconds: float, out: Any, predicted: Any) -> None:
        self.step("encode")

    def acked(self, acked: Any) -> None:
        self.step(None)

    def per_event(self, n: int) -> dict[str, float]:
        return {k: v / n * 1e6 for k, v in self.spent.items()}


class MarkedClient:
    """A Kafka client whose calls ``marked`` set a StageCpu mark as they return (the time before
    them is the loop's); every other attribute is the client's own."""

    def __init__(self, inner: Any, stages: StageCpu, marked: tuple[str, ...]) -> None:
        self._inner, self._stages = inner, stages
        for name in marked:
            setattr(self, name, self._marking(getattr(inner, name)))

    def _marking(self, call: Callable[..., Any]) -> Callable[..., Any]:
        def marked(*args: Any, **kwargs: Any) -> Any:
            self._stages.step(None)  # what came before the call is the loop's (after scored: produce)
            try:
                return call(*args, **kwargs)
            finally:
                self._stages.step(None)
        return marked

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __len__(self) -> int:
        return len(self._inner)


class TimedRunner:
    """The figure's model runner (checked at start as the processor checks it), each call's thread
    CPU counted as the model's share (StageCpu)."""

    def __init__(self, inner: Any, stages: StageCpu) -> None:
        self._inner, self._stages = inner, stages

    def run(self, features: Any) -> Any:
        self._stages.step(None)  # the batch's inputs gathered: the loop's (inline)
        started = time.thread_time()
        try:
            return self._inner.run(features)
        finally:
            self._stages.model(time.thread_time() - started)
            if threading.get_ident() == self._stages.loop_thread:
                self._stages.mark = time.thread_time()  # counted already: the model's

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def staged(cfg: Config, stages: StageCpu) -> tuple[Any, clients.KafkaClients]:
    """The runner and clients of a figure whose stages are timed (StageCpu)."""
    kafka = probed(cfg)
    return TimedRunner(checked_runner(cfg), stages), replace(
        kafka, consumer=lambda **extra: MarkedClient(kafka.consumer(**extra), stages, ("poll", "consume")),
        producer=lambda **extra: MarkedClient(kafka.producer(**extra), stages, ("produce_batch",)))


STAGES: dict[str, list[dict[str, float]]] = {}  # per figure: each run's StageCpu per event (us)


def paced(cfg: Config, rate: float, seconds: float) -> int:
    """Run the paced producer into the input topic; how many events it sent. It runs in a process
    of its own: in this one it would share the GIL with the client it measures."""
    pacer = subprocess.run([sys.executable, __file__, "--pace", cfg.kafka["bootstrap.servers"],  # type: ignore[list-item]
                            cfg.input.topics[0], str(rate), str(seconds)], capture_output=True, text=True,
                           check=True, preexec_fn=PINNED.beside_broker)
    return int(pacer.stdout.split()[-1])


def percentiles(**stages: list[float]) -> dict[str, tuple[float, float]]:
    return {name: (float(np.percentile(v, 50)), float(np.percentile(v, 99))) for name, v in stages.items()}


def latency_run(cfg: Config, rate: float, seconds: float = 5.0) -> dict[str, tuple[float, float]]:
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


def pass_through_latency(cfg: Config, rate: float, seconds: float = 5.0) -> dict[str, tuple[float, float]]:
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
    codec = AvroCodec(load_schema(Path(__file__).resolve().parent.parent / "streamer" / "schemas" / "feature_event.avsc"))
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


def poisoned_copy(events: list[dict[str, object]], every: int) -> list[dict[str, object]]:
    """The same events with every ``every``-th one made to fail in the model."""
    out = [dict(e) for e in events]
    for e in out[::every]:
        e["features"] = [POISON, *list(e["features"])[1:]]  # type: ignore[call-overload]
    return out


def naive(cfg: Config, n: int) -> float:
    """The loop people write first: every message waits for its own ack and commit."""
    runner = model_runner(cfg)
    decoder, encoder = input_codec(cfg), output_codec(cfg)
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


NAMED = {"type": "record", "name": "NamedFeatures", "namespace": "bench", "fields": [
    {"name": "event_id", "type": "string"}, {"name": "entity_id", "type": "string"},
    {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    *({"name": f"f{k}", "type": "float"} for k in range(32))]}
MIXED = {"type": "record", "name": "Order", "namespace": "bench", "fields": [
    {"name": "event_id", "type": "string"}, {"name": "entity_id", "type": "string"},
    {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "country", "type": "string"}, {"name": "channel", "type": "string"},
    {"name": "amount", "type": "double"}, {"name": "age_days", "type": ["null", "float"], "default": None},
    {"name": "n_items", "type": "long"}, {"name": "merchant", "type": "string"},
    {"name": "device", "type": {"type": "enum", "name": "Device", "symbols": ["ios", "android", "web"]}},
    {"name": "is_new", "type": "boolean"}, {"name": "hint", "type": "double"}]}


def named_inputs(base: Config, bootstrap: str, events: list[dict[str, object]], folder: Path) -> Config:
    """(i): the events' 32 features as fields f0..f31 in their own topic, stacked into the model's input."""
    schema = folder / "named.avsc"
    schema.write_text(json.dumps(NAMED))
    topic = f"{base.input.topics[0]}-named"
    create_topics(bootstrap, {topic: 3})
    cfg = replace(base, input=replace(base.input, topics=(topic,), schema=schema),
                  model=replace(base.model, inputs={"features": InputSource(tuple(f"f{k}" for k in range(32)),
                                                                           stacked=True)}))
    named = ({**{k: e[k] for k in ("event_id", "entity_id", "event_time")},
              **{f"f{k}": float(v) for k, v in enumerate(e["features"])}} for e in events)  # type: ignore[arg-type]
    produce_events(bootstrap, topic, encoded_events(input_codec(cfg), list(named)))
    return cfg


def mixed_inputs(base: Config, bootstrap: str, n: int, folder: Path) -> Config:
    """(j): mixed 12-field events into the ColumnTransformer model of build_converter_models.py."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bcm", ROOT / "models" / "build_converter_models.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    script.write_models(folder / "models")
    schema = folder / "mixed.avsc"
    schema.write_text(json.dumps(MIXED))
    topic = f"{base.input.topics[0]}-mixed"
    create_topics(bootstrap, {topic: 3})
    cfg = replace(base, input=replace(base.input, topics=(topic,), schema=schema),
                  output=replace(base.output, schema=None),
                  model=replace(base.model, path=folder / "models" / "column_transformer.onnx",
                                inputs={k: InputSource((k,), fill=0.0 if k == "age_days" else None)
                                        for k in ("country", "channel", "amount", "age_days", "n_items")},
                                outputs={"label": OutputTarget("label"),
                                         "fraud": OutputTarget("probabilities", column=1)}))
    produce_events(bootstrap, topic, encoded_events(input_codec(cfg), mixed_rows(n)))
    return cfg


def mixed_rows(n: int) -> list[dict[str, Any]]:
    """(j)'s events, the same for (n) and (o): one in ten has no age_days (the input's fill)."""
    rng = np.random.default_rng(11)
    return [{"event_id": f"m{i}", "entity_id": f"c{i % 97}", "event_time": 1_700_000_000_000 + i,
             "country": ["US", "DE", "FR", "BR"][i % 4], "channel": ["web", "app", "pos"][i % 3],
             "amount": float(rng.lognormal(3, 1)), "age_days": None if i % 10 == 0 else float(i % 2000),
             "n_items": i % 9 + 1, "merchant": f"shop-{i % 50}", "device": ["ios", "android", "web"][i % 3],
             "is_new": i % 7 == 0, "hint": 0.5} for i in range(n)]


def json_inputs(mixed: Config, bootstrap: str, n: int) -> Config:
    """(n): (j)'s events as named-field JSON (input.format json, no schema) in their own topic: the
    processor's JSON named-field path (formats/columnar/json_fields.py), (j)'s model and outputs."""
    topic = f"{mixed.input.topics[0]}-json"
    create_topics(bootstrap, {topic: 3})
    cfg = replace(mixed, input=replace(mixed.input, topics=(topic,), format="json", schema=None))
    produce_events(bootstrap, topic, encoded_events(input_codec(cfg), mixed_rows(n)))
    return cfg


def order_class() -> Any:
    """order.proto: (j)'s event as a proto3 message, ``age_days`` an ``optional float`` (a null is
    the field not sent), ``device`` an enum."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    t = descriptor_pb2.FieldDescriptorProto
    fd = descriptor_pb2.FileDescriptorProto(name="order.proto", package="bench", syntax="proto3")
    device = fd.enum_type.add(name="Device")
    for number, name in enumerate(["ios", "android", "web"]):
        device.value.add(name=name, number=number)
    m = fd.message_type.add(name="Order")
    m.oneof_decl.add(name="_age_days")  # the synthetic oneof protoc writes for `optional`
    fields = [("event_id", t.TYPE_STRING), ("entity_id", t.TYPE_STRING), ("event_time", t.TYPE_INT64),
              ("country", t.TYPE_STRING), ("channel", t.TYPE_STRING), ("amount", t.TYPE_DOUBLE),
              ("age_days", t.TYPE_FLOAT), ("n_items", t.TYPE_INT64), ("merchant", t.TYPE_STRING),
              ("device", t.TYPE_ENUM), ("is_new", t.TYPE_BOOL), ("hint", t.TYPE_DOUBLE)]  # MIXED's order
    for number, (name, kind) in enumerate(fields, 1):
        field = m.field.add(name=name, number=number, type=kind, label=t.LABEL_OPTIONAL)
        if name == "age_days":
            field.oneof_index, field.proto3_optional = 0, True
        if kind == t.TYPE_ENUM:
            field.type_name = ".bench.Device"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("bench.Order"))


def protobuf_inputs(mixed: Config, bootstrap: str, n: int, registry_url: str) -> Config:
    """(o): (j)'s events as protobuf-confluent, written by Confluent's ProtobufSerializer (the schema
    registered with the test registry, tests/support/schema_registry.py), in their own topic."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    topic = f"{mixed.input.topics[0]}-protobuf"
    create_topics(bootstrap, {topic: 3})
    cfg = replace(mixed, input=replace(mixed.input, topics=(topic,), format="protobuf-confluent", schema=None,
                                       registry=RegistryConfig(url=registry_url)))
    message = order_class()
    serializer = ProtobufSerializer(message, SchemaRegistryClient({"url": registry_url, "timeout": 10}),
                                    {"use.deprecated.format": False})
    context = SerializationContext(topic, MessageField.VALUE)
    produce_events(bootstrap, topic, ((str(e["entity_id"]).encode(),
                                       serializer(message(**{k: v for k, v in e.items() if v is not None}), context))
                                      for e in mixed_rows(n)))
    return cfg


def python_threads_cpu() -> float:
    """CPU seconds of this process's threads that are not librdkafka's (``rdk:*``): the loop,
    the inference thread, ONNX Runtime's. Each thread's CPU clock read from its Linux id."""
    total = 0.0
    for tid in os.listdir("/proc/self/task"):
        try:
            if not Path(f"/proc/self/task/{tid}/comm").read_text().startswith("rdk:"):
                total += time.clock_gettime((~int(tid) << 3) | 6)  # MAKE_THREAD_CPUCLOCK(tid, SCHED)
        except OSError:
            continue  # the thread ended while we looked
    return total


class CpuWindow:
    """The process CPU time between a figure's first event and its last output, the window its
    rate is measured over: start-up (a model session, a heap settled, a group joined) and shutdown
    are left out of both. A figure that marks nothing is timed whole. Beside it, the share of the
    Python side (every thread but librdkafka's): what the processor's own code costs, apart from
    the client library's threads, whose busy-waits (Wakeups) come and go from run to run."""

    def __init__(self) -> None:
        self.started: float | None = None
        self.stopped: float | None = None
        self.python: float | None = None  # CPU seconds of the Python side within the window

    def start(self) -> None:
        if self.started is None:
            self.started = time.process_time()
            self.python = -python_threads_cpu()

    def stop(self) -> None:
        if self.stopped is None:
            self.stopped = time.process_time()
            if self.python is not None:
                self.python += python_threads_cpu()


WINDOW = CpuWindow()


class Wakeups:
    """The producers' broker-thread wake-ups (librdkafka's statistics, ``brokers.*.wakeups``) per
    event of a figure, printed beside each run's CPU per event. An idempotent producer's broker
    thread can wake in a busy loop while a partition waits for its request in flight: librdkafka
    counts the messages in flight against a cap of five requests, so a partition with a batch out
    has no room, and once linger.ms has passed for its queued messages the thread's next wake-up
    is now, until the response comes (rdkafka_broker.c, rd_kafka_toppar_producer_serve). That is
    hundreds of thousands of wake-ups per 100,000 messages against ~1,000, and 1-3 us of CPU an
    event, in some runs and not in others. Statistics come every 100 ms: the last 100 ms of a
    figure may be missing from its count, and its count starts when its producer does (the group
    join included), its CPU at its first event. (g) builds its own clients and reports none."""

    def __init__(self) -> None:
        self.latest: dict[str, int] = {}  # by producer instance

    def settings(self) -> dict[str, Any]:
        return {"statistics.interval.ms": 100, "stats_cb": self.on_stats}

    def on_stats(self, stats_json: str) -> None:
        stats = json.loads(stats_json)
        self.latest[stats["name"]] = sum(int(b.get("wakeups", 0)) for b in stats.get("brokers", {}).values())

    def total(self) -> int:
        return sum(self.latest.values())


WAKEUPS = Wakeups()


def probed(cfg: Config) -> clients.KafkaClients:
    """The config's clients, their producers reporting wake-ups to WAKEUPS."""
    return replace(clients.KafkaClients.from_config(cfg),
                   producer=lambda **extra: clients.make_producer(cfg, **{**WAKEUPS.settings(), **extra}))


def timed(fn: Callable[[], float], n: int) -> tuple[float, float, float, float]:
    """``fn()`` (events/s), the process CPU time per event of its window and its Python side's
    (NaN for a figure that marks no window), in microseconds, and the producers' wake-ups per event."""
    global WINDOW, WAKEUPS
    WINDOW, WAKEUPS = CpuWindow(), Wakeups()
    before = time.process_time()
    rate = fn()
    after = time.process_time()
    python = WINDOW.python / n * 1e6 if WINDOW.python is not None and WINDOW.stopped else float("nan")
    return rate, ((WINDOW.stopped or after) - (WINDOW.started or before)) / n * 1e6, python, WAKEUPS.total() / n


def stage_report(cpu: dict[str, list[float]]) -> None:
    """The breakdown of (c), (j), (n), (o) (StageCpu; the loop is the rest of each run's CPU/event),
    (j), (n), (o) against (a) and, on the non-model part, against (c); and (c)/(a) per round."""
    parts: dict[str, dict[str, float]] = {}
    for k, runs in sorted(STAGES.items()):
        split = {s: [r[s] for r in runs] for s in ("decode", "model", "encode")}
        split["loop"] = [total - sum(r.values()) for total, r in zip(cpu[k], runs, strict=True)]
        parts[k] = {s: float(np.median(v)) for s, v in split.items()}
        print(f"({k}) per event, us CPU (median of {len(runs)}): " + ", ".join(
            f"{s} {v:.2f}" for s, v in parts[k].items()) + f"; total {np.median(cpu[k]):.2f}")
    if domain := [k for k in "jno" if k in parts]:
        print("the ColumnTransformer model's own cost is ONNX Runtime's, not ours: " + ", ".join(
            f"({k}) {parts[k]['model']:.2f} us/event" for k in domain))
    if "a" in cpu:
        base_us = float(np.median(cpu["a"]))
        for k in domain:
            print(f"({k}) CPU/event against (a): {np.median(cpu[k]):.2f} / {base_us:.2f} us = "
                  f"{np.median(cpu[k]) / base_us:.2f}x")
    if "c" in parts:  # c's CPU/event less its model over k's less its model: as events/s would give k/c
        c_rest = float(np.median(cpu["c"])) - parts["c"]["model"]
        for k in domain:
            rest = float(np.median(cpu[k])) - parts[k]["model"]
            print(f"{k}/c on the non-model part: ({np.median(cpu['c']):.2f} - {parts['c']['model']:.2f}) / "
                  f"({np.median(cpu[k]):.2f} - {parts[k]['model']:.2f}) = {c_rest / rest:.2f} (target >= 0.8)")
    if "a" in cpu and "c" in cpu:  # the same round's (c) and (a): "<= 1.5x in R of R runs" reads off
        ratios = [c / a for c, a in zip(cpu["c"], cpu["a"], strict=True)]
        print("(c)/(a) CPU/event per round: " + " ".join(f"{r:.2f}" for r in ratios)
              + f"; <= 1.5x in {sum(r <= 1.5 for r in ratios)} of {len(ratios)} runs")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--naive-events", type=int, default=2_000,
                    help="the naive loop is slow: it scores this many (its rate is what counts)")
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=3, help="runs of each figure: median and min are printed")
    ap.add_argument("--no-faust", action="store_true", help="leave out (h), the faust-streaming agent")
    ap.add_argument("--figures", help="comma-separated figures to run (default: all, a to j, n and o)")
    ap.add_argument("--pin", action="store_true", help="the broker on one core, this process on another")
    ap.add_argument("--latency", action="store_true", help="the latency runs with --figures too (needs c)")
    ap.add_argument("--kafka", action="append", default=[], metavar="KEY=VALUE",
                    help="a librdkafka property (repeatable), as under kafka:, for the clients of every "
                         "figure but faust's (h) and the latency runs' pacer")
    ap.add_argument("--pace", nargs=4, help=argparse.SUPPRESS)  # the latency run's producer process
    args = ap.parse_args()
    if bad := [kv for kv in args.kafka if "=" not in kv or not kv.split("=", 1)[0]]:
        ap.error(f"--kafka takes KEY=VALUE, got {bad}")
    if args.pace:
        pace(args.pace[0], args.pace[1], float(args.pace[2]), float(args.pace[3]))
        return
    if args.pin:
        PINNED.choose()
    wanted = set(args.figures.split(",")) if args.figures else set(ALL)
    with kafka_cluster() as bootstrap, tempfile.TemporaryDirectory() as scratch, contextlib.ExitStack() as stack:
        PINNED.client_side()
        base = demo_config(bootstrap, uuid.uuid4().hex[:6], args.batch)
        base = replace(base, kafka={**base.kafka, **dict(kv.split("=", 1) for kv in args.kafka)})
        create_topics(bootstrap, {base.input.topics[0]: 3})
        codec = input_codec(base)
        events = synthetic_events(args.events, 32)
        produce_events(bootstrap, base.input.topics[0], encoded_events(codec, events))
        runs: dict[str, Callable[[Config], float]] = {
            "a": lambda c: pass_through(c, args.events),
            "b": lambda c: model_only(c, args.events),
            "c": lambda c: processor_run(c, args.events, tag="c"),
            "d": lambda c: naive(c, args.naive_events),
            "e": lambda c: processor_run(c, args.events, poisoned=len(events[::100])),
            "f": lambda c: processor_run(replace(c, processing=replace(
                c.processing, guarantee="exactly_once", transactional_id=f"bench-{c.input.group_id}")),
                args.events),
            "g": replay_run,
        }
        if not args.no_faust and "h" in wanted:
            from faust_peer import run_faust  # benchmarks/: needs the bench extra (faust-streaming)

            runs["h"] = lambda c: run_faust(bootstrap, c.input.topics[0], c.output.topic, args.events)
        if "i" in wanted:
            named = named_inputs(base, bootstrap, events, Path(scratch))
            runs["i"] = lambda c: processor_run(replace(named, input=replace(named.input, group_id=c.input.group_id),
                                                        output=c.output), args.events)
        domain: dict[str, Config] = {}  # (j), (n), (o): the mixed event as Avro, JSON, protobuf-confluent
        if wanted & set("jno"):
            domain["j"] = mixed_inputs(base, bootstrap, args.events, Path(scratch))
        if "n" in wanted:
            domain["n"] = json_inputs(domain["j"], bootstrap, args.events)
        if "o" in wanted:
            from tests.support.schema_registry import schema_registry  # the test registry (Apicurio)

            registry = stack.enter_context(schema_registry())
            domain["o"] = protobuf_inputs(domain["j"], bootstrap, args.events, registry.url)
        for k, mixed in domain.items():
            runs[k] = partial(lambda c, m, k: processor_run(
                replace(m, input=replace(m.input, group_id=c.input.group_id), output=replace(c.output, schema=None)),
                args.events, tag=k), m=mixed, k=k)
        runs = {k: fn for k, fn in runs.items() if k in wanted}
        poisoned_topic = f"{base.input.topics[0]}-poisoned"
        create_topics(bootstrap, {poisoned_topic: 3})
        produce_events(bootstrap, poisoned_topic, encoded_events(codec, poisoned_copy(events, 100)))
        # The input's 100,000 events stay in this process: frozen before each figure, as a processor
        # freezes its start-up heap (streamer/heap.py) and thaws it when it stops, so no figure pays
        # full collections walking them.
        heap.settle()
        figures: dict[str, list[float]] = {}
        cpu: dict[str, list[float]] = {}
        python_cpu: dict[str, list[float]] = {}  # the Python side's share of cpu (CpuWindow)
        wakeups: dict[str, list[float]] = {}
        for round_ in range(args.repeat):
            order = list(runs.items())
            random.Random(round_).shuffle(order)  # a slow spell of the machine hits no figure each round
            for tag, fn in order:
                if tag == "d" and round_:
                    continue  # the naive loop is only the floor: once is enough
                cfg = fresh(base, tag)
                if tag == "e":
                    cfg = replace(cfg, input=replace(cfg.input, topics=(poisoned_topic,)))
                create_topics(bootstrap, {cfg.output.topic: 3, f"{cfg.input.topics[0]}.dlq": 1})
                heap.freeze()
                rate, us, py, woke = timed(lambda: fn(cfg), args.naive_events if tag == "d" else args.events)
                figures.setdefault(tag, []).append(rate)
                cpu.setdefault(tag, []).append(us)
                python_cpu.setdefault(tag, []).append(py)
                wakeups.setdefault(tag, []).append(woke)
        for threads in (0, 2) if args.figures is None else ():
            cfg = fresh(base, f"t{threads}")
            cfg = replace(cfg, model=replace(cfg.model, intra_op_threads=threads))
            create_topics(bootstrap, {cfg.output.topic: 3, f"{cfg.input.topics[0]}.dlq": 1})
            figures[f"c{threads}"] = [processor_run(cfg, args.events)]
        peak = float(np.median(figures["c"])) if "c" in figures else 0.0
        latency, floor = {}, {}
        for share in (0.5, 0.1) if args.figures is None or args.latency else ():
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
    names = {"a": "kafka pass-through", "b": "model alone", "c": "processor", "d": "naive loop",
             "e": "processor, 1% poison", "f": "processor, exactly-once", "g": "replay",
             "h": "faust-streaming agent", "i": "32 named float fields", "j": "mixed 12-field event",
             "n": "mixed event as JSON", "o": "mixed, protobuf-conf."}
    med = {k: float(np.median(v)) for k, v in figures.items()}
    print(f"events {args.events} (naive {args.naive_events}), batch {args.batch}, "
          f"provider {model_runner(base).provider}, median and min of {args.repeat} runs "
          f"(the naive loop: one run), {PINNED}" + "".join(f", kafka {kv}" for kv in args.kafka))
    for k in sorted(runs):
        cpu_note = f"   {np.median(cpu[k]):6.1f} us CPU/event"
        if any(wakeups.get(k, ())):  # each run's CPU beside its producers' wake-ups (Wakeups)
            cpu_note += "   runs (us, Python us, wake-ups)/event " + " ".join(
                f"{u:.1f},{p:.1f},{w:.1f}" for u, p, w in zip(cpu[k], python_cpu[k], wakeups[k], strict=True))
        print(f"({k}) {names[k]:<22} median {med[k]:>12,.0f}   min {min(figures[k]):>12,.0f} events/s{cpu_note}")
    ratios = [("c/a", "c", "a", 3), ("c/b", "c", "b", 3), ("c/d", "c", "d", 1), ("e/c", "e", "c", 3),
              ("f/c", "f", "c", 3), ("g/a", "g", "a", 3), ("g/b", "g", "b", 4), ("c/h", "c", "h", 1),
              ("i/c", "i", "c", 3), ("j/c", "j", "c", 3), ("n/c", "n", "c", 3), ("o/c", "o", "c", 3),
              ("g/c", "g", "c", 3)]
    if shown := [f"{name} {med[x] / med[y]:.{digits}f}" for name, x, y, digits in ratios if x in med and y in med]:
        print("   ".join(shown))
    if "exactly_once" in COMMIT_TAILS:  # outside (f)'s window (AckClock)
        tails = COMMIT_TAILS["exactly_once"]
        print(f"(f) from the last ack to its outputs committed: median {np.median(tails):.0f} ms "
              f"(runs {', '.join(f'{t:.0f}' for t in tails)}); the same rate to committed: "
              f"{np.median([args.events / (args.events / r + t / 1000) for r, t in zip(figures['f'], tails)]):,.0f} events/s")
    if "a" in cpu:  # the client's CPU per event against the pass-through's (target: c/a <= 1.5)
        base_us = float(np.median(cpu["a"]))
        print("CPU/event against (a): " + "   ".join(
            f"{k} {np.median(cpu[k]) / base_us:.2f}x" for k in sorted(cpu) if k not in "abd"))
        base_py = float(np.median(python_cpu["a"]))  # the Python side alone, librdkafka's threads left out
        print("Python-side CPU/event: " + "   ".join(
            f"{k} {np.median(python_cpu[k]):.1f} us" + (f" ({np.median(python_cpu[k]) / base_py:.2f}x)" if k != "a" else "")
            for k in sorted(python_cpu) if k not in "bd" and not np.isnan(np.median(python_cpu[k]))))
    stage_report(cpu)
    if "c0" in med:
        print(f"intra_op_threads 0: {med['c0']:,.0f} events/s ({med['c0'] / peak:.2f} of 1), "
              f"2: {med['c2']:,.0f} events/s ({med['c2'] / peak:.2f} of 1)")
    batch_ms = 1000 * args.batch / peak if peak else 0.0  # the latency runs need (c)
    for share, split in latency.items():
        bound = base.batching.max_wait_ms + (2 if share == 0.5 else 1) * batch_ms + 5
        p50, p99 = split["acknowledged"]
        steps = ", ".join(f"{k} {a:.0f}/{b:.0f}" for k, (a, b) in split.items() if k != "acknowledged")
        print(f"latency at {share:.0%} of peak ({share * peak:,.0f} events/s): p50 {p50:.0f} ms, "
              f"p99 {p99:.0f} ms, bound {bound:.0f} ms (p50/p99 from event time to {steps})")
        (r50, r99), (a50, a99) = floor[share]["read"], floor[share]["acknowledged"]
        print(f"  the pass-through at the same rate: p50 {a50:.0f} ms, p99 {a99:.0f} ms (to read {r50:.0f}/{r99:.0f})")


if __name__ == "__main__":
    main()
