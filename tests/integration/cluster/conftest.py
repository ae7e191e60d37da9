"""One three-node cluster for the cluster and network fault tests, started once for both.

Package-scoped: it runs while this folder's tests run and stops after the last of them, so the
rest of the suite never carries three idle brokers. Each node has the second listener that the
network tests reach through their proxies (the cluster tests use the direct one), and every test
keeps apart by fresh topics and group, and leaves each node running again.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from streamer.dev.broker import LocalCluster, ensure_jars
from tests.support.faults import forget_clients

# The coordinator looks for timed-out transactions every second (Kafka's default: 10 s), so one
# that outlives transaction.timeout.ms during a fault is aborted, and its epoch bumped, in it.
BROKER = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000"}


@pytest.fixture(scope="package")
def cluster() -> Iterator[LocalCluster]:
    c = LocalCluster(ensure_jars(), nodes=3, proxied=True, properties=BROKER)
    c.start()
    try:
        yield c
    finally:
        forget_clients()  # before the cluster goes: a client left would retry it for the session
        c.stop()
