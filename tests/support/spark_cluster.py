"""A real Spark standalone cluster for the tests: a master and two workers from pyspark's own scripts.

pyspark's wheel carries Spark itself (``pyspark/jars``, ``pyspark/bin``): ``bin/spark-class``
runs ``org.apache.spark.deploy.master.Master`` and two ``...worker.Worker`` (``--cores 1
--memory 1g`` each) with the machine's Java 17, on fresh loopback ports, each with its own work
and log folders under one temporary folder, so several sessions on one host never meet.
Readiness is the master's JSON status (``http://<ui>/json/``) listing both workers ALIVE,
never a fixed sleep. :meth:`SparkCluster.submit` runs ``bin/spark-submit --master <url>`` with
the jars of ``deploy/spark/pom.xml`` (streamer/dev/spark_jars.py) and this checkout on the
executors' ``PYTHONPATH``. The cluster is stopped (each process it started, by its own id) when
the ``with`` block ends.

Example::

    with spark_cluster(tmp) as cluster:
        cluster.submit(["streamer/engines/spark_main.py", "--config", ...], timeout_s=300)
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streamer.dev.broker import REPO_ROOT, _log_tail, free_ports
from streamer.dev.spark_jars import ensure_jars, jars_arg

START_TIMEOUT_S = 120.0
WORKERS = 2
# The master's and the workers' JVMs (spark-class reads it for them alone, never for a driver or an
# executor): C1 alone, as they schedule and compute nothing, and start in half the CPU (measured:
# 16 s of CPU for the three to 8.5, ready in 5 s instead of 9).
DAEMON_JAVA_OPTS = "-XX:TieredStopAtLevel=1"


def spark_home() -> Path:
    """pyspark's own Spark: its ``bin/`` and ``jars/``."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def java_home() -> str:
    """The machine's Java (JAVA_HOME, else the one ``java`` on PATH resolves to)."""
    if os.environ.get("JAVA_HOME"):
        return os.environ["JAVA_HOME"]
    java = Path(subprocess.run(["readlink", "-f", "/usr/bin/java"], capture_output=True, text=True,
                               check=True).stdout.strip())
    return str(java.parent.parent)


@dataclass
class SparkCluster:
    """A running standalone cluster: ``master_url`` (``spark://...``), ``ui`` (the master's web UI)."""

    root: Path
    master_url: str = ""
    ui: str = ""
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        """The environment of the cluster's processes and of spark-submit."""
        path = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
        return {**os.environ, "SPARK_HOME": str(spark_home()), "JAVA_HOME": java_home(),
                "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(self.root / "logs"),
                "SPARK_LOCAL_DIRS": str(self.root / "local"), "PYSPARK_PYTHON": sys.executable,
                "PYSPARK_DRIVER_PYTHON": sys.executable, "PYTHONPATH": path, "SPARK_NO_DAEMONIZE": "1"}

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        master, master_ui, *worker_ports = free_ports(2 + 2 * WORKERS)
        self.master_url, self.ui = f"spark://127.0.0.1:{master}", f"http://127.0.0.1:{master_ui}"
        self._run("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                             "--port", str(master), "--webui-port", str(master_ui)])
        for i in range(WORKERS):
            work = self.root / f"worker-{i}"
            work.mkdir(parents=True)
            self._run(f"worker-{i}", ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                                      "--port", str(worker_ports[2 * i]), "--webui-port",
                                      str(worker_ports[2 * i + 1]), "--cores", "1", "--memory", "1g",
                                      "--work-dir", str(work), self.master_url])
        self._await_workers()

    def _run(self, name: str, args: list[str]) -> None:
        log = self.root / f"{name}.log"
        self.logs.append(log)
        with log.open("wb") as out:
            self.processes.append(subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), *args], stdout=out, stderr=subprocess.STDOUT,
                env={**self.env(), "SPARK_DAEMON_JAVA_OPTS": DAEMON_JAVA_OPTS}, cwd=self.root, start_new_session=True))

    def status(self) -> dict[str, Any]:
        """The master's JSON status: workers, active and completed apps."""
        with urllib.request.urlopen(f"{self.ui}/json/", timeout=5) as answer:
            return dict(json.load(answer))

    def _await_workers(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            for proc, log in zip(self.processes, self.logs, strict=True):
                if proc.poll() is not None:
                    raise RuntimeError(f"{log.stem} exited ({proc.returncode}) while the cluster started"
                                       + _log_tail(log))
            with contextlib.suppress(OSError, ValueError):
                if sum(w.get("state") == "ALIVE" for w in self.status().get("workers", [])) == WORKERS:
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Spark master at {self.ui} did not list {WORKERS} workers in "
                                   f"{START_TIMEOUT_S:.0f}s" + _log_tail(self.logs[0]))
            time.sleep(0.2)

    def settings(self, conf: dict[str, str] | None = None) -> dict[str, str]:
        """An application's settings on this cluster: the executors' Python and path, small memory."""
        return {"spark.pyspark.python": sys.executable, "spark.executorEnv.PYTHONPATH": self.env()["PYTHONPATH"],
                "spark.executor.memory": "768m", "spark.driver.memory": "1g",
                "spark.ui.enabled": "false", "spark.local.dir": str(self.root / "local"), **(conf or {})}

    @contextlib.contextmanager
    def session(self, conf: dict[str, str]) -> Iterator[Any]:
        """A Spark session of this process on the cluster (its driver here, the pom's jars, ``conf``:
        the lake's catalog), stopped when the ``with`` block ends. Its executors and their Python
        workers serve every run of the block: a run costs its rows, not an application's start."""
        from pyspark.sql import SparkSession

        kept = {k: os.environ.get(k) for k in ("PYSPARK_PYTHON", "SPARK_HOME", "SPARK_LOCAL_IP")}
        os.environ.update({k: self.env()[k] for k in kept})
        builder = SparkSession.builder.master(self.master_url).appName("streamer tests")
        for key, value in {**self.settings(conf), "spark.jars": jars_arg(ensure_jars())}.items():
            builder = builder.config(key, value)
        session = builder.getOrCreate()
        try:
            yield session
        finally:
            session.stop()
            for key, value in kept.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    def submit_command(self, args: list[str], conf: dict[str, str] | None = None) -> list[str]:
        """spark-submit's command line: this cluster, the pom's jars, the executors' Python and path."""
        flags = [x for k, v in self.settings(conf).items() for x in ("--conf", f"{k}={v}")]
        return [str(spark_home() / "bin" / "spark-submit"), "--master", self.master_url,
                "--jars", jars_arg(ensure_jars()), *flags, *args]

    def start_submit(self, args: list[str], out: Path, *, conf: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """spark-submit started, its stdout and stderr into ``out``.stdout and ``out``.stderr."""
        with out.with_suffix(".stdout").open("wb") as stdout, out.with_suffix(".stderr").open("wb") as stderr:
            return subprocess.Popen(self.submit_command(args, conf), stdout=stdout, stderr=stderr, env=self.env(),
                                    cwd=REPO_ROOT)

    def submit(self, args: list[str], *, conf: dict[str, str] | None = None, timeout_s: float = 300,
               cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        """Run spark-submit to its end; its exit status, stdout and stderr."""
        return subprocess.run(self.submit_command(args, conf), capture_output=True, text=True, env=self.env(),
                              cwd=cwd or REPO_ROOT, timeout=timeout_s, check=False)

    def executors(self) -> list[int]:
        """The process ids of the executors the workers run now (``CoarseGrainedExecutorBackend``)."""
        return [pid for worker in self.processes[1:] for pid in children(worker.pid)
                if "CoarseGrainedExecutorBackend" in cmdline(pid)]

    def stop(self) -> None:
        """Stop each process this cluster started (workers first), by its own process group."""
        for proc in reversed(self.processes):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(self.processes):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


def children(pid: int) -> list[int]:
    """The child processes of ``pid`` (from /proc), none once it is gone."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
    return found


def cmdline(pid: int) -> str:
    """``pid``'s command line, its arguments joined by spaces ('' once it is gone)."""
    with contextlib.suppress(OSError):
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    return ""


@contextlib.contextmanager
def spark_cluster(root: Path | None = None) -> Iterator[SparkCluster]:
    """A master and two workers for the ``with`` block, stopped at its end."""
    cluster = SparkCluster(root or Path(tempfile.mkdtemp(prefix="streamer-spark-")))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
