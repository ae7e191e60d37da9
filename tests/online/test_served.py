"""Served models over both transports with tritonclient: every answer equals ONNX Runtime offline
on the same rows, for the demo model and the ColumnTransformer with string inputs; through the
stream's serving (its version and digest in every answer)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import uvicorn

from streamer.config import Config, with_overrides
from streamer.config_contract import InputSource, OutputTarget
from streamer.config_file import load_config
from streamer.online.dispatch import Dispatcher
from streamer.online.grpc_service import GrpcTransport
from streamer.online.http import HttpTransport
from streamer.online.plane import DataPlane
from streamer.online.served import ServedModel
from streamer.wiring.lake import lake_house
from tests.conftest import EXAMPLE, ROOT
from tests.online.doubler import GRPC_LOOP, TIMEOUT_S, free_port


def example() -> Config:
    return load_config(EXAMPLE, env={"KAFKA_BOOTSTRAP": "127.0.0.1:1", "INPUT_TOPIC": "in", "OUTPUT_TOPIC": "out",
                                     "GROUP_ID": "g"})


def transformer_config(model: Path) -> Config:
    inputs = {"country": "card.country", "channel": "channel", "amount": "amount", "age_days": "age_days",
              "n_items": "n_items"}
    outputs = {"label": "label", "fraud": {"output": "probabilities", "column": 1}}
    return with_overrides(example(), input={"format": "json", "schema": None},
                          model={"path": model, "name": "purchases", "version": "3",
                                 "inputs": {k: InputSource.parse(v, k) for k, v in inputs.items()},
                                 "outputs": {k: OutputTarget.parse(v, k) for k, v in outputs.items()}},
                          output={"schema": None})


class Served:
    """A config's model served over HTTP and gRPC on free ports, in this process."""

    def __init__(self, cfg: Config) -> None:
        house = lake_house(cfg)
        self.model = ServedModel(cfg.model.name, house.model.serving)
        self.dispatcher = Dispatcher(self.model.score, 64, 2, 10_000)
        self.dispatcher.start()
        self.plane = DataPlane(self.model, self.dispatcher, timeout_ms=5000)
        house.model.serving.warm_up()
        self.model.set_ready(True)
        self.http_port, self.grpc_port = free_port(), free_port()
        self.server = uvicorn.Server(uvicorn.Config(HttpTransport(self.plane, max_body_bytes=1 << 20).app(),
                                                    host="127.0.0.1", port=self.http_port, log_level="warning"))
        threading.Thread(target=self.server.run, daemon=True).start()
        async def serve() -> grpc.aio.Server:
            server = grpc.aio.server()
            server.add_generic_rpc_handlers((GrpcTransport(self.plane).handler(),))
            server.add_insecure_port(f"127.0.0.1:{self.grpc_port}")
            await server.start()
            return server

        self.grpc = asyncio.run_coroutine_threadsafe(serve(), GRPC_LOOP).result(TIMEOUT_S)
        deadline = time.monotonic() + TIMEOUT_S
        while not self.server.started:
            assert time.monotonic() < deadline
            time.sleep(0.01)  # uvicorn's flag, set by its thread: nothing to await

    def close(self) -> None:
        self.server.should_exit = True
        asyncio.run_coroutine_threadsafe(self.grpc.stop(None), GRPC_LOOP).result(TIMEOUT_S)
        self.dispatcher.stop(TIMEOUT_S)


@pytest.fixture(scope="module")
def demo() -> Iterator[Served]:
    served = Served(example())
    yield served
    served.close()


def infer_both(served: Served, model: str, tensors: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    """The answers over HTTP and over gRPC, each output by name."""
    answers = []
    for module, url in ((httpclient, f"127.0.0.1:{served.http_port}"), (grpcclient, f"127.0.0.1:{served.grpc_port}")):
        kind = {np.dtype(np.float32): "FP32", np.dtype(np.int64): "INT64", np.dtype(object): "BYTES"}
        inputs = []
        for name, array in tensors.items():
            given = module.InferInput(name, list(array.shape), kind[array.dtype])
            given.set_data_from_numpy(array)
            inputs.append(given)
        if module is httpclient:
            client, waits = httpclient.InferenceServerClient(url, connection_timeout=10, network_timeout=30), {}
        else:
            client, waits = grpcclient.InferenceServerClient(url), {"client_timeout": 30}
        result = client.infer(model, inputs, **waits)
        response = result.get_response()
        names = [o["name"] for o in response["outputs"]] if isinstance(response, dict) else \
            [o.name for o in response.outputs]
        answers.append({n: result.as_numpy(n) for n in names})
        client.close()
    return answers


def test_the_demo_model_answers_as_onnx_runtime_offline(demo: Served) -> None:
    x = np.random.default_rng(5).normal(size=(37, 32)).astype(np.float32)
    offline = ort.InferenceSession(str(ROOT / "models" / "fraud_mlp.onnx")).run(None, {"features": x})[0]
    for answer in infer_both(demo, "fraud_mlp", {"features": x}):
        np.testing.assert_array_equal(answer["scores"], offline)
    meta = httpclient.InferenceServerClient(f"127.0.0.1:{demo.http_port}", connection_timeout=10,
                                            network_timeout=30).get_model_metadata("fraud_mlp")
    assert meta["inputs"] == [{"name": "features", "datatype": "FP32", "shape": [-1, 32]}]
    assert meta["outputs"] == [{"name": "scores", "datatype": "FP32", "shape": [-1, 1]}]


def test_the_column_transformer_takes_strings_and_answers_as_onnx_runtime_offline(converter_models: Path) -> None:
    model = converter_models / "column_transformer.onnx"
    served = Served(transformer_config(model))
    try:
        rng = np.random.default_rng(9)
        n = 25
        tensors = {
            "country": np.array([[c] for c in rng.choice(["US", "DE", "FR", "BR"], n)], object),
            "channel": np.array([[c] for c in rng.choice(["web", "app", "pos"], n)], object),
            "amount": rng.uniform(1, 500, (n, 1)).astype(np.float32),
            "age_days": rng.uniform(0, 900, (n, 1)).astype(np.float32),
            "n_items": rng.integers(1, 9, (n, 1)).astype(np.int64),
        }
        label, probabilities = ort.InferenceSession(str(model)).run(None, tensors)
        for answer in infer_both(served, "purchases", tensors):
            np.testing.assert_array_equal(answer["label"], label)
            np.testing.assert_array_equal(answer["fraud"], probabilities[:, 1])
    finally:
        served.close()
