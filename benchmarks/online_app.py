"""The online server's HTTP application as a module-level ASGI ``app``, for benchmarks/online.py
``--stacks``: the same app under each HTTP server it compares (uvicorn, granian).

It serves ``STREAMER_CONFIG``'s model through the stream's serving and the online dispatcher, as
`streamer serve` does, without gRPC.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from streamer.commands.lake import lake_house  # noqa: E402 - after the path
from streamer.config_file import load_config  # noqa: E402
from streamer.online.dispatch import Dispatcher  # noqa: E402
from streamer.online.http import app as make_app  # noqa: E402
from streamer.online.served import ServedModel  # noqa: E402

_cfg = load_config(os.environ["STREAMER_CONFIG"])
_serving = lake_house(_cfg).serving
_model = ServedModel(_cfg.model.name, _serving)
_o = _cfg.online
_dispatcher = Dispatcher(_model.score, _o.max_size or _cfg.batching.max_size,
                         _cfg.batching.max_wait_ms if _o.max_wait_ms is None else _o.max_wait_ms, _o.max_queue_rows)
_dispatcher.start()
_serving.warm_up()
_model.set_ready(True)
app = make_app(_model, _dispatcher, default_timeout_ms=_o.timeout_ms, max_body_bytes=_o.max_body_bytes)
