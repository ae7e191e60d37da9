"""Online test support: a served model of one FP32 input ``x`` [-1, 2] and one output ``y`` = 2x,
free ports, the one gRPC event loop, and an online server running in a thread."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from streamer.config import Config
from streamer.errors import BadRequest
from streamer.model.signature import Columns
from streamer.online.dispatch import Answer, Dispatcher, Scoring
from streamer.online.server import OnlineServer
from streamer.pipeline.serving import Serving

TIMEOUT_S = 10.0
# grpc.aio binds to one event loop per process: every test server runs on this one.
GRPC_LOOP = asyncio.new_event_loop()
threading.Thread(target=GRPC_LOOP.run_forever, name="grpc-loop", daemon=True).start()


class Doubler:
    """A model of one FP32 input ``x`` [-1, 2] and one output ``y`` = 2x."""

    name = "doubler"
    version = "7"

    def __init__(self) -> None:
        self.is_ready = True

    def ready(self) -> bool:
        return self.is_ready

    def metadata(self) -> dict[str, Any]:
        return {"name": self.name, "versions": [self.version], "platform": "onnx_onnxv1",
                "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 2]}],
                "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 2]}]}

    def columns(self, inputs: dict[str, np.ndarray]) -> Columns:
        if set(inputs) != {"x"}:
            raise BadRequest(f"the model takes x, got {sorted(inputs)}")
        x = inputs["x"]
        if x.dtype != np.float32 or x.ndim != 2 or x.shape[1] != 2:
            raise BadRequest(f"input 'x' takes FP32 [-1, 2], got {x.dtype} {list(x.shape)}")
        return Columns({"x": x})

    def outputs(self, answer: Answer, wanted: tuple[str, ...]) -> dict[str, np.ndarray]:
        unknown = set(wanted) - {"y"}
        if unknown:
            raise BadRequest(f"no output {sorted(unknown)[0]!r}: the model has y")
        return {"y": answer.outputs["y"]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def doubling() -> Dispatcher:
    """A started dispatcher whose model doubles ``x``."""
    d = Dispatcher(lambda cols, ids: Scoring({"y": cols.arrays["x"] * 2}, "doubler", "7", "abc123"),
                   max_size=64, max_wait_ms=2, max_queue_rows=10_000)
    d.start()
    return d



@contextlib.contextmanager
def running(cfg: Config, serving: Serving) -> Iterator[OnlineServer]:
    """An online server of ``serving`` under ``cfg`` in a thread, ready; stopped, and its thread ended, after."""
    server = OnlineServer(cfg, serving)
    thread = threading.Thread(target=server.run, args=(False,), daemon=True)
    thread.start()
    try:
        assert server.ready.wait(TIMEOUT_S), "the online server did not become ready"
        yield server
    finally:
        server.stop()
        thread.join(TIMEOUT_S)
    assert not thread.is_alive(), "the online server did not stop"
