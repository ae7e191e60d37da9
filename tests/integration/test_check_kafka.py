"""`streamer check` (commands/check.py): the dry run names each problem with its key and exits 2,
or says the config is ready and exits 0, against the real broker and a real Schema Registry;
nothing is consumed, produced or registered."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from streamer.cli import main as cli
from tests.conftest import ROOT, Topics, end_offsets
from tests.support.schema_registry import SchemaRegistry

pytestmark = pytest.mark.kafka


def write(tmp_path: Path, bootstrap: str, topics: Topics, **sections: dict[str, object]) -> str:
    raw = yaml.safe_load((ROOT / "deploy" / "config" / "example.yaml").read_text())
    raw["kafka"]["bootstrap.servers"] = bootstrap
    raw["input"] |= {"topics": [topics.input], "group_id": topics.group,
                     "schema": str(ROOT / "streamer" / "schemas" / "feature_event.avsc")}
    raw["model"]["path"] = str(ROOT / "models" / "fraud_mlp.onnx")
    raw["output"] |= {"topic": topics.output, "schema": str(ROOT / "streamer" / "schemas" / "prediction.avsc")}
    for name, values in sections.items():
        raw[name] = {**raw.get(name, {}), **values}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def test_a_ready_config_passes_and_nothing_is_touched(bootstrap: str, topics: Topics, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["check", "--config", write(tmp_path, bootstrap, topics)]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith("ready to run") and "FAIL" not in out
    assert f"ok    input.topics[0]: topic '{topics.input}', 3 partitions" in out
    assert sum(end_offsets(bootstrap, topics.output).values()) == 0


def test_each_problem_is_named_by_its_key(bootstrap: str, topics: Topics, tmp_path: Path,
                                          schema_registry: SchemaRegistry,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, bootstrap, topics,
                 input={"topics": ["no-such-topic-x"], "format": "avro-confluent",
                        "registry": {"url": "http://127.0.0.1:9/apis/ccompat/v7"}},
                 model={"outputs": {"p": "no_such_output"}},
                 output={"format": "avro-confluent", "registry": {"url": schema_registry.url}})
    assert cli(["check", "--config", path]) == 2
    lines = capsys.readouterr().out.splitlines()
    failed = {line.split()[1].rstrip(":") for line in lines if line.startswith("FAIL")}
    assert failed == {"model.outputs.p", "input.topics[0]", "input.registry.url"}, lines
    assert any(line.startswith("ok    output.registry.url") for line in lines), lines
    assert lines[-1] == "3 problems"


def test_a_cluster_that_does_not_answer_is_named_with_its_address(tmp_path: Path, topics: Topics,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["check", "--config", write(tmp_path, "127.0.0.1:9", topics), "--timeout", "2"]) == 2
    out = capsys.readouterr().out
    assert "FAIL  kafka.bootstrap.servers: no metadata from 127.0.0.1:9 within 2 s" in out


def test_a_missing_input_topic_stops_run_with_exit_2_and_creates_nothing(
        bootstrap: str, topics: Topics, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from confluent_kafka.admin import AdminClient

    typo = f"{topics.input}-typo"
    path = write(tmp_path, bootstrap, topics, input={"topics": [typo]})
    assert cli(["run", "--config", path]) == 2
    assert f"config key 'input.topics[0]': topic '{typo}' does not exist on {bootstrap}" in capsys.readouterr().err
    existing = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
    assert typo not in existing and f"{typo}.dlq" not in existing  # no dead-letter topic for a typo

    from streamer.config_file import load_config
    from streamer.wiring import build_processor

    made = write(tmp_path, bootstrap, topics, input={"topics": [typo], "create_topics": True})
    build_processor(load_config(made))  # creates it, with the broker's default partitions
    assert typo in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
