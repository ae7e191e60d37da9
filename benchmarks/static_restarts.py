"""Static members restarted one by one under cooperative-sticky: is every partition assigned again?

    python benchmarks/static_restarts.py [--restarts 12] [--members 3] [--partitions 6] [--kill]
                                         [--brokers 3 --broker-kills K]

Three `streamer run` members with `group.instance.id` p1..p3 on a 6-partition input. Round robin,
each member is stopped (SIGTERM, or SIGKILL with --kill) and started again under the same
instance id; after each restart, until the restarted process has logged its own assignment and
the group coordinator (describe_consumer_groups) shows every partition owned by exactly one
member, up to 60 s.
Prints one line: restarts, how many ended fully assigned, and the time to full assignment (p50 and
max). With ``--brokers 3 --broker-kills K``, on a three-node cluster, K of the restarts happen right
after a broker (chosen at random) is SIGKILLed, and it is started again once the group is whole:
the group coordinator may be the one that moved. Members then use ``session.timeout.ms`` 45 s,
above the failover time, as the README tells static members to. The chaos benchmark once saw a partition left unassigned after such a restart (issue 12);
this loop is where to reproduce it.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from streamer.dev.broker import LocalCluster, ensure_jars, kafka_cluster  # noqa: E402
from streamer.kafka.topics import create_topics  # noqa: E402
from tests.support.faults import ChildProcessor, owners, write_config  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--restarts", type=int, default=12)
    ap.add_argument("--members", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--kill", action="store_true", help="SIGKILL instead of SIGTERM")
    ap.add_argument("--brokers", type=int, default=1)
    ap.add_argument("--broker-kills", type=int, default=0)
    ap.add_argument("--seed", type=int, default=2026)
    args = ap.parse_args()
    cluster = LocalCluster(ensure_jars(), args.brokers) if args.brokers > 1 else None
    rng = random.Random(args.seed)
    if cluster is not None:
        cluster.start()
        atexit.register(cluster.stop)
    kills = set(rng.sample(range(args.restarts), min(args.broker_kills, args.restarts))) if cluster else set()
    failover = {"session.timeout.ms": 45_000, "heartbeat.interval.ms": 3_000} if cluster else None
    with (contextlib.nullcontext(cluster.bootstrap) if cluster else kafka_cluster()) as bootstrap, \
            tempfile.TemporaryDirectory() as tmp:
        run = uuid.uuid4().hex[:6]
        topic, out, group = f"static-{run}", f"static-{run}-out", f"static-{run}"
        create_topics(bootstrap, {topic: args.partitions, out: args.partitions, f"{topic}.dlq": 1},
                      replication_factor=min(args.brokers, 3))
        members = []
        for i in range(1, args.members + 1):
            cfg = write_config(Path(tmp) / f"p{i}.yaml", bootstrap=bootstrap, input_topic=topic,
                               output_topic=out, group=group, guarantee="at_least_once", instance=f"p{i}",
                               kafka=failover)
            members.append(ChildProcessor(cfg, Path(tmp) / f"p{i}.log").start())
        whole = set(range(args.partitions))

        def assigned() -> bool:
            got = owners(bootstrap, group)
            return set(got) == whole and set(got.values()) == {1}

        def wait_whole(limit_s: float = 60, member: ChildProcessor | None = None, seen: int = 0) -> float | None:
            started = time.monotonic()
            while time.monotonic() - started < limit_s:
                rejoined = member is None or member.log.read_text(errors="replace").count(" assigned ") > seen
                if rejoined and assigned():
                    return time.monotonic() - started
                time.sleep(0.2)  # polling the coordinator's view, not synchronising
            return None

        assert wait_whole(120) is not None, "the group never assigned every partition at the start"
        times: list[float] = []
        stuck: list[str] = []
        for r in range(args.restarts):
            m = members[r % len(members)]
            victim = rng.randint(1, args.brokers) if r in kills else None
            if victim is not None:
                cluster.kill(victim)  # type: ignore[union-attr]
            if args.kill:
                m.kill()
            else:
                m.terminate()
            seen = m.log.read_text(errors="replace").count(" assigned ")
            m.start()
            took = wait_whole(limit_s=120 if victim else 60, member=m, seen=seen)
            if victim is not None:
                cluster.restart(victim)  # type: ignore[union-attr]
            if took is None:
                stuck.append(f"restart {r + 1} (p{r % len(members) + 1}): {owners(bootstrap, group)}")
            else:
                times.append(took)
        for m in members:
            m.kill()
    how = ("SIGKILL" if args.kill else "SIGTERM") + (f", {len(kills)} right after a broker kill on "
                                                     f"{args.brokers} nodes" if kills else "")
    print(f"static restarts ({how}): {args.restarts}, fully assigned after {len(times)}, "
          f"time to full assignment p50 {statistics.median(times) if times else float('nan'):.1f} s "
          f"max {max(times, default=float('nan')):.1f} s" + (f"; NOT assigned: {stuck}" if stuck else ""))


if __name__ == "__main__":
    main()
