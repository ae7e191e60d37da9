"""`streamer dlq` without a broker: the --offset form and the inspect line."""

from __future__ import annotations

import pytest

from streamer import cli
from streamer.commands import dlq


def test_an_offset_is_partition_colon_offset_and_anything_else_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert dlq.parse_place("3:140") == (3, 140)
    for bad in ("3", "3:", ":4", "a:4", "3:-1"):
        with pytest.raises(ValueError, match="PARTITION:OFFSET"):
            dlq.parse_place(bad)
    with pytest.raises(SystemExit) as exited:
        cli.main(["dlq", "redrive", "--config", "x.yaml", "--offset", "0:1", "--offset", "7"])
    assert exited.value.code == 2 and "'7' is not PARTITION:OFFSET" in capsys.readouterr().err


def test_an_inspect_line_names_place_stage_origin_key_event_redriven_attempt_and_reason() -> None:
    letter = dlq.Letter(2, 17, 1_764_417_600_000, "validate", "events[1]@40", b"a1", "e-40", True, "2",
                        "feature 5 is 50.0, above input.feature_max 10")
    assert letter.line() == ("2025-11-29T12:00:00Z  2:17  validate     events[1]@40  key a1  event e-40  "
                             "redriven yes  attempt 2  feature 5 is 50.0, above input.feature_max 10")
    bare = dlq.Letter(0, 3, 0, None, "None[None]@None", None, None, False, None, None)
    assert bare.line().startswith("1970-01-01T00:00:00Z  0:3  ?            None[None]@None  key -  event -  "
                                  "redriven no  attempt ?")


def test_inspect_and_redrive_read_the_topic_given_else_the_configs(monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """``--topic`` reaches both actions (a replay's ``<output>.dlq``); without it, None: the config's."""
    from pathlib import Path

    example = str(Path(__file__).resolve().parents[2] / "deploy" / "config" / "example.yaml")
    asked: list[tuple[str, str | None]] = []

    def inspect(cfg: object, limit: int | None, topic: str | None = None) -> list[str]:
        asked.append(("inspect", topic))
        return []

    def redrive(cfg: object, *_: object, topic: str | None = None, **__: object) -> dlq.RedriveResult:
        asked.append(("redrive", topic))
        return dlq.RedriveResult(0, 0, 0)

    monkeypatch.setattr(dlq, "inspect", inspect)
    monkeypatch.setattr(dlq, "redrive", redrive)
    for argv in (["inspect"], ["inspect", "--topic", "scores.backfill.dlq"],
                 ["redrive"], ["redrive", "--topic", "scores.backfill.dlq"]):
        assert cli.main(["dlq", *argv, "--config", example]) == 0
    assert asked == [("inspect", None), ("inspect", "scores.backfill.dlq"),
                     ("redrive", None), ("redrive", "scores.backfill.dlq")]
