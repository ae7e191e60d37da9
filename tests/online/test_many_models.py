"""Several models online, with tritonclient: each model of the repository answers at its own path
over HTTP and gRPC as ONNX Runtime does offline, an unknown one is 404 naming it, one model's
breaker or hot reload leaves the others as they were, the repository extension loads and unloads
behind the jobs token, and 20 models answer within ``models.max_loaded`` 5."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx.helper as oh
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from streamer.config import Config
from streamer.config_file import config_from_dict
from streamer.model.onnx_file import file_digest
from streamer.online.server import OnlineServer
from streamer.wiring.online import online_server
from tests.conftest import ROOT
from tests.online.doubler import TIMEOUT_S, free_port, run

MLP = ROOT / "models" / "fraud_mlp.onnx"
TOKEN = "s3cret"
F, I64 = onnx.TensorProto.FLOAT, onnx.TensorProto.INT64


def linear(path: Path, width: int, seed: int) -> Path:
    """A model of one input ``x`` float32 [N, width] and one output ``y`` [N, 1] = x @ w + b, its
    weights drawn from ``seed`` (so each model answers its own numbers), written atomically."""
    rng = np.random.default_rng(seed)
    w = oh.make_tensor("w", F, [width, 1], rng.normal(size=width).astype(np.float32).tolist())
    b = oh.make_tensor("b", F, [1], [float(seed)])
    graph = oh.make_graph([oh.make_node("MatMul", ["x", "w"], ["xw"]), oh.make_node("Add", ["xw", "b"], ["y"])],
                          f"linear{seed}", [oh.make_tensor_value_info("x", F, [None, width])],
                          [oh.make_tensor_value_info("y", F, [None, 1])], initializer=[w, b])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    staged = path.with_suffix(".next")
    onnx.save(model, staged)
    os.replace(staged, path)
    return path


def two_inputs(path: Path) -> Path:
    """A model of two inputs, ``amount`` float32 [N, 1] and ``n_items`` int64 [N, 1]: y = amount + n_items."""
    graph = oh.make_graph(
        [oh.make_node("Cast", ["n_items"], ["n"], to=F), oh.make_node("Add", ["amount", "n"], ["y"])], "tiny",
        [oh.make_tensor_value_info("amount", F, [None, 1]), oh.make_tensor_value_info("n_items", I64, [None, 1])],
        [oh.make_tensor_value_info("y", F, [None, 1])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def config(**sections: Any) -> Config:
    return config_from_dict({"kafka": {"bootstrap.servers": "127.0.0.1:1"},
                             "input": {"topics": ["in"], "group_id": "g", "format": "json"},
                             "output": {"topic": "out"},
                             "online": {"http_port": free_port(), "grpc_port": free_port(), "max_wait_ms": 1,
                                        "timeout_ms": 5000},
                             **sections})


@contextmanager
def serving(cfg: Config) -> Iterator[OnlineServer]:
    """``streamer serve``'s server of ``cfg`` in a thread, ready; stopped after."""
    server = online_server(cfg)
    try:
        with run(server):
            yield server
    finally:
        server.serving.close(0.0)


def http(cfg: Config) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(f"127.0.0.1:{cfg.online.http_port}", connection_timeout=TIMEOUT_S,
                                            network_timeout=TIMEOUT_S)


def tensors(module: Any, arrays: dict[str, np.ndarray]) -> list[Any]:
    out = []
    for name, array in arrays.items():
        given = module.InferInput(name, list(array.shape), "FP32" if array.dtype == np.float32 else "INT64")
        given.set_data_from_numpy(array)
        out.append(given)
    return out


def offline(path: Path, arrays: dict[str, np.ndarray]) -> np.ndarray:
    return np.asarray(ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, arrays)[0])


@pytest.fixture
def three(tmp_path: Path) -> Config:
    return config(**three_models(tmp_path))


def three_models(tmp_path: Path) -> dict[str, Any]:
    """Three models of different contracts: the default (32 features), acme (two named inputs, a
    constant fallback) and small (4 features, reloaded every 100 ms)."""
    return dict(model={"path": str(MLP), "name": "general", "version": "1"},
                  models={"named": {
                      "acme": {"model": {"path": str(two_inputs(tmp_path / "acme.onnx")), "version": "2",
                                         "inputs": {"amount": "amount", "n_items": "n_items"},
                                         "fallback_scores": [-1.0]}},
                      "small": {"model": {"path": str(linear(tmp_path / "small.onnx", 4, 1)), "version": "3",
                                          "reload_check_ms": 100}}}})


def test_three_models_each_answer_at_their_own_path_as_onnx_runtime_does(three: Config, tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    asked = {"general": {"features": rng.normal(size=(3, 32)).astype(np.float32)},
             "acme": {"amount": rng.normal(size=(3, 1)).astype(np.float32),
                      "n_items": rng.integers(0, 9, size=(3, 1)).astype(np.int64)},
             "small": {"x": rng.normal(size=(3, 4)).astype(np.float32)}}
    files = {"general": MLP, "acme": tmp_path / "acme.onnx", "small": tmp_path / "small.onnx"}
    with serving(three) as server:
        c = http(three)
        g = grpcclient.InferenceServerClient(f"127.0.0.1:{three.online.grpc_port}")
        for name, arrays in asked.items():
            want = offline(files[name], arrays)
            got = c.infer(name, tensors(httpclient, arrays)).as_numpy("scores")
            np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-6)
            over_grpc = g.infer(name, tensors(grpcclient, arrays), client_timeout=TIMEOUT_S).as_numpy("scores")
            np.testing.assert_allclose(over_grpc.reshape(want.shape), want, rtol=1e-6)
            assert c.is_model_ready(name) and g.is_model_ready(name, client_timeout=TIMEOUT_S)
            assert [i["name"] for i in c.get_model_metadata(name)["inputs"]] == sorted(arrays)
        assert "model_repository" in c.get_server_metadata()["extensions"]
        with pytest.raises(InferenceServerException, match="unknown model 'nope': the models are acme, general, "
                                                           "small") as refused:
            c.infer("nope", tensors(httpclient, asked["small"]))
        assert refused.value.status() == "404"
        with pytest.raises(InferenceServerException, match="unknown model 'nope'") as refused:
            g.infer("nope", tensors(grpcclient, asked["small"]), client_timeout=TIMEOUT_S)
        assert refused.value.status() == "StatusCode.NOT_FOUND"
        with pytest.raises(InferenceServerException) as off:  # the repository extension: off without the token
            c.get_model_repository_index()
        assert off.value.status() == "404"
        check_safeguards_per_model(server, asked, tmp_path)


def check_safeguards_per_model(server: OnlineServer, asked: dict[str, dict[str, np.ndarray]], tmp_path: Path) -> None:
    """acme's breaker open: acme answers its fallback, degraded; small's file replaced: small
    answers the new model; general answers as it did through both."""
    c = http(server.cfg)

    def answer(name: str) -> tuple[np.ndarray, dict[str, Any]]:
        result = c.infer(name, tensors(httpclient, asked[name]))
        return result.as_numpy("scores"), result.get_response()["parameters"]

    general, params = answer("general")
    assert not params["degraded"]
    server.lanes.lane("acme").loaded.model.serving.breaker.failed("acme fails in this test", at_once=True)
    scores, params = answer("acme")
    assert params["degraded"] and np.all(scores == -1.0), (scores, params)
    again, params = answer("general")
    assert not params["degraded"] and np.array_equal(again, general)
    replaced = linear(tmp_path / "small.onnx", 4, 2)
    deadline = time.monotonic() + 30
    while (got := answer("small"))[1]["model_digest"] != file_digest(replaced):  # each answer is a request: no sleep
        assert time.monotonic() < deadline, got
    want = offline(replaced, asked["small"])
    np.testing.assert_allclose(got[0].reshape(want.shape), want, rtol=1e-6)
    last, params = answer("general")
    assert np.array_equal(last, general) and params["model_digest"] == file_digest(MLP)



def test_the_repository_extension_loads_and_unloads_behind_the_jobs_token(tmp_path: Path) -> None:
    cfg = config(**three_models(tmp_path), jobs={"api_token": TOKEN})
    x = {"x": np.ones((1, 4), np.float32)}
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    with serving(cfg):
        c = http(cfg)
        assert c.get_model_repository_index(headers=bearer) == [
            {"name": name, "version": version, "state": "READY", "reason": ""}
            for name, version in (("acme", "2"), ("general", "1"), ("small", "3"))]
        for headers, status in (({}, "401"), ({"Authorization": "Bearer wrong"}, "403")):
            with pytest.raises(InferenceServerException) as refused:
                c.unload_model("small", headers=headers)
            assert refused.value.status() == status
        assert c.is_model_ready("small")  # refused: nothing unloaded
        c.unload_model("small", headers=bearer)
        assert not c.is_model_ready("small")
        assert {"name": "small", "version": "3", "state": "UNAVAILABLE", "reason": "unloaded"} in \
            c.get_model_repository_index(headers=bearer)
        assert [m["name"] for m in c.get_model_repository_index(headers=bearer)
                if m["state"] == "READY"] == ["acme", "general"]
        with pytest.raises(InferenceServerException, match="model 'small' is unloaded") as refused:
            c.infer("small", tensors(httpclient, x))
        assert refused.value.status() == "503"
        with pytest.raises(InferenceServerException) as refused:
            c.load_model("small")  # no token
        assert refused.value.status() == "401" and not c.is_model_ready("small")
        c.load_model("small", headers=bearer)
        assert c.is_model_ready("small")
        np.testing.assert_allclose(c.infer("small", tensors(httpclient, x)).as_numpy("scores"),
                                   offline(Path(cfg.models.named["small"].model.path), x), rtol=1e-6)
        with pytest.raises(InferenceServerException, match="stays loaded") as refused:
            c.unload_model("general", headers=bearer)
        assert refused.value.status() == "409"
        with pytest.raises(InferenceServerException, match="unknown model 'nope'") as refused:
            c.load_model("nope", headers=bearer)
        assert refused.value.status() == "404"


def test_twenty_models_answer_within_their_deadlines_and_five_in_memory(tmp_path: Path) -> None:
    """A repository of 20 models with ``max_loaded`` 5: requests for each, in a shuffled order,
    twice, each answered by its own model within its deadline; never more than 5 loaded; a model
    loads warmed up; the least recently used is the one unloaded."""
    names = [f"m{i:02d}" for i in range(20)]
    for i, name in enumerate(names):
        linear(tmp_path / name / "model.onnx", 4, i)
        (tmp_path / name / "model.yaml").write_text(f'model:\n  path: model.onnx\n  version: "{i}"\n')
    cfg = config(models={"default": "m00", "repository": str(tmp_path), "max_loaded": 5},
                 jobs={"api_token": TOKEN})
    x = {"x": np.random.default_rng(3).normal(size=(2, 4)).astype(np.float32)}
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    with serving(cfg) as server:
        c = http(cfg)

        def ask(name: str) -> list[str]:
            """``name`` answered as it does offline, within the request's 2 s; the models loaded after."""
            got = c.infer(name, tensors(httpclient, x), timeout=2_000_000).as_numpy("scores")
            np.testing.assert_allclose(got, offline(tmp_path / name / "model.onnx", x), rtol=1e-5)
            index = c.get_model_repository_index(headers=bearer)
            loaded = [m["name"] for m in index if m["state"] in ("READY", "LOADING")]
            assert len(loaded) <= 5 and name in loaded, index
            for lane in server.lanes.all_loaded():
                assert lane.model.serving.warmed.is_set(), lane.model.name  # loaded with its warm-up
            return loaded

        for name in ("m01", "m02", "m03", "m04", "m01"):
            ask(name)
        assert ask("m05") == ["m00", "m01", "m03", "m04", "m05"]  # m02 the least recently used, m00 pinned
        order = names * 2
        random.Random(49).shuffle(order)
        for name in order:
            ask(name)
