"""`streamer replay` without a broker: its batching comes from the config, and a bad override is a
config error (exit 2) found before anything connects."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from streamer import cli
from streamer.commands import replay
from streamer.config import Config, with_overrides
from streamer.config_file import load_config
from streamer.kafka.ranges import When

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "deploy" / "config" / "example.yaml"
NOWHERE = "127.0.0.1:9"  # the discard port: nothing listens there


class Planned(Exception):
    """Raised where the replay would first talk to the broker."""


pytestmark = pytest.mark.usefixtures("own_signals")  # `streamer replay` takes SIGTERM and SIGINT for its stop


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
    (["--model-file", "no-such-model.onnx"], "streamer: config key 'model.path': no model file at"),
])
def test_a_bad_override_exits_2_naming_the_key_before_connecting(
        no_broker: list[Config], capsys: pytest.CaptureFixture[str], flags: list[str],
        message: str) -> None:
    code = cli.main(["replay", "--config", str(EXAMPLE), "--from", "earliest", *flags])
    assert code == 2
    assert capsys.readouterr().err.startswith(message)
    assert no_broker == []  # refused before planning, let alone connecting


def test_a_replay_batches_large_unless_overridden(no_broker: list[Config]) -> None:
    """Nobody waits on a backfill: REPLAY_BATCH_SIZE rows per call (and per consume) by default,
    a larger batching.max_size kept, --batch-size and --max-wait-ms as given."""
    cfg = load_config(EXAMPLE)
    big = with_overrides(cfg, batching={"max_size": 8192})
    for args in ({}, {"batch_size": 64}, {"batch_size": 64, "max_wait_ms": 5}):
        with pytest.raises(Planned):
            replay.run_replay(cfg, When("earliest"), run_id="r", **args)  # type: ignore[arg-type]
    with pytest.raises(Planned):
        replay.run_replay(big, When("earliest"), run_id="r")
    assert [(c.batching.max_size, c.batching.max_wait_ms) for c in no_broker] == [
        (replay.REPLAY_BATCH_SIZE, cfg.batching.max_wait_ms), (64, cfg.batching.max_wait_ms), (64, 5),
        (8192, cfg.batching.max_wait_ms)]
    assert no_broker[0].input.consume_max_messages == replay.REPLAY_BATCH_SIZE > cfg.batching.max_size


def test_cli_flags_override_the_replay_defaults(no_broker: list[Config]) -> None:
    with pytest.raises(Planned):
        cli.main(["replay", "--config", str(EXAMPLE), "--from", "earliest"])
    with pytest.raises(Planned):
        cli.main(["replay", "--config", str(EXAMPLE), "--from", "earliest", "--batch-size", "128",
                  "--max-wait-ms", "200"])
    cfg = load_config(EXAMPLE)
    assert [(c.batching.max_size, c.batching.max_wait_ms) for c in no_broker] == [
        (replay.REPLAY_BATCH_SIZE, cfg.batching.max_wait_ms), (128, 200)]


def test_the_replay_metrics_server_takes_a_free_port_beside_the_live_one(no_broker: list[Config]) -> None:
    from dataclasses import replace

    cfg = load_config(EXAMPLE)
    cfg = replace(cfg, metrics=replace(cfg.metrics, enabled=True, port=9400))
    with pytest.raises(Planned):
        replay.run_replay(cfg, When("earliest"), run_id="r")
    assert no_broker[0].metrics.port == 0 and no_broker[0].metrics.enabled


def test_a_finished_run_is_a_config_error_naming_the_run_id() -> None:
    from streamer.errors import ConfigError

    error = replay.ReplayFinishedError("replay run 'r' already finished; pass --force to run it again")
    assert isinstance(error, ConfigError) and error.key == "--run-id"


def test_a_replay_that_dead_letters_everything_exits_2(monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from streamer.observe.stats import Stats

    stats = Stats()
    stats.dead_letters["validate"] += 5

    def ran(*_: Any, **__: Any) -> replay.ReplaySummary:
        return replay.ReplaySummary("r1", "scores.backfill", 5, False, stats, 1.0)

    monkeypatch.setattr(replay, "run_replay", ran)
    assert cli.main(["replay", "--config", str(EXAMPLE), "--from", "earliest"]) == 2
    assert "every event of replay r1 became a dead letter in scores.backfill.dlq" in capsys.readouterr().err
    stats.predictions = 5
    assert cli.main(["replay", "--config", str(EXAMPLE), "--from", "earliest"]) == 0


def test_the_summary_counts_add_up_to_the_events_in_range() -> None:
    """40 offsets of a transactional input, one event per transaction, 5 more read past the end:
    the summary names the 20 commit markers instead of letting 20 events look lost."""
    from streamer.observe.stats import Stats

    stats = Stats(events=25, predictions=18)
    stats.dead_letters["validate"] += 2
    summary = replay.ReplaySummary("r1", "scores.backfill", 40, False, stats, 1.0)
    assert (summary.handled, summary.without_event, summary.again, summary.outside) == (20, 20, 0, 5)
    assert summary.events == stats.predictions + sum(stats.dead_letters.values()) + summary.without_event
    assert summary.lines()[1] == ("events in range 40 = predictions 18 + dead letters 2 + offsets without an "
                                  "event 20 (transaction markers, aborted records), to scores.backfill")
    assert summary.lines()[2] == ("dead letters to scores.backfill.dlq "
                                  "(streamer dlq inspect --topic scores.backfill.dlq)")
    assert summary.lines()[3].startswith("exactly once: in Kafka transactions")
    assert summary.lines()[4].startswith("read and left alone 5 ")
    # One throughput figure, saying what it measures: 20 predictions and dead letters in 1 s.
    assert summary.lines()[-1] == ("throughput 20 events/s scored and written (predictions and dead letters "
                                   "over the run's time), 1.0 s in all")
    assert sum("/s" in line for line in summary.lines()) == 1
    twice = replay.ReplaySummary("r2", "b", 10, False, Stats(events=12, predictions=12), 1.0)
    assert (twice.without_event, twice.again, twice.outside) == (0, 2, 2)
    assert twice.lines()[1].endswith("offsets without an event 0 (transaction markers, aborted records) "
                                     "- handled twice 2, to b")


def test_a_stopped_replay_says_what_is_left_and_how_to_resume() -> None:
    """30 of 100 offsets committed when the stop came: ``stopped``, 70 left, and the last line
    names the run id to resume with."""
    from streamer.observe.stats import Stats

    summary = replay.ReplaySummary("r3", "b", 100, False, Stats(events=40, predictions=30), 2.0, left=70)
    lines = summary.lines()
    assert summary.stopped and lines[0] == "replay r3 stopped"
    assert lines[1] == "events in range 100: predictions 30 + dead letters 0 committed, 70 offsets left, to b"
    assert (summary.without_event, summary.again) == (0, 0)
    assert lines[-1] == "resume with --run-id r3"
    resumed = replay.ReplaySummary("r3", "b", 70, True, Stats(events=70, predictions=70), 2.0)
    assert resumed.lines()[0] == "replay r3 resumed and finished" and not resumed.stopped


def test_an_at_least_once_summary_bounds_what_may_have_been_written_again() -> None:
    """A fresh run: only what it handled twice itself. A resumed run: every event it handled, since
    the stopped run may have written any of them after its last commit. Exactly once: nothing."""
    from streamer.observe.stats import Stats

    fresh = replay.ReplaySummary("a", "b", 10, False, Stats(events=12, predictions=12), 1.0, exactly_once=False)
    assert fresh.again_at_most == 2
    assert fresh.lines()[3] == "at least once: up to 2 of them may have been written already (handled twice by this run)"
    resumed = replay.ReplaySummary("a", "b", 70, True, Stats(events=70, predictions=70), 1.0, exactly_once=False)
    assert resumed.again_at_most == 70
    assert resumed.lines()[3] == ("at least once: up to 70 of them may have been written already (resumed: the "
                                  "stopped run may have written any event after its last commit)")
    assert replay.ReplaySummary("a", "b", 70, True, Stats(events=70, predictions=70), 1.0).again_at_most == 0


def test_replay_writes_exactly_once_unless_asked_with_its_run_group_as_transactional_id(
        no_broker: list[Config]) -> None:
    from dataclasses import replace

    cfg = load_config(EXAMPLE)
    cfg = replace(cfg, processing=replace(cfg.processing, transactional_id="live-tx"))
    with pytest.raises(Planned):
        replay.run_replay(cfg, When("earliest"), run_id="r")
    with pytest.raises(Planned):
        replay.run_replay(cfg, When("earliest"), run_id="r", exactly_once=False)
    with pytest.raises(Planned):
        cli.main(["replay", "--config", str(EXAMPLE), "--from", "earliest", "--run-id", "q", "--at-least-once"])
    assert [c.processing.guarantee for c in no_broker] == ["exactly_once", "at_least_once", "at_least_once"]
    # Never the live processor's id (it would fence it); the run's group, the same on any host.
    assert no_broker[0].processing.transactional_id == f"{cfg.input.group_id}.replay.r"


def test_a_signal_stops_the_replay_with_its_summary_and_exit_6(monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """The first SIGTERM or Ctrl+C sets the stop the run was given (no KeyboardInterrupt); the run
    ends with what it committed and the line to resume it, and the command exits 6."""
    from streamer.errors import EXIT_STOPPED
    from streamer.observe.stats import Stats

    for sig in (signal.SIGTERM, signal.SIGINT):
        def ran(*_: Any, stop: threading.Event, **__: Any) -> replay.ReplaySummary:
            signal.raise_signal(sig)  # arrives while the run scores
            assert stop.is_set()
            return replay.ReplaySummary("r9", "b", 100, False, Stats(events=40, predictions=30), 1.0, left=70)

        monkeypatch.setattr(replay, "run_replay", ran)
        assert cli.main(["replay", "--config", str(EXAMPLE), "--from", "earliest"]) == EXIT_STOPPED == 6
        out = capsys.readouterr().out.splitlines()
        assert out[0] == "replay r9 stopped" and out[-1] == "resume with --run-id r9"


def test_at_least_once_is_refused_for_the_lake(capsys: pytest.CaptureFixture[str]) -> None:
    for target in (["--to-table", "scores"], ["--to-parquet", "out/"]):
        assert cli.main(["replay", "--config", str(EXAMPLE), "--from", "earliest", *target, "--at-least-once"]) == 2
        assert "flag --at-least-once: is for a replay to a topic" in capsys.readouterr().err
