"""`streamer replay` without a broker: its batching comes from the config, and a bad override is a
config error (exit 2) found before anything connects."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from streamer import cli
from streamer.commands import replay
from streamer.config import Config
from streamer.config_file import load_config

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "deploy" / "config" / "example.yaml"
NOWHERE = "127.0.0.1:9"  # the discard port: nothing listens there


class Planned(Exception):
    """Raised where the replay would first talk to the broker."""


@pytest.fixture
def no_broker(monkeypatch: pytest.MonkeyPatch) -> list[Config]:
    """Every way replay reaches the broker fails the test; planning records the run's config."""
    planned: list[Config] = []

    def plan(cfg: Config, *_: Any) -> None:
        planned.append(cfg)
        raise Planned

    def connect(*_: Any, **__: Any) -> None:
        raise AssertionError("replay reached for the broker")

    monkeypatch.setattr(replay, "_plan", plan)
    monkeypatch.setattr(replay, "Consumer", connect)
    monkeypatch.setattr(replay, "build_processor", connect)
    monkeypatch.setattr(replay.clients, "ensure_topic", connect)
    monkeypatch.setenv("KAFKA_BOOTSTRAP", NOWHERE)
    return planned


@pytest.mark.parametrize(("flags", "message"), [
    (["--batch-size", "1000000"],
     "streamer: config key 'batching.max_size': must be between 1 and 65536, got 1000000"),
    (["--batch-size", "0"], "streamer: config key 'batching.max_size': must be between 1 and 65536, got 0"),
    (["--max-wait-ms", "-1"], "streamer: config key 'batching.max_wait_ms': must be >= 0, got -1"),
    (["--model", "no-such-model.onnx"], "streamer: config key 'model.path': no model file at"),
])
def test_a_bad_override_exits_2_naming_the_key_before_connecting(
        no_broker: list[Config], capsys: pytest.CaptureFixture[str], flags: list[str],
        message: str) -> None:
    code = cli.main(["replay", "--config", str(EXAMPLE), "--from", "earliest", *flags])
    assert code == 2
    assert capsys.readouterr().err.startswith(message)
    assert no_broker == []  # refused before planning, let alone connecting


def test_batching_is_the_configs_unless_overridden(no_broker: list[Config]) -> None:
    cfg = load_config(EXAMPLE)
    with pytest.raises(Planned):
        replay.run_replay(cfg, replay.When("earliest"), run_id="r")
    with pytest.raises(Planned):
        replay.run_replay(cfg, replay.When("earliest"), run_id="r", batch_size=64)
    with pytest.raises(Planned):
        replay.run_replay(cfg, replay.When("earliest"), run_id="r", batch_size=64, max_wait_ms=5)
    assert [(c.batching.max_size, c.batching.max_wait_ms) for c in no_broker] == [
        (cfg.batching.max_size, cfg.batching.max_wait_ms), (64, cfg.batching.max_wait_ms), (64, 5)]


def test_cli_flags_default_to_the_config(no_broker: list[Config]) -> None:
    with pytest.raises(Planned):
        cli.main(["replay", "--config", str(EXAMPLE), "--from", "earliest"])
    with pytest.raises(Planned):
        cli.main(["replay", "--config", str(EXAMPLE), "--from", "earliest", "--batch-size", "4096",
                  "--max-wait-ms", "200"])
    cfg = load_config(EXAMPLE)
    assert [(c.batching.max_size, c.batching.max_wait_ms) for c in no_broker] == [
        (cfg.batching.max_size, cfg.batching.max_wait_ms), (4096, 200)]
