"""Scaling on one host: `streamer run --workers K` against K Kafka pass-through processes.

    python benchmarks/scaling.py [--events N] [--max-workers 3] [--partitions 6]

One broker, one input topic of N events on 6 partitions, written once. For K = 1..max: K
pass-through processes in one group (consume, re-produce the same bytes, commit after acks), then
`streamer run --workers K`, each into an output topic of its own. Each figure is events/s from
the first output message to the group's commit of the whole input (the group join is not
counted), and the table prints processor/pass-through per K. A benchmark, not a test: compare
figures within one run on one machine.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from streamer.commands.demo import encoded_events, produce_events, synthetic_events  # noqa: E402
from streamer.dev.broker import kafka_cluster  # noqa: E402
from streamer.formats.configured import input_codec  # noqa: E402
from streamer.kafka.topics import create_topics  # noqa: E402
from streamer.pipeline.records import Partition  # noqa: E402
from tests.support.faults import caught_up, write_config, written  # noqa: E402


def pass_through_child(config: str, group: str, out: str) -> None:
    """One pass-through member (the config's client settings, its own group and output topic):
    runs until SIGTERM, committing after acks every 0.5 s."""
    from dataclasses import replace

    from confluent_kafka import KafkaException, TopicPartition

    from streamer.config_file import load_config
    from streamer.kafka import clients
    from streamer.kafka.delivery import produce

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    base = load_config(config)
    cfg = replace(base, input=replace(base.input, group_id=group))
    consumer, producer = clients.make_consumer(cfg), clients.make_producer(cfg)
    positions: dict[Partition, int] = {}

    def commit(tps: set[Partition] | None = None) -> None:
        """Commit after every ack (of ``tps`` only, on a revoke); a failure is retried next time."""
        chosen = {tp: o for tp, o in positions.items() if tps is None or tp in tps}
        if chosen and producer.flush(30) == 0:
            try:
                consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in chosen.items()],
                                asynchronous=False)
            except KafkaException as exc:  # a rebalance under way: the next commit carries it
                print(f"pass-through: commit failed ({exc}), retried next time", file=sys.stderr)

    def revoked(_consumer: object, tps: list[TopicPartition]) -> None:
        gone = {(tp.topic, tp.partition) for tp in tps}
        commit(gone)
        for tp in gone:
            positions.pop(tp, None)

    consumer.subscribe(list(cfg.input.topics), on_revoke=revoked)
    last = time.monotonic()
    while not stop:
        for m in consumer.consume(1000, 0.1):
            if m.error():
                continue
            produce(producer, lambda: producer.poll(0.05), out, m.value(), m.key())
            positions[(m.topic(), m.partition())] = m.offset() + 1
        producer.poll(0)
        if time.monotonic() - last > 0.5:
            commit()
            last = time.monotonic()
    producer.flush(30)
    consumer.close()


def measure(bootstrap: str, topic: str, group: str, out: str, n: int, procs: list[subprocess.Popen[bytes]]) -> float:
    """events/s from the first output to the group's commit of everything; then stop the processes."""
    try:
        deadline = time.monotonic() + 600
        while written(bootstrap, out) == 0:
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "no output"
            time.sleep(0.02)
        started = time.monotonic()
        while not caught_up(bootstrap, group, topic):
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "stalled"
            time.sleep(0.05)
        return n / (time.monotonic() - started)
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=150_000)
    ap.add_argument("--max-workers", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--pass-through-child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.pass_through_child:
        pass_through_child(*args.pass_through_child)
        return
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with kafka_cluster() as bootstrap, tempfile.TemporaryDirectory() as tmp:
        run = uuid.uuid4().hex[:6]
        topic = f"scale-in-{run}"
        create_topics(bootstrap, {topic: args.partitions})
        cfg_path = write_config(Path(tmp) / "base.yaml", bootstrap=bootstrap, input_topic=topic,
                                output_topic="unused", group="unused", guarantee="at_least_once",
                                batching={"max_size": 512})
        from streamer.config_file import load_config
        produce_events(bootstrap, topic, encoded_events(input_codec(load_config(cfg_path).input),
                                                        synthetic_events(args.events, 32, seed=5)))
        rows = []
        for k in range(1, args.max_workers + 1):
            group, out = f"pt-{k}-{run}", f"pt-out-{k}-{run}"
            create_topics(bootstrap, {out: args.partitions})
            procs = [subprocess.Popen([sys.executable, __file__, "--pass-through-child", str(cfg_path),
                                       group, out], env=env) for _ in range(k)]
            passthrough = measure(bootstrap, topic, group, out, args.events, procs)
            group, out = f"proc-{k}-{run}", f"proc-out-{k}-{run}"
            create_topics(bootstrap, {out: args.partitions})
            doc = yaml.safe_load(cfg_path.read_text())
            doc["input"]["group_id"], doc["output"]["topic"] = group, out
            path = Path(tmp) / f"proc-{k}.yaml"
            path.write_text(yaml.safe_dump(doc))
            log = (Path(tmp) / f"proc-{k}.log").open("wb")
            procs = [subprocess.Popen([sys.executable, "-m", "streamer", "run", "--config", str(path),
                                       "--workers", str(k)], env=env, cwd=ROOT, stdout=log, stderr=log)]
            processor = measure(bootstrap, topic, group, out, args.events, procs)
            rows.append((k, passthrough, processor))
            print(f"K={k}: pass-through {passthrough:,.0f} events/s, processor {processor:,.0f} events/s",
                  flush=True)
        print(f"\nevents {args.events}, partitions {args.partitions}, batch 512, one broker on this host")
        print(f"{'K':>2}  {'pass-through':>14}  {'processor':>12}  {'ratio':>6}")
        for k, a, c in rows:
            print(f"{k:>2}  {a:>14,.0f}  {c:>12,.0f}  {c / a:>6.2f}")


if __name__ == "__main__":
    main()
