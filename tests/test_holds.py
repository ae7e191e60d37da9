"""The holds on a fake clock: every transition of their table (holds.py), and the worked example."""

from __future__ import annotations

from confluent_kafka import KafkaError

from streamer.holds import Holds
from streamer.kafka.messages import Output
from streamer.pipeline.broken import Broken
from streamer.testing import FakeClock
from tests.support.fakes import FakeMessage

TIMED_OUT = KafkaError(KafkaError._MSG_TIMED_OUT)


def holds() -> tuple[Holds, FakeClock]:
    clock = FakeClock()
    return Holds(0.5, 30.0, clock), clock


def letter(partition: int = 0) -> Output:
    return Output("in.dlq", None, b"x", [], FakeMessage("in", partition, 7, b"x"), stage="decode")


def test_the_worked_example_a_dead_letter_that_fails_twice_then_goes_through() -> None:
    g, clock = holds()
    g.redo([(letter(), TIMED_OUT)])  # t=0: held, redo at 0.5
    assert g.blocked and g.paused and g.reason is not None and "cannot write to in.dlq" in g.reason
    clock.advance(0.4)
    assert g.resend() == []  # the back-off is not over
    clock.advance(0.1)
    (again,) = g.resend()  # t=0.5: re-sent
    assert again.value == b"x" and g.resend() == []  # handed out once
    g.redo([(again, TIMED_OUT)])  # fails again: back-off 1.0, redo at 1.5
    assert not g.settle(in_flight=0)  # something to redo: still held
    clock.advance(0.9)
    assert g.resend() == []
    clock.advance(0.1)
    assert len(g.resend()) == 1  # t=1.5
    assert not g.settle(in_flight=1)  # re-sent, not acknowledged yet
    clock.advance(0.1)
    assert g.settle(in_flight=0) and not g.blocked and not g.paused and g.reason is None  # t=1.6: released


def test_the_back_off_doubles_per_repeat_up_to_the_max() -> None:
    g, _ = holds()
    waits = []
    for _ in range(10):
        g.hold_model("boom")
        assert g.model is not None
        waits.append(g.model.backoff_s)
    assert waits == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0, 30.0]


def test_a_held_model_runs_again_when_its_retry_is_due_and_an_answer_releases_it() -> None:
    g, clock = holds()
    assert g.model_may_run() and not g.blocked
    g.hold_model("the device went away")
    assert g.paused and not g.model_may_run() and g.reason == "model failing: the device went away"
    clock.advance(0.5)
    assert g.model_may_run() and g.paused  # the retry is due; input stays paused until it answers
    g.model_answered()
    assert not g.blocked and not g.paused


def test_a_held_input_is_read_again_after_its_back_off_and_released_once_it_decodes() -> None:
    g, clock = holds()
    g.hold_input("schema registry: unreachable")
    assert g.blocked and g.paused
    clock.advance(0.5)
    assert g.blocked and not g.paused  # not paused: the loop reads the chunk again, still unhealthy
    g.hold_input("schema registry: unreachable")  # it failed again: a longer back-off
    assert g.paused and g.source is not None and g.source.backoff_s == 1.0
    g.input_decoded()
    assert not g.blocked and not g.paused


def test_an_aborted_transaction_releases_the_hold_once_its_back_off_is_over() -> None:
    g, clock = holds()
    g.writes_failed("cannot write to scores: timed out")  # no redo list: the redo starts from the commit
    assert g.blocked and not g.settle(in_flight=0)
    clock.advance(0.5)
    assert g.settle(in_flight=0) and not g.blocked


def test_forgotten_partitions_leave_the_redo_list_and_the_model_hold_wins_the_reason() -> None:
    g, clock = holds()
    g.redo([(letter(0), TIMED_OUT), (letter(1), TIMED_OUT)])
    g.forget({("in", 1)})  # revoked: partition 1's outputs are its next owner's to redo
    clock.advance(0.5)
    assert [o.source_tp for o in g.resend()] == [("in", 0)]
    g.hold_model("boom")
    assert g.reason == "model failing: boom"  # several holds: the model's reason is reported first
    g.redo([])
    assert g.delivery is not None and g.delivery.resent  # an empty redo changes nothing


MISSING = Broken("missing field 'features'", "missing field 'features'")


def broken_holds(after: int = 3) -> tuple[Holds, FakeClock]:
    clock = FakeClock()
    return Holds(0.5, 30.0, clock, broken_after=after), clock


def test_the_nth_wholly_broken_chunk_of_one_reason_is_held_and_probed_with_back_off() -> None:
    g, clock = broken_holds(3)
    assert not g.judge(MISSING) and not g.judge(MISSING)  # the pattern is not known yet: dead letters
    assert not g.blocked
    assert g.judge(MISSING)  # the third in a row: held
    assert g.blocked and g.paused and g.broken is not None
    assert g.reason == ("input broken: every row of the last 3 batches fails validation with: missing field "
                        "'features' (fix the events or the config: the held rows are read again)")
    clock.advance(0.5)
    assert g.blocked and not g.paused  # the probe: the loop reads the chunk again, still unhealthy
    assert g.judge(MISSING) and g.paused and g.broken.backoff_s == 1.0  # still broken: a longer back-off
    clock.advance(1.0)
    assert not g.judge(None)  # a row passed: released, the chunk routed as usual
    assert not g.blocked and not g.paused and g.reason is None


def test_a_probe_that_fails_another_way_releases_the_hold_and_starts_a_new_streak() -> None:
    g, clock = broken_holds(2)
    g.judge(MISSING)
    assert g.judge(MISSING)
    clock.advance(0.5)
    other = Broken("field 'features' has # values, the model takes #", "field 'features' has 3 values, ...")
    assert not g.judge(other) and not g.blocked  # dead-lettered as usual: the first of its kind
    assert g.judge(other) and g.reason is not None and "has 3 values" in g.reason


def test_partial_failures_and_changing_reasons_never_hold() -> None:
    g, _ = broken_holds(2)
    other = Broken("field 'x' is … or missing", "field 'x' is null or missing")
    verdicts = [g.judge(b) for b in (MISSING, None, MISSING, other, MISSING, other, None, MISSING)]
    assert verdicts == [False] * 8 and not g.blocked


def test_broken_after_zero_never_holds_and_one_holds_the_first_broken_chunk() -> None:
    off, _ = broken_holds(0)
    assert not any(off.judge(MISSING) for _ in range(100)) and not off.blocked
    first, _ = broken_holds(1)
    assert first.judge(MISSING) and first.blocked


def test_the_model_hold_is_reported_before_a_broken_input() -> None:
    g, _ = broken_holds(1)
    g.judge(MISSING)
    g.hold_model("boom")
    assert g.reason == "model failing: boom"
    g.model_answered()
    assert g.reason is not None and g.reason.startswith("input broken:")
