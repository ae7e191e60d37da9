"""`streamer dev redis [--data DIR] [--port 6379]`: Debian's redis-server in the foreground, with a password.

One server (dev/redis.py's LocalRedis) on ``127.0.0.1:PORT``, its data, config and log in DIR
(default ``.cache/dev-redis`` under the current directory), persisted (an append-only file and
snapshots), so precomputed predictions and features are still there after a restart. The
password is ``$REDIS_PASSWORD`` when set, otherwise a fresh random one printed once with the
address (the server refuses every command without it). It runs until SIGINT or SIGTERM, which
stop the server cleanly (exit 0). A port already in use is exit 2; no redis-server on the
machine, or one that does not come up, exit 3.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

from streamer.dev.ports import port_free
from streamer.dev.redis import LocalRedis, redis_binary
from streamer.errors import EXIT_CONFIG, EXIT_FATAL, LocalBrokerError

DEFAULT_DATA = Path(".cache") / "dev-redis"
DEFAULT_PORT = 6379
PASSWORD_ENV = "REDIS_PASSWORD"


def run_dev_redis(data: Path, port: int, out: TextIO, err: TextIO, env: Mapping[str, str] | None = None) -> int:
    """Run the server until a signal; the exit code (see the module docstring)."""
    env = os.environ if env is None else env
    if not port_free(port):
        print(f"streamer: port {port} on 127.0.0.1 is in use (another Redis? choose one with --port)", file=err)
        return EXIT_CONFIG
    try:
        binary = redis_binary()
    except LocalBrokerError as exc:
        print(f"streamer: {exc}", file=err)
        return EXIT_FATAL
    given = env.get(PASSWORD_ENV)
    password = given or secrets.token_hex(16)
    data = data.resolve()
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    server = LocalRedis(data, port, password, persist=True)
    try:
        try:
            server.start()
        except LocalBrokerError as exc:
            print(f"streamer: {exc}", file=err)
            return EXIT_FATAL
        shown = f"the password from ${PASSWORD_ENV}" if given else f"password {password}"
        print(f"{version(binary)} ready at {server.address}, {shown}\n"
              f"data in {data} (kept across restarts; log: {data / 'redis.log'})\n"
              f"config: kv: {{address: {server.address}, password: ${{KV_PASSWORD}}}} with KV_PASSWORD set to it\n"
              f"Ctrl+C stops it", file=out, flush=True)
        while not stop.wait(0.5):
            code = server.exit_code()
            if code is not None:
                print(f"streamer: redis-server exited (code {code}); see {data / 'redis.log'}", file=err)
                return EXIT_FATAL
    finally:
        server.stop()  # SIGTERM: redis-server writes its data and exits
    print("redis stopped", file=out, flush=True)
    return 0


def version(binary: str) -> str:
    """``Redis 7.0.15`` (what ``redis-server --version`` says), or ``Redis`` when it says nothing usable."""
    try:
        said = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "Redis"
    found = [w.removeprefix("v=") for w in said.split() if w.startswith("v=")]
    return f"Redis {found[0]}" if found else "Redis"
