"""Randomized chaos: processors and the broker killed at random instants, both guarantees.

    python benchmarks/chaos.py [--events N] [--processor-kills K] [--broker-kills B] [--seed S]

For each guarantee, on a broker of its own, two processors (dynamic members, each with its own
transactional.id) score N events while processors are SIGKILLed and the broker is kill -9'd at
random instants, each restarted at once as a supervisor would. Then the output and dead-letter
topics are audited read_committed against every input offset, and one line is printed per
guarantee:

    events N, lost L, duplicated D, processor kills K, broker kills B, events/s R

events/s is N over the wall time from the first processor start to the last commit, so the two
guarantees' figures compare within one run.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from streamer.commands.run import input_codec  # noqa: E402
from streamer.kafka.broker import LocalKafka, ensure_jars  # noqa: E402
from streamer.kafka.topics import create_topics  # noqa: E402
from streamer.commands.demo import demo_config, encoded_events, produce_events, synthetic_events  # noqa: E402
from tests.support.faults import ChildProcessor, audit, caught_up, write_config, written  # noqa: E402


def run(guarantee: str, events: int, processor_kills: int, broker_kills: int, rng: random.Random,
        workdir: Path) -> str:
    broker = LocalKafka(ensure_jars())
    broker.start()
    try:
        bootstrap, run_id = broker.bootstrap, uuid.uuid4().hex[:6]
        topic, out, group = f"chaos-in-{run_id}", f"chaos-out-{run_id}", f"chaos-{run_id}"
        create_topics(bootstrap, {topic: 3, out: 3, f"{topic}.dlq": 1})
        codec = input_codec(demo_config(bootstrap, run_id))
        produce_events(bootstrap, topic, encoded_events(codec, synthetic_events(events, 32)))
        procs = []
        for name in ("a", "b"):
            cfg = write_config(workdir / f"{guarantee}-{name}.yaml", bootstrap=bootstrap,
                               input_topic=topic, output_topic=out, group=group,
                               guarantee=guarantee,
                               processing={"transactional_id": f"{group}-{name}"})
            procs.append(ChildProcessor(cfg, workdir / f"{guarantee}-{name}.log"))
        # Faults at random fractions of the output written so far, in order.
        faults = sorted([(rng.uniform(0.05, 0.9), "processor") for _ in range(processor_kills)] +
                        [(rng.uniform(0.05, 0.9), "broker") for _ in range(broker_kills)])
        started = time.monotonic()
        for p in procs:
            p.start()
        kills = {"processor": 0, "broker": 0}
        deadline = started + 900
        while not caught_up(bootstrap, group, topic):
            if time.monotonic() > deadline:
                raise RuntimeError(f"chaos run ({guarantee}) did not finish:\n{procs[0].tail()}")
            if faults and written(bootstrap, out) >= faults[0][0] * events:
                _, kind = faults.pop(0)
                if kind == "processor":
                    victim = rng.choice(procs)
                    victim.kill()
                    victim.start()
                else:
                    broker.kill()
                    broker.restart()
                kills[kind] += 1
            for p in procs:  # the supervisor: restart whatever exited
                if not p.alive:
                    p.start()
            time.sleep(0.05)
        seconds = time.monotonic() - started
        hung = 0
        for p in procs:
            try:
                p.terminate(timeout_s=120)
            except subprocess.TimeoutExpired:
                hung += 1  # reported: a graceful stop that did not finish is a finding
                p.kill()
        result = audit(bootstrap, topic, out, f"{topic}.dlq")
        return (f"{guarantee:<14} events {result.events}, lost {result.lost}, duplicated "
                f"{result.duplicated}, processor kills {kills['processor']}, broker kills "
                f"{kills['broker']}, events/s {events / seconds:,.0f}"
                + (f" ({hung} processors did not stop on SIGTERM)" if hung else ""))
    finally:
        broker.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--processor-kills", type=int, default=8)
    ap.add_argument("--broker-kills", type=int, default=2)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--guarantees", default="at_least_once,exactly_once")
    ap.add_argument("--logs", help="keep the processors' configs and logs in this folder")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="streamer-chaos-") as tmp:
        if args.logs:
            Path(args.logs).mkdir(parents=True, exist_ok=True)
        for guarantee in args.guarantees.split(","):
            line = run(guarantee, args.events, args.processor_kills, args.broker_kills,
                       random.Random(args.seed), Path(args.logs or tmp))
            print(line, flush=True)


if __name__ == "__main__":
    main()
