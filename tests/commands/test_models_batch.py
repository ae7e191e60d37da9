"""Batch work on one model of several, without a broker: `--model NAME` on score (and every
command that scores), a job spec's ``model`` carried to the worker and checked at submit, and
`streamer check` listing every model and refusing a bad one on its own key."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pyarrow.parquet as pq
import pytest

from streamer.cli import main
from streamer.cli_jobs import JobRunner, job_config
from streamer.commands import check
from streamer.commands.jobs import status_lines
from streamer.config import Config, model_entries
from streamer.config_file import load_config, model_names
from streamer.errors import ConfigError
from streamer.jobs.spec import parse_spec
from streamer.jobs.states import JobStatus
from tests.jobs.support import ROOT, events_file, jobs_config

ENCODER = ROOT / "models" / "fraud_encoder.onnx"  # another model of the same contract: other scores
NOWHERE = "127.0.0.1:1"  # no broker: none of these reaches for one

pytestmark = pytest.mark.usefixtures("own_signals")  # the commands take SIGTERM and SIGINT for their stop


def models_config(folder: Path, bootstrap: str = NOWHERE, run: str | None = None, acme: Path = ENCODER) -> Path:
    """jobs_config's (its model fraud_mlp, version 1, the default) with a second model, acme
    (the encoder, version 7)."""
    path = jobs_config(folder, bootstrap, run=run)
    path.write_text(path.read_text() + f'models:\n  named:\n    acme:\n      model: {{path: "{acme}", version: "7", '
                                       'providers: [cpu]}\n')
    return path


def offline(model: Path, features: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, {"features": features})[0], np.float32)


def scored(folder: Path) -> tuple[dict[str, list[float]], set[tuple[str, str]]]:
    """A Parquet target's scores by event id, and its (model_name, model_version) pairs."""
    rows = pq.read_table(folder, columns=["event_id", "scores", "model_name", "model_version"]).to_pylist()
    return ({r["event_id"]: r["scores"] for r in rows},
            {(r["model_name"], r["model_version"]) for r in rows})


def features_of(source: Path) -> tuple[list[str], np.ndarray]:
    table = pq.read_table(source)
    return table.column("event_id").to_pylist(), np.array(table.column("features").to_pylist(), np.float32)


def test_score_with_model_writes_that_models_predictions_and_its_version(tmp_path: Path) -> None:
    config = models_config(tmp_path)
    source = events_file(tmp_path / "events.parquet", 200)
    ids, x = features_of(source)
    for flags, model, named in (
            (["--model", "acme"], ENCODER, ("acme", "7")),
            ([], ROOT / "models" / "fraud_mlp.onnx", ("fraud_mlp", "1"))):  # no --model: the default model
        out = tmp_path / f"out-{named[0]}"
        assert main(["score", "--config", str(config), *flags, "--from", str(source), "--to-parquet", str(out)]) == 0
        scores, models = scored(out)
        assert models == {named}
        np.testing.assert_array_equal(np.array([scores[i] for i in ids], np.float32), offline(model, x))


@pytest.mark.parametrize("command", [
    ["score", "--from", "events.parquet", "--to-parquet", "out"],
    ["score", "--engine", "ray", "--from", "events.parquet", "--to-parquet", "out"],
    ["replay", "--from", "earliest"],
    ["replay", "--from", "earliest", "--to-table", "scores"],
    ["evaluate", "--candidate", "c.onnx", "--from", "earliest"],
    ["schema"],
    ["tail"],
])
def test_an_unknown_model_exits_2_naming_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    command: list[str]) -> None:
    config = models_config(tmp_path)
    if "ray" in command:
        pytest.importorskip("ray")
    if command[0] == "evaluate":
        pytest.importorskip("sklearn")
    assert main([command[0], "--config", str(config), "--model", "nope", *command[1:]]) == 2
    assert capsys.readouterr().err.strip() == (
        "streamer: flag --model: no model 'nope'; the models are acme, fraud_mlp")


def test_optimize_calibrates_with_the_named_models_contract(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("onnx")
    config = models_config(tmp_path)
    head = ["model", "optimize", str(ENCODER), "--out", str(tmp_path / "o.onnx"), "--config", str(config)]
    assert main([*head, "--model", "nope", "--calibrate-from", "earliest..latest"]) == 2
    assert capsys.readouterr().err.strip() == "streamer: flag --model: no model 'nope'; the models are acme, fraud_mlp"
    assert main([*head, "--model", "acme"]) == 2
    assert "give --calibrate-from too" in capsys.readouterr().err


def test_spark_main_takes_the_model_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("pyspark")
    from streamer.engines import spark_main

    config = models_config(tmp_path)
    code = spark_main.main(["--config", str(config), "--model", "nope", "--from", "events.parquet",
                            "--to-parquet", str(tmp_path / "out"), "--run-id", "s1"])
    assert code == 2 and "flag --model: no model 'nope'" in capsys.readouterr().err


def test_a_job_spec_names_its_model_and_the_worker_scores_with_it(tmp_path: Path) -> None:
    config = models_config(tmp_path)
    source = events_file(tmp_path / "events.parquet", 200)
    ids, x = features_of(source)
    raw = {"model": "acme", "source": {"parquet": str(source)}, "target": {"parquet": str(tmp_path / "out")}}
    spec = parse_spec(raw)
    status = JobStatus.queued("job-acme", spec.with_id("job-acme"), now_ms=1000)  # as submit queues it
    assert status.job.model == "acme"  # the spec as the worker reads it from the queue
    assert "model acme" in status_lines(status)
    done = JobRunner(str(config)).run("job-acme", status.job, threading.Event(), lambda rows, total: None)
    assert (done.done.predictions, done.done.rejects) == (200, 0)
    scores, models = scored(tmp_path / "out")
    assert models == {("acme", "7")}
    np.testing.assert_array_equal(np.array([scores[i] for i in ids], np.float32), offline(ENCODER, x))
    with pytest.raises(ConfigError) as unknown:  # the config changed since the submit: the job fails, named
        JobRunner(str(config)).run("job-2", parse_spec({**raw, "model": "gone"}), threading.Event(),
                                   lambda rows, total: None)
    assert unknown.value.key == "job.model"


@pytest.mark.parametrize(("action", "spec_text"), [
    (["submit"], "source: {parquet: events/}"),
    (["watch", "--once"], "name: nightly\ntrigger: {folder: events/}"),
])
def test_a_job_spec_with_an_unknown_model_is_refused_at_submit(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               action: list[str], spec_text: str) -> None:
    config = models_config(tmp_path)
    spec = tmp_path / "job.yaml"
    spec.write_text(f"model: nope\n{spec_text}\ntarget: {{table: scores}}\n")
    assert main(["jobs", action[0], "--config", str(config), str(spec), *action[1:]]) == 2  # before the queue
    assert capsys.readouterr().err.strip() == (
        "streamer: config key 'job.model': no model 'nope'; the models are acme, fraud_mlp")


def test_model_names_are_read_without_loading_the_models(tmp_path: Path) -> None:
    config = models_config(tmp_path, acme=tmp_path / "not-here.onnx")  # submit runs where the files are not
    assert model_names(config) == {"acme", "fraud_mlp"}
    repo = tmp_path / "repo"
    (repo / "globex").mkdir(parents=True)
    (repo / "globex" / "model.yaml").write_text("model: {version: '1'}\n")
    config.write_text(config.read_text() + f"  repository: {repo}\n")
    assert model_names(config) == {"acme", "fraud_mlp", "globex"}
    config.write_text(config.read_text().replace(str(repo), str(tmp_path / "elsewhere")))
    assert model_names(config) is None  # the repository is the worker's: it checks the name


def test_check_lists_every_model_and_refuses_a_bad_one_on_its_key(tmp_path: Path) -> None:
    cfg = load_config(models_config(tmp_path))
    lines = [f.line() for f in check._models(cfg)]
    assert lines == [
        "ok    model.path: model 'fraud_mlp' (the default): fraud_mlp.onnx serves version 1; predictions carry "
        + lines[0].split("predictions carry ")[1],
        "ok    models.named.acme.model.path: model 'acme': fraud_encoder.onnx serves version 7; predictions carry "
        + lines[1].split("predictions carry ")[1]]
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    findings = check._models(load_config(models_config(tmp_path, acme=bad)))
    assert [(f.key, f.ok) for f in findings] == [("model.path", True), ("models.named.acme.model.path", False)]
    assert findings[1].detail.startswith("model 'acme': ")


def routed_config(folder: Path) -> Path:
    config = models_config(folder)
    config.write_text(config.read_text() + "route:\n  field: tenant\n  map: {a: acme}\n")
    return config


def test_a_replay_of_a_routed_config_routes_to_a_topic_and_names_its_model_into_the_lake(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from streamer.commands import replay

    config = routed_config(tmp_path)
    ran: list[Config] = []

    def run_replay(cfg: Config, *_: object, **__: object) -> None:
        ran.append(cfg)
        raise ConfigError("--from", "planned")  # where the replay would first reach the broker

    monkeypatch.setattr(replay, "run_replay", run_replay)
    assert main(["replay", "--config", str(config), "--from", "earliest"]) == 2
    assert ran[-1].route.field == "tenant" and set(model_entries(ran[-1])) == {"acme", "fraud_mlp"}  # every model
    assert main(["replay", "--config", str(config), "--model", "acme", "--from", "earliest"]) == 2
    assert ran[-1].route.field is None and ran[-1].model.name == "acme"
    capsys.readouterr()
    for flags, says in ((["--to-table", "scores"], "flag --model: a replay into the lake scores with one model"),
                        (["--model-file", str(ENCODER)], "flag --model-file: is one model's: name it with --model")):
        assert main(["replay", "--config", str(config), "--from", "earliest", *flags]) == 2
        assert capsys.readouterr().err.startswith(f"streamer: {says}")


def test_a_job_of_a_routed_config_without_a_model(tmp_path: Path) -> None:
    cfg = load_config(routed_config(tmp_path))
    topic = parse_spec({"source": {"topic": {"from": "earliest"}}, "target": {"topic": "backfill"}})
    assert job_config(cfg, topic) is cfg  # a replay to a topic routes as the stream does
    lake = parse_spec({"source": {"topic": {"from": "earliest"}}, "target": {"table": "scores"}})
    with pytest.raises(ConfigError) as refused:
        job_config(cfg, lake)
    assert refused.value.key == "job.model"
    files = parse_spec({"source": {"parquet": "events/"}, "target": {"table": "scores"}})
    assert job_config(cfg, files).model.name == "fraud_mlp"  # rows of files: the default model


def test_the_jobs_api_refuses_a_spec_with_an_unknown_model(tmp_path: Path) -> None:
    pytest.importorskip("starlette")
    from starlette.applications import Starlette
    from starlette.testclient import TestClient

    from streamer.config import Secret
    from streamer.online.jobs_http import JobsApi

    cfg = load_config(models_config(tmp_path))
    api = JobsApi(replace(cfg, jobs=replace(cfg.jobs, api_token=Secret("t"))), contract=None)  # type: ignore[arg-type]
    with TestClient(Starlette(routes=api.routes())) as client:  # refused before the queue is reached
        answer = client.post("/v1/jobs", headers={"authorization": "Bearer t"},
                             json={"model": "nope", "source": {"parquet": "events/"}, "target": {"table": "s"}})
    assert answer.status_code == 422
    assert answer.json() == {"error": "config key 'job.model': no model 'nope'; the models are acme, fraud_mlp",
                             "field": "job.model"}


def test_check_looks_for_each_routed_models_topic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    config = routed_config(tmp_path)
    config.write_text(config.read_text().replace("output:\n", "output:\n  topic_per_model: true\n", 1))
    cfg = load_config(config)
    out = cfg.output.topic
    listing = SimpleNamespace(topics={t: SimpleNamespace(error=None, partitions={0: None})
                                      for t in (*cfg.input.topics, f"{out}.acme")})
    monkeypatch.setattr(check, "make_admin", lambda cfg: SimpleNamespace(list_topics=lambda timeout: listing))
    found = [(f.key, f.ok, f.detail.split(",")[0]) for f in check._kafka(cfg, 1.0) if f.key.startswith("output.")]
    assert found == [("output.topic_per_model", False, f"topic '{out}.fraud_mlp' does not exist on {NOWHERE} "
                                                       "(`streamer topics create` creates it)"),  # the default
                     ("output.topic_per_model", True, f"topic '{out}.acme'")]  # and the route's models
