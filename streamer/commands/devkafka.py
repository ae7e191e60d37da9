"""`streamer dev kafka [--data DIR] [--port 9092]`: the project's KRaft broker in the foreground.

One node (dev/broker.py's LocalKafka, from Apache Kafka's jars) on ``127.0.0.1:PORT``, its data in
DIR (default ``.cache/dev-kafka`` under the current directory): formatted on the first start
only, so topics, messages and committed offsets are still there after a restart. It prints the
bootstrap address and the data folder once the broker answers, and runs until SIGINT or
SIGTERM, which stop the broker cleanly (exit 0). A port already in use is exit 2, a broker that
does not come up (no Java, no jars, a crash) exit 3.
"""

from __future__ import annotations

import re
import signal
import threading
from pathlib import Path
from typing import TextIO

from streamer.dev.broker import LocalKafka, ensure_jars, kafka_version
from streamer.dev.ports import port_free
from streamer.errors import EXIT_CONFIG, EXIT_FATAL

DEFAULT_DATA = Path(".cache") / "dev-kafka"
DEFAULT_PORT = 9092


def run_dev_kafka(data: Path, port: int, out: TextIO, err: TextIO) -> int:
    """Run the broker until a signal; the exit code (see the module docstring)."""
    if not port_free(port):
        print(f"streamer: port {port} on 127.0.0.1 is in use (another broker? choose one with --port)", file=err)
        return EXIT_CONFIG
    data = data.resolve()
    data.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    broker = LocalKafka(ensure_jars(), workdir=data, port=port, controller_port=controller_port(data), keep=True)
    reused = broker.formatted
    try:
        broker.start()
        print(f"Apache Kafka {kafka_version()} ready at {broker.bootstrap} (KRaft, one node)\n"
              f"data in {data} ({'reused' if reused else 'new'}; kept across restarts; log: {broker.log_file})\n"
              f"Ctrl+C stops it", file=out, flush=True)
        while not stop.wait(0.5):
            process = broker.process
            if process is None or process.poll() is not None:
                print(f"streamer: the broker exited (code {None if process is None else process.returncode}); "
                      f"see {broker.log_file}", file=err)
                return EXIT_FATAL
    finally:
        broker.stop()  # SIGTERM, a clean shutdown; the data stays
    print("broker stopped", file=out, flush=True)
    return 0


def controller_port(data: Path) -> int:
    """The controller port of the broker kept in ``data`` while it is free (the quorum's address
    stays the same across restarts); else 0, a free one."""
    props = data / "server.properties"
    found = re.search(r"CONTROLLER://127\.0\.0\.1:(\d+)", props.read_text()) if props.exists() else None
    return int(found.group(1)) if found and port_free(int(found.group(1))) else 0
