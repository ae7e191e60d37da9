"""`streamer evaluate` on a real broker: a champion against candidates on a replayed range, its
outputs side by side, the outcomes joined, the report written and the gate judged."""

from __future__ import annotations

import importlib.util
import json
import re
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from sklearn.metrics import roc_auc_score

from streamer.cli import main
from streamer.commands.demo import produce_events
from streamer.commands.evaluate import evaluate
from streamer.config import Config, LakeConfig
from streamer.config_check import Location
from streamer.errors import EXIT_GATE, BrokerError
from streamer.evaluate.labels import LabelsFrom
from streamer.formats.json_events import JsonCodec
from streamer.kafka.ranges import When, parse_when
from streamer.kafka.topics import create
from streamer.wiring.evaluate import Evaluation, Outputs
from tests.conftest import ROOT, Topics, make_config, read_all
from tests.integration.test_converters_kafka import contract_config

N = 1500
OUTPUTS = {"label": "label", "score": {"output": "probabilities", "column": 1}}
EARLIEST, LATEST = When("earliest"), When("latest")


@pytest.fixture(scope="module")
def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_eval_models", ROOT / "models" / "build_eval_models.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def models(script: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return dict(script.write_models(tmp_path_factory.mktemp("eval-models")))


def labeled_events(script: ModuleType, n: int) -> tuple[list[dict[str, Any]], np.ndarray]:
    """``n`` JSON events an hour apart, each with its outcome in ``label``; and their features."""
    x = np.random.default_rng(11).normal(size=(n, 32)).astype(np.float32)
    y = script.outcomes(x, 12)
    start = 1_764_547_200_000  # 2025-12-01T00:00:00Z
    events = [{"event_id": f"evt-{i}", "entity_id": f"acct-{i % 97}", "event_time": start + i * 60_000,
               "features": x[i].tolist(), "label": int(y[i])} for i in range(n)]
    return events, x


def labeled_config(bootstrap: str, topics: Topics, champion: Path, tmp_path: Path) -> Config:
    cfg = contract_config(bootstrap, topics, champion, outputs=OUTPUTS, fmt="json", max_size=128)
    return replace(cfg, lake=LakeConfig(warehouse=Location(str(tmp_path / "lake"))))


def offline(model: Path, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(str(model)).run(["probabilities"], {"features": x})[0][:, 1]


def report(result: Any) -> dict[str, Any]:
    return dict(json.loads(Path(result.json).read_text()))


@pytest.mark.kafka
def test_a_shuffled_candidate_fails_the_gate_on_auc_and_a_retrained_one_passes(
        bootstrap: str, topics: Topics, models: dict[str, Path], script: ModuleType, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    events, x = labeled_events(script, N)
    produce_events(bootstrap, topics.input, ((e["entity_id"].encode(), JsonCodec().encode(e)) for e in events))
    cfg = labeled_config(bootstrap, topics, models["champion"], tmp_path)
    gate = "auc_delta>=-0.01,agreement>=0.9"

    shuffled = evaluate(cfg, Evaluation(models["shuffled"], EARLIEST, LATEST, tmp_path / "shuffled",
                                        labels="label", require=gate))
    assert shuffled.exit_code == EXIT_GATE == 5
    failed = [line for line in shuffled.lines if line.startswith("FAILED")]
    assert failed and re.search(r"auc_delta = -0\.[1-5]\d* fails auc_delta >= -0\.01", failed[0]), shuffled.lines
    got = report(shuffled)
    assert got["metrics"]["events"] == N and got["metrics"]["labeled"] == N
    expected = {side: roc_auc_score([e["label"] for e in events], offline(models[side], x))
                for side in ("champion", "shuffled")}
    assert got["metrics"]["champion_auc"] == pytest.approx(expected["champion"], abs=1e-6)
    assert got["metrics"]["candidate_auc"] == pytest.approx(expected["shuffled"], abs=1e-6)
    assert got["metrics"]["auc_delta_high"] < 0  # the bootstrap interval excludes no difference

    retrained = evaluate(cfg, Evaluation(models["retrained"], EARLIEST, LATEST, tmp_path / "retrained",
                                         labels="label", require=gate))
    assert retrained.exit_code == 0, retrained.lines
    assert not [line for line in retrained.lines if line.startswith("FAILED")]
    assert report(retrained)["metrics"]["agreement"] > 0.9

    # The same through the command line; too few events fail the gate with that reason.
    cli = main(["evaluate", "--config", str(_yaml(cfg, tmp_path)), "--candidate", str(models["retrained"]),
                "--from", "0:0", "--to", "0:30", "--labels", "label", "--require", gate,
                "--report", str(tmp_path / "few")])
    out = capsys.readouterr().out
    assert cli == EXIT_GATE
    assert re.search(r"FAILED auc_delta cannot be computed: \d+ events compared, fewer than the 100", out), out


@pytest.mark.kafka
def test_labels_for_60_percent_of_events_report_n_60_percent_and_sides_go_to_a_topic(
        bootstrap: str, topics: Topics, models: dict[str, Path], script: ModuleType, tmp_path: Path) -> None:
    events, x = labeled_events(script, N)
    for e in events:
        e.pop("label")
    produce_events(bootstrap, topics.input, ((e["entity_id"].encode(), JsonCodec().encode(e)) for e in events))
    y = script.outcomes(x, 12)
    known = np.sort(np.random.default_rng(3).choice(N, size=int(N * 0.6), replace=False))
    labels = tmp_path / "labels.csv"  # outcomes arrive later, keyed by the event's id
    labels.write_text("event_id,label,label_time\n" + "".join(
        f"evt-{i},{y[i]},2025-12-20T00:00:00Z\n" for i in known))
    cfg = labeled_config(bootstrap, topics, models["champion"], tmp_path)
    cfg = replace(cfg, output=replace(cfg.output, format="json"))  # the side-by-side records as JSON
    side = f"{topics.output}.evaluation"

    result = evaluate(cfg, Evaluation(models["retrained"], EARLIEST, LATEST, tmp_path / "report",
                                      labels_from=LabelsFrom(str(labels)), outputs=Outputs(topic=side)))
    m = report(result)["metrics"]
    assert m["events"] == N and m["labeled"] == len(known) and m["labeled_fraction"] == pytest.approx(0.6)
    assert m["champion_auc"] == pytest.approx(roc_auc_score(y[known], offline(models["champion"], x[known])), abs=1e-6)

    rows = [json.loads(msg.value()) for msg in read_all(bootstrap, side)]
    assert len(rows) == N
    by_id = {r["event_id"]: r for r in rows}
    champion, candidate = offline(models["champion"], x), offline(models["retrained"], x)
    for i in (0, 1, N // 2, N - 1):
        row = by_id[f"evt-{i}"]
        assert row["champion_score"] == pytest.approx(float(champion[i]), abs=1e-6)
        assert row["candidate_score"] == pytest.approx(float(candidate[i]), abs=1e-6)
        assert {row["champion_model_version"], row["candidate_model_version"]} == {"1", "retrained"}
        assert row["champion_label"] == int(champion[i] >= 0.5) and row["candidate_label"] == int(candidate[i] >= 0.5)

    html = Path(result.html).read_text()
    assert "<script" not in html and "<link" not in html and not re.search(r"https?://", html)
    assert len(re.findall(r'<img [^>]*src="data:image/png;base64,[A-Za-z0-9+/=]{100,}"', html)) >= 5


@pytest.mark.kafka
def test_side_by_side_records_the_topic_refuses_fail_the_run_naming_them(
        bootstrap: str, topics: Topics, models: dict[str, Path], script: ModuleType, tmp_path: Path) -> None:
    """A side-by-side topic whose max.message.bytes no record fits: the broker refuses each record,
    and the evaluation fails naming them (BrokerError, exit 3), rather than reporting on a topic
    that lost them."""
    from confluent_kafka.admin import AdminClient

    events, _ = labeled_events(script, 300)
    produce_events(bootstrap, topics.input, ((e["entity_id"].encode(), JsonCodec().encode(e)) for e in events))
    side = f"{topics.output}.evaluation-small"
    create(AdminClient({"bootstrap.servers": bootstrap}), {side: 1}, replication_factor=1,
           config={"max.message.bytes": "100"})
    cfg = labeled_config(bootstrap, topics, models["champion"], tmp_path)
    with pytest.raises(BrokerError) as caught:
        evaluate(cfg, Evaluation(models["retrained"], EARLIEST, LATEST, tmp_path / "report",
                                 outputs=Outputs(topic=side)))
    message = str(caught.value)
    assert re.search(rf"topic {re.escape(side)}: of \d+ records sent, [1-9]\d* were refused by the broker for "
                     r"good \(too large, invalid\)", message), message
    assert re.search(rf"event evt-\d+ \({re.escape(topics.input)}\[\d\] offset \d+\): Broker: Message size too "
                     r"large", message), message
    assert read_all(bootstrap, side, timeout_s=10.0) == []


@pytest.mark.kafka
def test_the_int8_heavy_model_agrees_with_fp32_within_the_gate(bootstrap: str, topics: Topics, tmp_path: Path) -> None:
    from streamer.model.optimize import optimize
    from tests.integration.test_replay_kafka import produce_stamped
    from tests.lake.test_replay_lake_kafka import recent
    from tests.support.duck import connect

    heavy = ROOT / "models" / "fraud_encoder.onnx"
    int8 = optimize(heavy, tmp_path / "int8.onnx", int8=True).out
    cfg = replace(make_config(bootstrap, topics), lake=LakeConfig(warehouse=Location(str(tmp_path / "lake"))))
    cfg = replace(cfg, model=replace(cfg.model, path=heavy))
    produce_stamped(bootstrap, cfg, topics.input, 0, 2000, base_ms=recent(2000, 1000))
    result = evaluate(cfg, Evaluation(int8, parse_when("earliest", "--from"), LATEST, tmp_path / "int8",
                                      candidate_version="int8", require="agreement>=0.97,p99_abs_delta<=0.02",
                                      outputs=Outputs(table="int8_vs_fp32")))
    assert result.exit_code == 0, result.lines
    got = report(result)
    assert got["metrics"]["events"] == 2000 and got["metrics"]["p99_abs_delta"] <= 0.02
    assert "auc_delta" in got["missing"] and "no outcomes" in got["missing"]["auc_delta"]
    assert got["metrics"]["champion_events_per_s"] > 0 and got["metrics"]["candidate_events_per_s"] > 0

    table = tmp_path / "lake"
    metadata = sorted(table.glob("**/int8_vs_fp32/metadata/*.metadata.json"))[-1]
    with connect() as duck:
        n, worst = duck.execute(
            f"SELECT count(*), max(abs(champion_scores[1] - candidate_scores[1])) FROM iceberg_scan('{metadata}')"
        ).fetchone()
    assert n == 2000 and worst == pytest.approx(got["metrics"]["max_abs_delta"], abs=1e-6)


def test_a_candidate_that_cannot_serve_the_config_is_refused_at_start(tmp_path: Path, models: dict[str, Path],
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    example = ROOT / "deploy" / "config" / "example.yaml"
    args = ["evaluate", "--config", str(example), "--from", "earliest", "--report", str(tmp_path / "r")]
    assert main([*args, "--candidate", str(tmp_path / "missing.onnx")]) == 2
    assert "flag --candidate: no model file" in capsys.readouterr().err
    # champion.onnx has two outputs and the example config maps none: it cannot serve it
    assert main([*args, "--candidate", str(models["champion"])]) == 2
    assert "candidate" in capsys.readouterr().err
    assert main([*args, "--candidate", str(models["champion"]), "--require", "auc>=1"]) == 2
    assert "flag --require:" in capsys.readouterr().err


def _yaml(cfg: Config, tmp_path: Path) -> Path:
    """``cfg`` as a config file (the command line reads one)."""
    import yaml

    from tests.integration.test_converters_kafka import contract_config  # noqa: F401 - documents the origin

    doc = {
        "kafka": {"bootstrap.servers": cfg.kafka["bootstrap.servers"]},
        "input": {"topics": list(cfg.input.topics), "group_id": cfg.input.group_id, "format": "json",
                  "features_field": "features"},
        "model": {"path": str(cfg.model.path), "name": cfg.model.name, "version": cfg.model.version,
                  "outputs": OUTPUTS},
        "batching": {"max_size": cfg.batching.max_size, "max_wait_ms": 20},
        "output": {"topic": cfg.output.topic},
        "lake": {"warehouse": str(tmp_path / "lake")},
    }
    path = tmp_path / "evaluate.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.kafka
def test_labels_from_joined_on_entity_id_label_each_entitys_events_up_to_its_outcome(
        bootstrap: str, topics: Topics, models: dict[str, Path], script: ModuleType, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Outcomes keyed by account, each at a time: an event takes its account's outcome when the
    event came at or before it; the other events, and those of accounts without one, stay unlabeled."""
    events, x = labeled_events(script, N)
    for e in events:
        e.pop("label")
    produce_events(bootstrap, topics.input, ((e["entity_id"].encode(), JsonCodec().encode(e)) for e in events))
    rng = np.random.default_rng(21)
    accounts = {f"acct-{k}": int(rng.integers(0, 2)) for k in rng.choice(97, size=60, replace=False).tolist()}
    at_ms = events[1000]["event_time"]  # 2025-12-01T16:40:00Z: the events after it come after the outcome
    labels = tmp_path / "churn.csv"
    labels.write_text("entity_id,label,label_time\n" + "".join(f"{a},{y},2025-12-01T16:40:00Z\n"
                                                               for a, y in accounts.items()))
    known = [i for i, e in enumerate(events) if e["entity_id"] in accounts and e["event_time"] <= at_ms]
    y = np.array([accounts[events[i]["entity_id"]] for i in known])
    cfg = labeled_config(bootstrap, topics, models["champion"], tmp_path)

    code = main(["evaluate", "--config", str(_yaml(cfg, tmp_path)), "--candidate", str(models["retrained"]),
                 "--from", "earliest", "--labels-from", str(labels), "--labels-key", "entity_id",
                 "--bootstrap", "20", "--report", str(tmp_path / "report")])
    assert code == 0, capsys.readouterr()
    m = json.loads((tmp_path / "report" / "report.json").read_text())["metrics"]
    assert m["events"] == N and m["labeled"] == len(known) and 0 < len(known) < N
    assert m["champion_auc"] == pytest.approx(roc_auc_score(y, offline(models["champion"], x[known])), abs=1e-6)
