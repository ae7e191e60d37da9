"""The HTTP side of a process: /metrics, /healthz (alive and not blocked) and /readyz.

Served from a daemon thread with the standard library's HTTP server, so that a main loop stuck
in a model call is still reported (as unhealthy) rather than silent.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from streamer.config import Config
from streamer.errors import ConfigError
from streamer.pipeline.records import Partition

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Status:
    """What /healthz and /readyz answer; ``reason`` says why not healthy, ``waiting`` why a healthy
    process is not ready yet, in plain words."""

    healthy: bool
    ready: bool
    reason: str = ""
    waiting: str = ""


class HealthServer:
    """Serves the registry and a status callback on ``host:port``; port 0 picks a free one."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int,
                 status: Callable[[], Status]) -> None:
        self.registry, self.status = registry, status
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the standard library's name
                server._answer(self)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                pass  # scrapes every few seconds would flood the log

        self._httpd = ThreadingHTTPServer((host, port), Handler)
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="health", daemon=True)
        self._thread.start()
        log.info("metrics and health on http://%s:%d/metrics, /healthz, /readyz", host, self.port)

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _answer(self, request: BaseHTTPRequestHandler) -> None:
        path = request.path.split("?")[0]
        if path == "/metrics":
            self._send(request, 200, generate_latest(self.registry), CONTENT_TYPE_LATEST)
            return
        if path not in ("/healthz", "/readyz"):
            self._send(request, 404, b"not found\n", "text/plain")
            return
        status = self.status()
        ok = status.healthy if path == "/healthz" else status.ready
        why = status.reason if path == "/healthz" else (status.reason or status.waiting)
        body = (b"ok\n" if ok else f"{why or 'not ready'}\n".encode())
        self._send(request, 200 if ok else 503, body, "text/plain; charset=utf-8")

    @staticmethod
    def _send(request: BaseHTTPRequestHandler, code: int, body: bytes, content_type: str) -> None:
        request.send_response(code)
        request.send_header("Content-Type", content_type)
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        request.wfile.write(body)


def loop_status(*, running: bool, silent_s: float, stall_s: float, blocked: str | None,
                stalled: set[Partition], ready: bool) -> Status:
    """A processor's status: alive (its loop turns within ``stall_s``), not blocked, no stalled
    partition; ready once warmed up and in the group."""
    if running and silent_s > stall_s:
        reason = f"main loop silent for {silent_s:.0f} s (a model call hanging?)"
    elif blocked is not None:
        reason = blocked
    elif stalled:
        reason = "no progress on " + ", ".join(f"{t}[{p}]" for t, p in sorted(stalled))
    else:
        reason = ""
    if not running:
        waiting = "not running: starting (the model warming up) or stopping"
    elif not ready:
        waiting = "no partitions assigned yet: joining the consumer group"
    else:
        waiting = ""
    return Status(healthy=not reason, ready=ready and running, reason=reason, waiting=waiting)


def serve_http(cfg: Config, registry: CollectorRegistry, status: Callable[[], Status]) -> HealthServer:
    try:
        return HealthServer(registry, cfg.metrics.host, cfg.metrics.port, status)
    except OSError as exc:
        raise ConfigError("metrics.port", f"cannot listen on {cfg.metrics.host}:"
                                          f"{cfg.metrics.port}: {exc.strerror}") from exc
