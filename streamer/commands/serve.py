"""`streamer serve`: the config's model online, over the Open Inference Protocol (HTTP and gRPC).

The model is checked as at the stream's start-up, served through the stream's serving (breaker,
fallback, the model's version and digest in every answer), batched by the stream's flush
policy (``online.max_size`` / ``online.max_wait_ms``, by default ``batching``'s). No Kafka is
needed: the stream's topics are not read.
"""

from __future__ import annotations

from dataclasses import replace

from streamer.config import Config, ShadowConfig


def run_serve(cfg: Config) -> int:
    """Serve until SIGTERM or SIGINT; 0 once every admitted request was answered."""
    from streamer.online.server import OnlineServer
    from streamer.wiring import checked_runner, output_codec, serving

    cfg = replace(cfg, shadow=ShadowConfig())  # challengers publish to Kafka: a stream's, not serve's
    runner = checked_runner(cfg)
    return OnlineServer(cfg, serving(cfg, runner, None, output_codec(cfg, runner))).run()
