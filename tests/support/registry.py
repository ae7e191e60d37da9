"""Stand-in Schema Registries over real sockets, for outage tests: the registry client talks to
them as to the real one.

:class:`FakeRegistry` serves the lookup by id (GET /schemas/ids/<id>, what decoding needs), and
the test switches it away and back: ``away`` answers 503, as a registry behind a load balancer
with no healthy instance does; an unknown id answers 404 with the registry's error body.
:class:`SilentRegistry` accepts connections and never answers.
"""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeRegistry:
    def __init__(self, schemas: dict[int, dict[str, Any]]) -> None:
        self.schemas = schemas
        self.away = False
        self.asked = 0  # lookups that reached it, away or not
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the http.server name
                registry.asked += 1
                path = self.path.split("?")[0].rstrip("/").split("/")
                if registry.away:
                    self._answer(503, {"error_code": 50301, "message": "no healthy instance"})
                elif path[-3:-1] == ["schemas", "ids"] and int(path[-1]) in registry.schemas:
                    self._answer(200, {"schema": json.dumps(registry.schemas[int(path[-1])])})
                else:
                    self._answer(404, {"error_code": 40403, "message": "Schema not found"})

            def _answer(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class SilentRegistry:
    """A server that accepts connections and never answers, as a registry wedged in a restart:
    a client without a timeout waits on it forever. ``accepted`` counts the connections."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._held: list[socket.socket] = []
        self._changed = threading.Condition()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def accepted(self) -> int:
        with self._changed:
            return len(self._held)

    def wait_for_connections(self, count: int, timeout_s: float) -> bool:
        """True once ``count`` connections were accepted, False if not within ``timeout_s``."""
        with self._changed:
            return self._changed.wait_for(lambda: len(self._held) >= count, timeout_s)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:  # closed
                return
            with self._changed:
                self._held.append(conn)  # held open, never read from or written to
                self._changed.notify_all()

    def close(self) -> None:
        self._listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        self._listener.close()
        with self._changed:
            for conn in self._held:
                conn.close()
