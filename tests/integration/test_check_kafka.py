"""`streamer check` (commands/check.py): the dry run names each problem with its key and exits 2,
or says the config is ready and exits 0, against the real broker and a real Schema Registry;
nothing is consumed, produced or registered."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from streamer.cli import main as cli
from streamer.config import Config
from streamer.formats.configured import input_codec
from streamer.kafka.topics import create_topics
from streamer.wiring.stream import build_processor
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


def test_topics_create_makes_the_configs_topics_and_a_second_run_finds_them(
        bootstrap: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = uuid.uuid4().hex[:8]
    fresh = Topics(f"in-{run}", f"out-{run}", f"in-{run}.dlq", f"g-{run}")
    path = write(tmp_path, bootstrap, fresh)
    assert cli(["topics", "create", "--config", path, "--partitions", "2", "--retention-ms", "3600000"]) == 0
    first = capsys.readouterr().out.splitlines()
    assert first == [f"created  {fresh.input} (input.topics[0]): 2 partitions, replication 1",
                     f"created  {fresh.output} (output.topic): 2 partitions, replication 1",
                     f"created  {fresh.dlq} (processing.dead_letter_topic): 2 partitions, replication 1"]
    assert cli(["topics", "create", "--config", path]) == 0
    second = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in second] == ["exists"] * 3 and all("2 partitions" in x for x in second)


def test_run_waits_unhealthy_for_a_missing_output_topic_then_scores(
        bootstrap: str, topics: Topics, tmp_path: Path) -> None:
    from confluent_kafka.admin import AdminClient

    from streamer.config_file import load_config

    missing = f"{topics.output}-later"
    path = write(tmp_path, bootstrap, topics, output={"topic": missing},
                 metrics={"enabled": True, "port": 0, "host": "127.0.0.1"})
    cfg = load_config(path)
    processor = build_processor(cfg)
    assert processor.http is not None
    healthz = f"http://127.0.0.1:{processor.http.port}/healthz"
    thread = threading.Thread(target=processor.run, daemon=True)
    thread.start()
    try:
        code, body = await_health(healthz, lambda c, b: c == 503 and missing in b)
        assert f"topic {missing!r} (output.topic) does not exist on {bootstrap}" in body
        assert missing not in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
        create_topics(bootstrap, {missing: 1})
        produce_events(cfg, topics.input, 5)
        await_health(healthz, lambda c, b: c == 200, timeout_s=60)
        deadline = time.monotonic() + 60
        while processor.stats.outputs < 5 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert processor.stats.outputs == 5
        assert sum(end_offsets(bootstrap, missing).values()) == 5
    finally:
        processor.stop()
        thread.join(60)
    assert not thread.is_alive()


def await_health(url: str, ok: Callable[[int, str], bool], timeout_s: float = 30.0) -> tuple[int, str]:
    deadline, last = time.monotonic() + timeout_s, (0, "")
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                last = (answer.status, answer.read().decode())
        except urllib.error.HTTPError as exc:
            last = (exc.code, exc.read().decode())
        except OSError:
            pass
        if ok(*last):
            return last
        time.sleep(0.1)
    raise AssertionError(f"{url} answered {last} for {timeout_s:.0f} s")


def produce_events(cfg: Config, topic: str, n: int) -> None:
    from streamer.commands import demo

    codec = input_codec(cfg.input)
    events = [(str(i).encode(), codec.encode(e)) for i, e in enumerate(demo.synthetic_events(n, 32))]
    assert demo.produce_events(str(cfg.kafka["bootstrap.servers"]), topic, events) == n
