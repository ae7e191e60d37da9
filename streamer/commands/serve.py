"""`streamer serve`: the config's model online, over the Open Inference Protocol (HTTP and gRPC).

The model is checked as at the stream's start-up, served through the stream's serving (breaker,
fallback, challengers in shadow, the model's version and digest in every answer), batched by the
stream's flush policy (``online.max_size`` / ``online.max_wait_ms``, by default ``batching``'s).
The stream's topics are not read: Kafka is needed only with ``shadow.challengers``, whose
predictions of the online rows go to the shadow topic.
"""

from __future__ import annotations

import signal
from types import FrameType
from typing import Any

from streamer.config import Config
from streamer.wiring.online import online_server

CLOSE_S = 10.0  # the longest the challengers get to publish what they scored, at the stop


def run_serve(cfg: Config) -> int:
    """Serve until SIGTERM or SIGINT, answer what was admitted, let the challengers publish; 0.
    A signal while the model loads ends it there, 0 as well."""
    server: list[Any] = []
    asked: list[int] = []

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        asked.append(signum)
        if server:
            server[0].stop()  # kept until its loop runs, which then stops at once

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    server.append(online_server(cfg))
    if asked:
        return 0
    try:
        return int(server[0].run())
    finally:
        server[0].serving.close(CLOSE_S)
