"""The error tree: every record error's stage is one of STAGES, and the CLI offers those."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamer.cli import main
from streamer.errors import STAGES, RecordError


def _record_errors(cls: type[RecordError]) -> set[type[RecordError]]:
    subs = set(cls.__subclasses__())
    return subs.union(*(_record_errors(s) for s in subs))


def test_stages_are_exactly_the_record_errors_stages_in_pipeline_order() -> None:
    assert sorted(STAGES) == sorted({e.stage for e in _record_errors(RecordError)})
    assert STAGES == ("deserialize", "route", "validate", "infer", "serialize", "produce")


def test_dlq_redrive_takes_the_stages_as_its_choices(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["dlq", "redrive", "--config", "x.yaml", "--stage", "nope"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice" in err and all(repr(s) in err for s in STAGES), err


def test_a_dead_letters_stack_trace_names_every_frame_without_reading_source() -> None:
    import linecache
    import traceback

    from streamer.kafka.deadletter import stack_trace

    def inner() -> None:
        raise ValueError("row 7 has no amount")

    try:
        inner()
    except ValueError as exc:
        caught = exc
    linecache.clearcache()
    trace = stack_trace(caught)
    assert linecache.cache == {}  # no source file was read for it
    lines = trace.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert lines[-1] == "ValueError: row 7 has no amount"  # as Python prints a builtin
    frames = traceback.extract_tb(caught.__traceback__)
    assert lines[1:-1] == [f'  File "{f.filename}", line {f.lineno}, in {f.name}' for f in frames]
    assert lines[-2].endswith("in inner")


def test_a_dead_letters_stack_trace_keeps_the_chain_of_causes() -> None:
    from streamer.errors import DeserializeError
    from streamer.kafka.deadletter import stack_trace

    try:
        try:
            b"\xff".decode()
        except UnicodeDecodeError as exc:
            raise DeserializeError("not UTF-8") from exc
    except DeserializeError as exc:
        caught = exc
    trace = stack_trace(caught)
    first, joint, last = trace.index("UnicodeDecodeError: 'utf-8' codec"), trace.index("direct cause"), \
        trace.index("streamer.errors.DeserializeError: not UTF-8")
    assert first < joint < last and trace.count("Traceback (most recent call last):") == 2


def test_a_detached_error_keeps_where_it_was_raised_and_its_causes_but_no_frames() -> None:
    from streamer.errors import InferenceError, detach, frames
    from streamer.kafka.deadletter import stack_trace

    def model() -> None:
        raise RuntimeError("kernel failed")

    try:
        try:
            model()
        except RuntimeError as exc:
            raise InferenceError("the model failed") from exc
    except InferenceError as exc:
        caught = exc
    before, where = stack_trace(caught), frames(caught.__cause__)
    assert where[-1][2] == "model"
    assert detach(caught) is caught
    assert caught.__traceback__ is None and caught.__cause__.__traceback__ is None
    assert frames(caught.__cause__) == where
    assert stack_trace(caught) == before  # a dead letter's trace reads the same


def test_detach_clears_a_context_python_does_not_print() -> None:
    """``raise ... from None`` hides the context from the printed trace, not from memory: its
    traceback holds frames too (json's decode error is raised so over a StopIteration)."""
    import json

    from streamer.errors import detach
    from streamer.kafka.deadletter import stack_trace

    try:
        json.loads("not json")
    except ValueError as exc:
        caught = exc
    hidden = caught.__context__
    assert caught.__suppress_context__ and hidden is not None and hidden.__traceback__ is not None
    before = stack_trace(caught)
    detach(caught)
    assert hidden.__traceback__ is None
    assert stack_trace(caught) == before


@pytest.mark.parametrize(("key", "shown"), [
    ("--require", "flag --require: r"),
    ("batching.max_size", "config key 'batching.max_size': r"),
    ("/srv/models/fraud.onnx", "file '/srv/models/fraud.onnx': r"),
    ("events.jsonl", "file 'events.jsonl': r"),
    ("input.json_schema", "config key 'input.json_schema': r"),
])
def test_a_config_error_names_a_flag_a_file_or_a_config_key_as_what_it_is(key: str, shown: str) -> None:
    from streamer.errors import ConfigError

    assert str(ConfigError(key, "r")) == shown


def test_a_bad_flag_is_called_a_flag_on_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--config", "x.yaml", "--workers", "0"]) == 2
    assert capsys.readouterr().err == "streamer: flag --workers: must be >= 1, got 0\n"


def test_a_model_file_that_does_not_load_is_called_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["model", "inspect", str(tmp_path / "nope.onnx")]) == 2
    assert capsys.readouterr().err.startswith(f"streamer: file '{tmp_path / 'nope.onnx'}': cannot load it as an ONNX model")
