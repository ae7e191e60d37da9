"""Chaos at scale: processors and brokers of a three-node cluster killed while events stream in.

    python benchmarks/chaos.py [--events N] [--processor-kills K] [--broker-kills B] [--brokers 3]
                               [--rate R] [--seed S] [--guarantees at_least_once,exactly_once]

For each guarantee, on a cluster of its own (``--brokers`` nodes, replication 3 and
min.insync.replicas 2 on three), a feeder writes events at ``--rate`` per second to a 6-partition
input while two processors (dynamic members, each with its own transactional.id) score them. One
fault at a time, at random intervals:

- a processor SIGKILLed, and started again at once (its supervisor);
- a processor SIGSTOPped for 2-10 s (past ``session.timeout.ms`` 6 s half of the time: the group
  moves its partitions to the other member), then SIGCONTinued: a zombie that must not write
  anything visible (exactly-once) or lose anything;
- a broker SIGKILLed, and started again on its data after the cluster made committed progress
  without it.

Processors that exit by themselves (watchdog 70, fatal 3) are started again, and counted. The
feeder runs until at least N events are written and every fault has happened; then the run waits
until the group has committed every input offset and audits the output and dead-letter topics
read_committed against every input offset. One line per guarantee:

    exactly_once   events 1000000, lost 0, duplicated 0, processor kills 40 (SIGKILL 20, SIGSTOP 20),
                   broker kills 10, recovery p50 0.8 s max 14.2 s, exits {70: 1}, events/s 3,010

Recovery is the time from a fault to the group's next committed progress (per fault kind in the
detail lines with ``--verbose``). events/s is the events over the wall time from the first
processor start to the last commit.
"""

from __future__ import annotations

import argparse
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import KafkaException  # noqa: E402

from streamer.dev.broker import LocalCluster, LocalKafka, ensure_jars  # noqa: E402
from streamer.errors import BrokerError  # noqa: E402
from streamer.kafka.topics import create_topics  # noqa: E402
from tests.conftest import Topics  # noqa: E402
from tests.integration.test_faults_kafka import Feeder, committed_total  # noqa: E402
from tests.support.faults import ChildProcessor, audit, caught_up, write_config  # noqa: E402

PARTITIONS = 6
RECOVERY_LIMIT_S = 180


class Chaos:
    """One guarantee's run: the cluster, the feeder, the processors and the fault log."""

    def __init__(self, guarantee: str, brokers: int, rate: int, rng: random.Random, workdir: Path) -> None:
        self.guarantee, self.rng = guarantee, rng
        if brokers > 1:
            self.cluster: LocalCluster | LocalKafka = LocalCluster(ensure_jars(), brokers)
        else:
            self.cluster = LocalKafka(ensure_jars())
        self.cluster.start()
        self.bootstrap = self.cluster.bootstrap
        run = uuid.uuid4().hex[:6]
        self.topics = Topics(f"chaos-in-{run}", f"chaos-out-{run}", f"chaos-in-{run}.dlq", f"chaos-{run}")
        create_topics(self.bootstrap, {self.topics.input: PARTITIONS, self.topics.output: PARTITIONS,
                                       self.topics.dlq: 1}, replication_factor=min(brokers, 3))
        self.feeder = Feeder(self.bootstrap, self.topics, rate=rate)
        self.procs = []
        for name in ("a", "b"):
            cfg = write_config(workdir / f"{guarantee}-{name}.yaml", bootstrap=self.bootstrap,
                               input_topic=self.topics.input, output_topic=self.topics.output,
                               group=self.topics.group, guarantee=guarantee,
                               processing={"transactional_id": f"{self.topics.group}-{name}"})
            self.procs.append(ChildProcessor(cfg, workdir / f"{guarantee}-{name}.log"))
        self.exits: Counter[int] = Counter()
        self.recoveries: dict[str, list[float]] = {"SIGKILL": [], "SIGSTOP": [], "broker": []}

    def committed(self) -> int | None:
        """Input offsets the group has committed, summed (None while the cluster cannot say)."""
        try:
            return committed_total(self.bootstrap, self.topics)
        except (BrokerError, KafkaException):
            return None

    def supervise(self, feeding: bool = True) -> None:
        """Start again whatever exited by itself, as systemd or Kubernetes would."""
        if feeding and self.feeder.sent and not self.feeder.running:
            raise RuntimeError("the feeder died: without new events no progress can be measured")
        for p in self.procs:
            if p.proc is not None and p.proc.poll() is not None:
                self.exits[p.proc.returncode] += 1
                p.start()

    def until_progress(self, kind: str, before: int, started: float, during: float = 0.0,
                       after: object = None) -> None:
        """Supervise until the committed total passes ``before`` (record the time since
        ``started``) and, if given, ``after`` has run ``during`` seconds after ``started`` (a
        SIGCONT, say)."""
        recovered = False
        while not recovered or after is not None:
            if after is not None and time.monotonic() - started >= during:
                after()  # type: ignore[operator]
                after = None
            now = self.committed()
            if not recovered and now is not None and now > before:
                self.recoveries[kind].append(time.monotonic() - started)
                recovered = True
            if time.monotonic() - started > RECOVERY_LIMIT_S:
                raise RuntimeError(f"{self.guarantee}: no committed progress {RECOVERY_LIMIT_S} s after "
                                   f"a {kind}:\n" + "\n".join(p.tail() for p in self.procs))
            self.supervise()
            time.sleep(0.1)  # polling the group's committed offsets, not synchronising

    def fault(self, kind: str) -> None:
        before = self.committed() or 0
        started = time.monotonic()
        if kind == "broker":
            assert isinstance(self.cluster, (LocalCluster, LocalKafka))
            if isinstance(self.cluster, LocalCluster):
                node = self.rng.randint(1, len(self.cluster.members))
                self.cluster.kill(node)
                # The others carry the partitions: measure that, then bring the node back.
                self.until_progress(kind, before, started)
                self.cluster.restart(node)
            else:
                self.cluster.kill()
                self.cluster.restart()
                self.until_progress(kind, before, started)
            return
        victim = self.rng.choice(self.procs)
        if kind == "SIGKILL":
            victim.kill()
            victim.start()
            self.until_progress(kind, before, started)
        else:  # a zombie: frozen, perhaps past its session, then thawed
            victim.signal(signal.SIGSTOP)
            self.until_progress(kind, before, started, during=self.rng.uniform(2, 10),
                                after=lambda: victim.signal(signal.SIGCONT))

    def run(self, events: int, processor_kills: int, broker_kills: int) -> str:
        kinds = (["SIGKILL"] * (processor_kills - processor_kills // 2) + ["SIGSTOP"] * (processor_kills // 2)
                 + ["broker"] * broker_kills)
        self.rng.shuffle(kinds)
        started = time.monotonic()
        self.feeder.start()
        for p in self.procs:
            p.start()
        # Faults spread over the feed: a random pause (more events in flight) before each.
        pause = events / self.feeder.rate / max(1, len(kinds))
        for kind in kinds:
            deadline = time.monotonic() + self.rng.uniform(0.2, 1.0) * pause
            while time.monotonic() < deadline:
                self.supervise()
                time.sleep(0.1)  # waiting out the pause between faults
            self.fault(kind)
        while self.feeder.sent < events:
            self.supervise()
            time.sleep(0.1)  # the feed goes on to the event count
        fed = self.feeder.stop()
        deadline = time.monotonic() + 600
        while not caught_up(self.bootstrap, self.topics.group, self.topics.input):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.guarantee}: the group did not commit everything:\n"
                                   + "\n".join(p.tail() for p in self.procs))
            self.supervise(feeding=False)
            time.sleep(0.2)  # polling the group's committed offsets, not synchronising
        seconds = time.monotonic() - started
        hung = 0
        for p in self.procs:
            try:
                p.terminate(timeout_s=120)
            except subprocess.TimeoutExpired:
                hung += 1  # reported: a graceful stop that did not finish is a finding
                p.kill()
        result = audit(self.bootstrap, self.topics.input, self.topics.output, self.topics.dlq)
        every = [t for ts in self.recoveries.values() for t in ts]
        detail = ", ".join(f"{k} p50 {statistics.median(v):.1f} max {max(v):.1f}"
                           for k, v in self.recoveries.items() if v)
        return (f"{self.guarantee:<14} events {result.events} (fed {fed}), lost {result.lost}, duplicated "
                f"{result.duplicated}, processor kills {processor_kills} (SIGKILL "
                f"{len(self.recoveries['SIGKILL'])}, SIGSTOP {len(self.recoveries['SIGSTOP'])}), broker kills "
                f"{len(self.recoveries['broker'])}, recovery p50 {statistics.median(every):.1f} s max "
                f"{max(every):.1f} s ({detail}), exits {dict(self.exits) or 'none'}, events/s "
                f"{result.events / seconds:,.0f}" + (f", {hung} did not stop on SIGTERM" if hung else ""))

    def close(self) -> None:
        for p in self.procs:
            if p.proc is not None and p.proc.poll() is None:
                p.signal(signal.SIGCONT)
                p.kill()
        self.cluster.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--processor-kills", type=int, default=50)
    ap.add_argument("--broker-kills", type=int, default=10)
    ap.add_argument("--brokers", type=int, default=3)
    ap.add_argument("--rate", type=int, default=4_000, help="events per second fed")
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--guarantees", default="at_least_once,exactly_once")
    ap.add_argument("--logs", help="keep the processors' configs and logs in this folder")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="streamer-chaos-") as tmp:
        workdir = Path(args.logs or tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        for guarantee in args.guarantees.split(","):
            chaos = Chaos(guarantee, args.brokers, args.rate, random.Random(args.seed), workdir)
            try:
                line = chaos.run(args.events, args.processor_kills, args.broker_kills)
            finally:
                chaos.close()
            print(line, flush=True)


if __name__ == "__main__":
    main()
