"""Finding or starting a real Apache Kafka broker for the demo and the tests.

Order of preference:

1. ``KAFKA_BOOTSTRAP`` is set: use that existing cluster, start nothing.
2. A Docker engine answers: start Apache Kafka's own image through testcontainers.
3. Otherwise: resolve Apache Kafka's jars with Maven from ``deploy/kafka/pom.xml`` (once, cached
   under ``.cache/kafka``) and run a single-node KRaft broker with the machine's Java 17 on free
   loopback ports, its data in a temporary directory. :class:`LocalCluster` runs three such
   nodes as one cluster (replication 3, min.insync.replicas 2) for the fault tests that kill a
   broker while the others carry on.

Readiness is a metadata request that the broker answers, never a fixed sleep; a broker that fails
to come up raises :class:`LocalBrokerError` with the tail of its log.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka.admin import AdminClient

from streamer.errors import LocalBrokerError

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
POM = REPO_ROOT / "deploy" / "kafka" / "pom.xml"
LOG4J_CONFIG = REPO_ROOT / "deploy" / "kafka" / "log4j2.properties"
CACHE_DIR = Path(os.environ.get("STREAMER_KAFKA_CACHE", REPO_ROOT / ".cache" / "kafka"))
START_TIMEOUT_S = 90.0


def kafka_version(pom: Path = POM) -> str:
    """The Kafka version pinned in the pom (the single place it is written)."""
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    node = ET.parse(pom).getroot().find("m:properties/m:kafka.version", ns)
    if node is None or not node.text:
        raise LocalBrokerError(f"{pom} has no <kafka.version> property")
    return node.text.strip()


def ensure_jars(pom: Path = POM, cache_dir: Path = CACHE_DIR) -> Path:
    """Resolve the broker's jars with Maven into ``cache_dir/<version>/libs``; returns that folder."""
    libs = cache_dir / kafka_version(pom) / "libs"
    marker = libs / ".complete"
    if marker.exists():
        return libs
    if shutil.which("mvn") is None:
        raise LocalBrokerError("Maven ('mvn') is not on PATH: it is needed to fetch Kafka's jars")
    tmp = libs.with_name("libs.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    cmd = ["mvn", "-q", "-B", "-f", str(pom), "dependency:copy-dependencies",
           f"-DoutputDirectory={tmp}"]
    log.info("resolving Apache Kafka %s jars with Maven", kafka_version(pom))
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise LocalBrokerError(f"'{' '.join(cmd)}' failed:\n{_tail(proc.stdout + proc.stderr)}")
    shutil.rmtree(libs, ignore_errors=True)
    tmp.rename(libs)
    marker.touch()
    return libs


def wait_for_metadata(bootstrap: str, timeout_s: float, log_file: Path | None = None) -> None:
    """Block until the cluster at ``bootstrap`` answers a metadata request with at least one broker."""
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    deadline = time.monotonic() + timeout_s
    # A TCP connect first: librdkafka logs every refused connection loudly.
    while not _port_open(host, int(port)):
        if time.monotonic() > deadline:
            raise LocalBrokerError(f"broker at {bootstrap} did not open its port in {timeout_s:.0f}s"
                                   + _log_tail(log_file))
        time.sleep(0.1)
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise LocalBrokerError(f"broker at {bootstrap} did not answer metadata in {timeout_s:.0f}s"
                                   + _log_tail(log_file))
        try:
            if admin.list_topics(timeout=min(remaining, 2.0)).brokers:
                return
        except Exception:  # noqa: BLE001 - KafkaException until the broker is ready; retried
            pass


@dataclass
class LocalKafka:
    """One KRaft node (broker and controller) run from Apache Kafka's jars in a child process:
    a single-node cluster by default, or a member of a :class:`LocalCluster`."""

    libs: Path
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="streamer-kafka-")))
    port: int = 0
    controller_port: int = 0
    process: subprocess.Popen[bytes] | None = None
    node_id: int = 1
    voters: str | None = None  # controller.quorum.voters of a cluster; None: this node alone
    cluster_id: str | None = None  # shared by a cluster's nodes; None: a fresh one
    replication: int = 1  # of the internal topics and the default for new ones
    # A second listener for clients that reach this node through a proxy (network fault tests):
    # the broker listens on proxied_port and advertises proxy_port, where the proxy listens.
    proxied_port: int = 0
    proxy_port: int = 0
    properties: dict[str, str] = field(default_factory=dict)  # server.properties added or overridden
    keep: bool = False  # the data outlives stop(), and a start on formatted storage reuses it

    @property
    def formatted(self) -> bool:
        """This node's storage holds a formatted KRaft log (a kept broker started before)."""
        return (self.workdir / "data" / "meta.properties").exists()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.workdir / "server.log"

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Format fresh storage (on two free ports unless set; a kept broker's formatted storage
        is reused as it is) and start the broker."""
        self.format()
        self._launch(timeout_s)

    def format(self) -> None:
        """Write server.properties and format this node's KRaft storage (unless kept and formatted)."""
        if not (self.port and self.controller_port):
            picked = free_ports(2)  # distinct, whichever of the two is given
            self.port = self.port or next(p for p in picked if p != self.controller_port)
            self.controller_port = self.controller_port or next(p for p in picked if p != self.port)
        props = self.workdir / "server.properties"
        voters = self.voters or f"{self.node_id}@127.0.0.1:{self.controller_port}"
        props.write_text(_server_properties(self.port, self.controller_port, self.workdir / "data",
                                            self.node_id, voters, self.replication,
                                            (self.proxied_port, self.proxy_port))
                         + "".join(f"{k}={v}\n" for k, v in self.properties.items()))
        atexit.register(self.stop)
        if self.keep and self.formatted:
            return
        cluster_id = self.cluster_id or new_cluster_id()
        # "--cluster-id=": a base64 id can start with "-", which argparse would take for a flag.
        fmt = subprocess.run([*self._java(), "kafka.tools.StorageTool", "format",
                              f"--cluster-id={cluster_id}", "-c", str(props)],
                             capture_output=True, text=True, check=False)
        if fmt.returncode != 0:
            raise LocalBrokerError(f"formatting KRaft storage failed:\n{_tail(fmt.stdout + fmt.stderr)}")

    def kill(self) -> None:
        """SIGKILL the broker, as a crash would: its data stays for :meth:`restart`."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def restart(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Start the broker again on the same ports and data (after :meth:`kill`)."""
        self._launch(timeout_s)

    def _launch(self, timeout_s: float) -> None:
        self.spawn()
        self.await_ready(timeout_s)

    def spawn(self) -> None:
        """Start the node's process without waiting for it (a cluster starts all, then waits)."""
        out = (self.workdir / "stdout.log").open("ab")
        # Own session: a Ctrl+C in the terminal goes to us, and we stop the broker in order.
        self.process = subprocess.Popen([*self._java(), "kafka.Kafka",
                                         str(self.workdir / "server.properties")],
                                        stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def await_ready(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Wait until this node answers a metadata request; stop it and raise if it does not."""
        assert self.process is not None
        try:
            wait_for_metadata(self.bootstrap, timeout_s, self.log_file)
        except LocalBrokerError:
            self.stop()
            raise
        if self.process.poll() is not None:
            raise LocalBrokerError("the Kafka process exited during startup" + _log_tail(self.log_file))
        log.info("local Apache Kafka broker ready at %s (data in %s)", self.bootstrap, self.workdir)

    def _java(self) -> list[str]:
        java = shutil.which("java")
        if java is None:
            raise LocalBrokerError("no 'java' on PATH: Java 17 is needed to run the local Kafka broker")
        return [java, "-Xms256m", "-Xmx768m", "-XX:+UseG1GC", "-Djava.awt.headless=true",
                f"-Dlog4j2.configurationFile={LOG4J_CONFIG}", f"-Dkafka.logs.dir={self.workdir}",
                "-cp", f"{self.libs}/*"]

    def stop(self) -> None:
        """SIGTERM, wait for a clean shutdown, SIGKILL if it hangs; then delete the data (unless kept)."""
        proc, self.process = self.process, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if not self.keep:
            shutil.rmtree(self.workdir, ignore_errors=True)


def new_cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


@dataclass
class LocalCluster:
    """``nodes`` KRaft nodes (each broker and controller) on loopback ports, one cluster:
    replication factor ``nodes`` and ``min.insync.replicas`` ``nodes - 1`` for the internal topics
    and as the default for new ones, so one node can die while writes with acks=all go on.

    Example: ``LocalCluster(ensure_jars(), 3)`` then ``start()``; ``kill(2)`` SIGKILLs node 2 (its
    data stays), ``restart(2)`` brings it back; ``bootstrap`` lists every node.
    """

    libs: Path
    nodes: int = 3
    members: list[LocalKafka] = field(default_factory=list)
    proxied: bool = False  # give each node a second listener advertised at a proxy's port
    properties: dict[str, str] = field(default_factory=dict)  # every node's, added or overridden

    @property
    def bootstrap(self) -> str:
        return ",".join(m.bootstrap for m in self.members)

    @property
    def proxied_bootstrap(self) -> str:
        """The nodes as reached through their proxies (which the caller runs: ``proxy_routes``)."""
        return ",".join(f"127.0.0.1:{m.proxy_port}" for m in self.members)

    @property
    def proxy_routes(self) -> list[tuple[int, int]]:
        """(port a proxy must listen on, port it forwards to) for each node."""
        return [(m.proxy_port, m.proxied_port) for m in self.members]

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        free = iter(free_ports(self.nodes * 4))  # every node's four ports, all distinct
        ports = [(next(free), next(free), next(free), next(free)) for _ in range(self.nodes)]
        voters = ",".join(f"{i + 1}@127.0.0.1:{c}" for i, (_, c, _, _) in enumerate(ports))
        cluster_id = new_cluster_id()
        self.members = [LocalKafka(self.libs, port=p, controller_port=c, node_id=i + 1, voters=voters,
                                   cluster_id=cluster_id, replication=self.nodes,
                                   proxied_port=proxied if self.proxied else 0,
                                   proxy_port=proxy if self.proxied else 0,
                                   properties=self.properties)
                        for i, (p, c, proxied, proxy) in enumerate(ports)]
        for m in self.members:
            m.format()
        for m in self.members:  # a quorum forms once a majority runs: start all, then wait
            m.spawn()
        for m in self.members:
            m.await_ready(timeout_s)

    def node(self, node_id: int) -> LocalKafka:
        return self.members[node_id - 1]

    def kill(self, node_id: int) -> None:
        self.node(node_id).kill()

    def restart(self, node_id: int, timeout_s: float = START_TIMEOUT_S) -> None:
        self.node(node_id).restart(timeout_s)

    def stop(self) -> None:
        """SIGKILL every node (a graceful stop of the last ones waits on a lost quorum), then
        delete the data."""
        for m in self.members:
            m.kill()
            m.stop()


@contextlib.contextmanager
def kafka_cluster(nodes: int = 1) -> Iterator[str]:
    """Yield a bootstrap address of a real broker, chosen in the module's order of preference;
    with ``nodes`` > 1 (and no ``KAFKA_BOOTSTRAP``), a :class:`LocalCluster` of that many."""
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP")
    if bootstrap:
        wait_for_metadata(bootstrap, 30.0)
        yield bootstrap
        return
    if nodes > 1:
        cluster = LocalCluster(ensure_jars(), nodes)
        try:
            cluster.start()
            yield cluster.bootstrap
        finally:
            cluster.stop()
        return
    if docker_reachable():
        from testcontainers.kafka import KafkaContainer  # only needed with a Docker engine

        with KafkaContainer(f"apache/kafka:{kafka_version()}").with_kraft() as container:
            bootstrap = container.get_bootstrap_server()
            wait_for_metadata(bootstrap, START_TIMEOUT_S)
            yield bootstrap
        return
    broker = LocalKafka(ensure_jars())
    try:
        broker.start()
        yield broker.bootstrap
    finally:
        broker.stop()


def _server_properties(port: int, controller_port: int, data: Path, node_id: int = 1,
                       voters: str | None = None, replication: int = 1,
                       proxied: tuple[int, int] = (0, 0)) -> str:
    min_isr = max(1, replication - 1)
    listeners = f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}"
    advertised = f"PLAINTEXT://127.0.0.1:{port}"
    if proxied[0]:  # (the port it listens on, the proxy's port it advertises)
        listeners += f",PROXIED://127.0.0.1:{proxied[0]}"
        advertised += f",PROXIED://127.0.0.1:{proxied[1]}"
    return "\n".join([
        "process.roles=broker,controller",
        f"node.id={node_id}",
        f"controller.quorum.voters={voters or f'{node_id}@127.0.0.1:{controller_port}'}",
        f"listeners={listeners}",
        f"advertised.listeners={advertised}",
        "controller.listener.names=CONTROLLER",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,PROXIED:PLAINTEXT",
        "inter.broker.listener.name=PLAINTEXT",
        f"log.dirs={data}",
        "num.partitions=1",
        "auto.create.topics.enable=false",
        f"offsets.topic.replication.factor={replication}",
        "offsets.topic.num.partitions=5",
        f"transaction.state.log.replication.factor={replication}",
        f"transaction.state.log.min.isr={min_isr}",
        "transaction.state.log.num.partitions=5",
        f"default.replication.factor={replication}",
        f"min.insync.replicas={min_isr}",
        "group.initial.rebalance.delay.ms=0",
        f"share.coordinator.state.topic.replication.factor={replication}",
        f"share.coordinator.state.topic.min.isr={min_isr}",
        "",
    ])


def docker_reachable() -> bool:
    if os.environ.get("STREAMER_NO_DOCKER"):
        return False
    try:
        import docker  # testcontainers' dependency; absent means no Docker path
    except ImportError:
        return False
    try:
        docker.from_env(timeout=3).ping()
    except Exception:  # noqa: BLE001 - any failure means "no engine here"
        return False
    return True


def free_ports(count: int) -> list[int]:
    """``count`` distinct free ports of 127.0.0.1. Every socket stays bound until all are picked:
    a port taken and released at once can be handed out again by the next bind, and a broker
    given one port for its listener and its controller fails to start."""
    with contextlib.ExitStack() as held:
        sockets = [held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in range(count)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]


def _port_open(host: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host or "127.0.0.1", port), 0.5):
        return True
    return False


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])


def _log_tail(log_file: Path | None) -> str:
    if log_file is None or not log_file.exists():
        return ""
    return f"\n--- last lines of {log_file} ---\n{_tail(log_file.read_text(errors='replace'))}"
