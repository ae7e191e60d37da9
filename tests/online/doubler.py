"""Online test support: a served model of one FP32 input ``x`` [-1, 2] and one output ``y`` = 2x,
its data plane, free ports, the one gRPC event loop, and an online server running in a thread."""

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
from streamer.online.dispatch import Dispatcher
from streamer.online.plane import DataPlane
from streamer.online.server import OnlineServer
from streamer.pipeline.records import ModelId, Scored
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

    def set_ready(self, ready: bool) -> None:
        self.is_ready = ready

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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def doubled(cols: Columns, ids: list[str]) -> Scored:
    """The doubler's scores of a batch: ``y`` = 2x, by version 7."""
    return Scored(Columns({"y": cols.arrays["x"] * 2}), model=ModelId("doubler", "7", "abc123"))


def doubling() -> Dispatcher:
    """A started dispatcher whose model doubles ``x``."""
    d = Dispatcher(doubled, max_size=64, max_wait_ms=2, max_queue_rows=10_000)
    d.start()
    return d


def plane(model: Doubler, dispatcher: Dispatcher, **kw: Any) -> DataPlane:
    """The data plane of the doubler on ``dispatcher``, with a 5 s default deadline."""
    return DataPlane(model, dispatcher, timeout_ms=5000, **kw)


@contextlib.contextmanager
def running(cfg: Config, serving: Serving, **kw: Any) -> Iterator[OnlineServer]:
    """An online server of ``serving`` under ``cfg`` in a thread, ready; stopped, and its thread
    ended, after; ``kw``: the server's other arguments (a feature source)."""
    with run(OnlineServer(cfg, serving, **kw)) as server:
        yield server


@contextlib.contextmanager
def run(server: OnlineServer) -> Iterator[OnlineServer]:
    """``server`` run in a thread, ready; stopped, and its thread ended, after."""
    thread = threading.Thread(target=server.run, args=(False,), daemon=True)
    thread.start()
    try:
        assert server.ready.wait(TIMEOUT_S), "the online server did not become ready"
        yield server
    finally:
        server.stop()
        thread.join(TIMEOUT_S)
    assert not thread.is_alive(), "the online server did not stop"
