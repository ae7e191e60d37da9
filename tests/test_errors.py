"""The error tree: every record error's stage is one of STAGES, and the CLI offers those."""

from __future__ import annotations

import pytest

from streamer.cli import main
from streamer.errors import STAGES, RecordError


def _record_errors(cls: type[RecordError]) -> set[type[RecordError]]:
    subs = set(cls.__subclasses__())
    return subs.union(*(_record_errors(s) for s in subs))


def test_stages_are_exactly_the_record_errors_stages_in_pipeline_order() -> None:
    assert sorted(STAGES) == sorted({e.stage for e in _record_errors(RecordError)})
    assert STAGES == ("deserialize", "validate", "infer", "serialize", "produce")


def test_dlq_redrive_takes_the_stages_as_its_choices(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["dlq", "redrive", "--config", "x.yaml", "--stage", "nope"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice" in err and all(repr(s) in err for s in STAGES), err
