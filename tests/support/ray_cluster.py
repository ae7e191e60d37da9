"""A real Ray cluster for the tests: a head and one more node (``ray start --block``), on loopback ports of their own.

Each node is one ``ray start ... --block`` process of the ``ray`` beside this Python; it runs the
node's daemons (the head: GCS, raylet, the log monitor; the other: its raylet) as its children,
in a process group of its own that a stop kills, so a stop touches this cluster alone. ``ray stop`` is
never run: it stops every Ray of the host, other sessions' included.

Every port a node would otherwise take at a fixed default (GCS 6379, the client server 10001, the
dashboard agent 52365, ...) is a free one picked here, the dashboard is off, and the worker
processes bind ports the OS picks, so two sessions' clusters on one host never meet. The head's
``--temp-dir`` is a short folder of its own (Ray's socket paths must fit in 107 characters); the
second node takes the head's, as Ray does for nodes of one host. Each node has 2 logical CPUs
(an actor pool and the read and write tasks beside it on a two-core machine) and a small object
store (``OBJECT_STORE_BYTES``): Ray Data spills what does not fit into the temp dir.

Readiness is each node's own log saying ``Ray runtime started.`` (the second node's raylet has
registered with the GCS by then), never a fixed sleep.

Example::

    with ray_cluster(tmp_path) as cluster:
        subprocess.run(["streamer", "score", "--engine", "ray", "--address", cluster.address, ...])
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from streamer.dev.broker import _log_tail, free_ports
from tests.support.binaries import beside_python

START_TIMEOUT_S = 90.0  # a node of a busy two-core machine starts in 4 to 10 s
STOP_TIMEOUT_S = 15.0  # a killed node's `ray start` is reaped within it
OBJECT_STORE_BYTES = 400 * 1024 * 1024  # per node (Ray's floor is 75 MiB): a million scored rows, little spilled
CPUS = 2  # logical CPUs per node
READY = "Ray runtime started."
# The ports a node takes at a fixed default unless told: each one gets a free port of its own.
NODE_PORTS = ("--node-manager-port", "--object-manager-port", "--dashboard-agent-listen-port",
              "--dashboard-agent-grpc-port", "--runtime-env-agent-port", "--metrics-export-port")
HEAD_PORTS = ("--port", "--ray-client-server-port")
# Every node and driver of the cluster: no usage stats, and no token: Ray turns token authentication on
# where it finds ~/.ray/auth_token (written by any local ray.init of the host), and a node or driver
# that holds no token is refused by a head that asks for one. A loopback cluster of a test needs none.
ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}


class RayStartError(RuntimeError):
    """A Ray node could not be found or did not come up (with the tail of its log)."""


@dataclass(frozen=True, slots=True)
class RayCluster:
    """One running Ray cluster: ``address`` (``127.0.0.1:P``, the head's GCS) is what ``ray.init``
    and ``streamer score --engine ray --address`` take; ``temp_dir`` holds its sessions' logs."""

    address: str
    temp_dir: Path
    node_pids: tuple[int, ...]  # each node's `ray start --block`: its daemons and workers descend from it

    def env(self) -> dict[str, str]:
        """The environment for a driver of this cluster: ``RAY_ADDRESS`` set, :data:`ENV`."""
        return {**os.environ, **ENV, "RAY_ADDRESS": self.address}


    def workers(self, title: str) -> list[int]:
        """The pids of this cluster's worker processes whose title holds ``title`` (an actor's is
        ``ray::<class>`` or Ray Data's ``ray::MapWorker(...)``): this cluster's alone, by descent."""
        children: dict[int, list[int]] = {}
        titles: dict[int, str] = {}
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = (proc / "stat").read_text()
                parent = int(stat[stat.rindex(")") + 2:].split()[1])
                children.setdefault(parent, []).append(int(proc.name))
                titles[int(proc.name)] = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        found, todo = [], list(self.node_pids)
        while todo:
            pid = todo.pop()
            for child in children.get(pid, []):
                todo.append(child)
                if titles.get(child, "").startswith("ray::") and title in titles[child]:
                    found.append(child)
        return sorted(found)


def ray_binary() -> Path:
    """The ``ray`` next to this Python (the ray extra's), else the one on PATH."""
    found = beside_python("ray")
    if found is None:
        raise RayStartError(f"no 'ray' beside {sys.executable} or on PATH (pip install -e '.[ray]')")
    return found


def _node_command(head_address: str | None, temp_dir: Path) -> tuple[list[str], int]:
    """A node's ``ray start`` (the head's when ``head_address`` is None) and its first port (the head's GCS)."""
    ports = (HEAD_PORTS if head_address is None else ()) + NODE_PORTS
    picked = free_ports(len(ports))
    command = [str(ray_binary()), "start", "--block", "--disable-usage-stats", "--include-log-monitor=false",
               f"--num-cpus={CPUS}", f"--object-store-memory={OBJECT_STORE_BYTES}",
               "--min-worker-port=0", "--max-worker-port=0",
               *(f"{flag}={port}" for flag, port in zip(ports, picked, strict=True))]
    if head_address is None:
        return [*command, "--head", "--node-ip-address=127.0.0.1", f"--temp-dir={temp_dir}",
                "--include-dashboard=false"], picked[0]
    return [*command, f"--address={head_address}", "--node-ip-address=127.0.0.1"], picked[0]


def _start(command: list[str], log_file: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, **ENV}
    env.pop("RAY_ADDRESS", None)
    with log_file.open("ab") as out:
        # Its own session: a Ctrl+C of the test run reaches pytest, which stops the node in order.
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _await_started(proc: subprocess.Popen[bytes], log_file: Path, what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while READY not in log_file.read_text(errors="replace"):
        if proc.poll() is not None:
            raise RayStartError(f"the Ray {what} exited with {proc.returncode}" + _log_tail(log_file))
        if time.monotonic() > deadline:
            raise RayStartError(f"the Ray {what} did not start in {START_TIMEOUT_S:.0f}s" + _log_tail(log_file))
        time.sleep(0.1)  # a poll interval between checks of the condition, not a wait for it


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL to the node's own process group (its daemons and workers, nobody else's): a test
    cluster keeps nothing, and a graceful stop costs each node seconds."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(STOP_TIMEOUT_S)


@contextlib.contextmanager
def ray_cluster(workdir: Path) -> Iterator[RayCluster]:
    """A head and one more node, their logs in ``workdir``, stopped (second node first) after the block."""
    workdir.mkdir(parents=True, exist_ok=True)
    temp_dir = Path(tempfile.mkdtemp(prefix="ray-"))  # short: Ray's socket paths live under it
    procs: list[subprocess.Popen[bytes]] = []
    try:
        head_command, gcs_port = _node_command(None, temp_dir)
        address = f"127.0.0.1:{gcs_port}"
        procs.append(_start(head_command, workdir / "head.log"))
        _await_started(procs[0], workdir / "head.log", "head")
        procs.append(_start(_node_command(address, temp_dir)[0], workdir / "node.log"))
        _await_started(procs[1], workdir / "node.log", "second node")
        yield RayCluster(address, temp_dir, tuple(p.pid for p in procs))
    finally:
        for proc in reversed(procs):
            _stop(proc)
        shutil.rmtree(temp_dir, ignore_errors=True)
