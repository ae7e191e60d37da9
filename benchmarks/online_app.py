"""The online server's HTTP application as a module-level ASGI ``app``, for benchmarks/online.py
``--stacks``: the same app under each HTTP server it compares (uvicorn, granian).

It serves ``STREAMER_CONFIG``'s model through the stream's serving and the online server's
dispatcher and routes, as `streamer serve` does, without gRPC.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from streamer.config_file import load_config  # noqa: E402
from streamer.online.server import OnlineServer  # noqa: E402
from streamer.wiring.lake import lake_house  # noqa: E402 - after the path

_cfg = load_config(os.environ["STREAMER_CONFIG"])
_server = OnlineServer(_cfg, lake_house(_cfg).model.serving)
_server.dispatcher.start()
_server.serving.warm_up()
_server.model.set_ready(True)
app = _server.http_app()
