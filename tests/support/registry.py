"""A stand-in Schema Registry over real HTTP, for outage tests: the registry client talks to it
as to the real one (GET /schemas/ids/<id>), and the test switches it away and back.

Only the lookup by id is served (what decoding needs). ``away`` answers 503, as a registry
behind a load balancer with no healthy instance does; an unknown id answers 404 with the
registry's error body.
"""

from __future__ import annotations

import json
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
