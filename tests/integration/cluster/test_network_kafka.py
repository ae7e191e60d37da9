"""A sick network between the processor and a three-node cluster: nothing lost.

Each node advertises a second listener at the port of a TCP proxy (tests/support/proxy.py); the
processor bootstraps through the proxies, so all of its traffic (consumer, producer, transaction
and group coordinators, its own admin calls) crosses them, while the feeder and the audit talk to
the brokers directly. While events arrive, the proxies add latency and limit bandwidth, cut every
connection for longer than ``session.timeout.ms``, or black-hole the traffic without closing a
socket. The processor must wait each fault out in-process, resume by itself once the network
heals, and pass the exact read_committed audit. The time from heal to the next committed progress
is printed for the issue notes.

At-least-once is never restarted. Exactly-once may meet librdkafka's send_offsets_to_transaction
hang once the group coordinator was unreachable (librdkafka issues 5456 and 5511: the call waits
on a stale coordinator past its timeout, even after the network is back); the watchdog then
exits 70, and the test starts the processor again as its supervisor would, and counts it. Any
other exit fails the test. Nor may a transaction the coordinator timed out during the fault end
the process: librdkafka reports the epoch the coordinator bumped as a fence, and the processor
replaces its producer once (checkpoint.FENCE_WINDOW_S).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from streamer.dev.broker import LocalCluster
from streamer.errors import EXIT_WATCHDOG
from tests.integration.cluster.test_cluster_kafka import cluster_topics, progress_restarting_on_watchdog
from tests.integration.test_faults_kafka import (
    GUARANTEES,
    Feeder,
    check,
    committed_total,
    finish_feed,
    processor,
)
from tests.support.faults import ChildProcessor, wait_until
from tests.support.proxy import Proxy

pytestmark = pytest.mark.kafka
SESSION_TIMEOUT_MS = 6_000  # write_config's: every cut and black hole below outlasts it
FAULT_S = 10


class Network:
    """The proxies in front of every node, switched together."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.proxies = [Proxy(listen, target).start() for listen, target in cluster.proxy_routes]

    def each(self, fault: Callable[[Proxy], None]) -> None:
        for p in self.proxies:
            fault(p)

    def heal(self) -> None:
        self.each(Proxy.heal)

    def close(self) -> None:
        self.each(Proxy.close)


@pytest.fixture
def network(cluster: LocalCluster) -> Iterator[Network]:
    net = Network(cluster)
    try:
        yield net
    finally:
        net.close()


def fault_test(cluster: LocalCluster, network: Network, tmp_path: Path, guarantee: str,
               fault: Callable[[Proxy], None], label: str, n: int = 16_000, rate: int = 1_000,
               progress_during: bool = False, processing: dict[str, int] | None = None) -> ChildProcessor:
    """Feed ``n`` events at ``rate``/s; once 2,000 are committed, apply ``fault`` to every proxy
    for FAULT_S seconds, then heal; the processor must stay up, progress again (and, with
    ``progress_during``, commit progress during the fault too), and pass the audit."""
    bootstrap = cluster.bootstrap
    topics = cluster_topics(bootstrap)
    feeder = Feeder(bootstrap, topics, rate=rate, limit=n).start()
    p = processor(tmp_path, cluster.proxied_bootstrap, topics, guarantee, "p1", static=False,
                  processing=processing).start()
    try:
        wait_until(lambda: committed_total(bootstrap, topics) >= 2_000, 120, "2,000 inputs committed", p.tail)
        at_fault = committed_total(bootstrap, topics)
        network.each(fault)
        time.sleep(FAULT_S)  # the fault's length is the point of the test, not a synchronisation
        may_restart = guarantee == "exactly_once"
        restarts = 0
        if not p.alive:  # only the watchdog, and only exactly-once (see the module docstring)
            assert may_restart and p.proc is not None and p.proc.poll() == EXIT_WATCHDOG, p.tail()
            p.start()
            restarts += 1
        at_heal = committed_total(bootstrap, topics)
        assert not progress_during or at_heal > at_fault, "no committed progress on the slow network"
        network.heal()
        healed = time.monotonic()
        restarts += progress_restarting_on_watchdog(p, lambda: committed_total(bootstrap, topics) > at_heal,
                                                    may_restart, timeout_s=120)
        recovery_s = time.monotonic() - healed
    except BaseException:
        feeder.stop()
        raise
    result = finish_feed(feeder, n, bootstrap, topics, p)
    print(f"{guarantee}: {label} for {FAULT_S} s, committed {at_heal - at_fault} during it, "
          f"progress again {recovery_s:.1f} s after heal, {restarts} watchdog restart(s)")
    check(result, guarantee, bootstrap, topics)
    return p


@pytest.mark.timeout(300)
@pytest.mark.parametrize("guarantee", GUARANTEES)
def test_a_cut_longer_than_the_session_timeout(cluster: LocalCluster, network: Network, tmp_path: Path,
                                                guarantee: str) -> None:
    """Every connection reset and new ones refused: the member's session expires, the group
    rebalances without it, in-flight batches and (exactly-once) the open transaction fail."""
    fault_test(cluster, network, tmp_path, guarantee, Proxy.cut, "every connection cut")


@pytest.mark.timeout(300)
def test_a_cut_longer_than_the_transaction_timeout(cluster: LocalCluster, network: Network, tmp_path: Path) -> None:
    """Exactly-once with transaction.timeout.ms (3 s) well inside the cut: the coordinator aborts
    the open transaction and bumps the producer's epoch, which librdkafka then reports as fenced.
    No other instance has the transactional.id, so the processor replaces its producer once and
    goes on (in CI this took the process down with exit 3 before)."""
    p = fault_test(cluster, network, tmp_path, "exactly_once", Proxy.cut, "every connection cut, 3 s transactions",
                   processing={"transaction_timeout_ms": 3_000})
    log = p.log.read_text()
    print("producer replaced after a fence:", "the epoch moved on" in log)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("guarantee", GUARANTEES)
def test_a_black_hole_longer_than_the_session_timeout(cluster: LocalCluster, network: Network,
                                                       tmp_path: Path, guarantee: str) -> None:
    """Nothing moves and nothing closes: requests stay in flight past their timeouts and the
    session expires, then the held bytes arrive late."""
    fault_test(cluster, network, tmp_path, guarantee, Proxy.black_hole, "black hole")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("guarantee", GUARANTEES)
def test_latency_and_a_thin_pipe(cluster: LocalCluster, network: Network, tmp_path: Path,
                                 guarantee: str) -> None:
    """150 ms each way and 30 kB/s each way per node: the input alone is about 50 kB/s per node
    (1,000 events/s over three leaders), so the processor falls behind, keeps committing, and
    catches up after heal."""
    def slow(p: Proxy) -> None:
        p.latency(150)
        p.bandwidth(30_000)

    fault_test(cluster, network, tmp_path, guarantee, slow, "150 ms latency, 30 kB/s", progress_during=True)
