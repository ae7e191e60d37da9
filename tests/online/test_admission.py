"""Admission on a fake clock: the module's worked example, the queue bound, an empty queue that
always admits one batch's rows, the stop, expiry, and the rate measured over backlogged cycles."""

from __future__ import annotations

import pytest

from streamer.errors import Shed
from streamer.online.admission import Admission
from streamer.online.meters import OnlineMetrics
from streamer.testing import FakeClock


def admission(clock: FakeClock, max_queue_rows: int = 4096, rows_per_s: float = 20_000.0,
              call_s: float = 0.002) -> Admission:
    """``max_size`` 64, ``max_wait_ms`` 5, the rate and call time as measured."""
    a = Admission(max_queue_rows, 64, 0.005, clock, OnlineMetrics())
    a.rows_per_s, a.call_s = rows_per_s, call_s
    return a


def shed(a: Admission, why: str) -> float | None:
    return a.metrics.registry.get_sample_value("streamer_online_shed_total", {"reason": why})


def test_the_worked_example_a_deadline_against_the_rows_queued_at_the_measured_rate() -> None:
    clock = FakeClock(100.0)
    a = admission(clock)
    assert a.admit(1000, clock() + 60) == 100.0  # admitted now
    with pytest.raises(Shed, match="the deadline is 40 ms away; an answer takes about 57 ms") as refused:
        a.admit(1, clock() + 0.040)  # 5 ms + 1000 rows at 20,000/s + 2 ms
    assert (refused.value.why, refused.value.retry_after_s) == ("deadline", 1.0)
    a.admit(1, clock() + 0.100)
    assert a.queued_rows == 1001 and a.shed == 1 and shed(a, "deadline") == 1
    assert a.metrics.registry.get_sample_value("streamer_online_queued_rows") == 1001


def test_an_empty_queue_admits_what_one_batch_wait_and_one_call_answer_whatever_the_rate() -> None:
    clock = FakeClock()
    a = admission(clock)
    with pytest.raises(Shed, match="about 14 ms"):
        a.admit(200, clock() + 0.0137)  # 5 ms + its 136 rows past the first batch at 20,000/s + 2 ms = 13.8 ms
    a.admit(200, clock() + 0.0139)
    slow = admission(clock, rows_per_s=2.0, call_s=0.001)  # a burst measured 2 rows a second
    slow.admit(64, clock() + 0.0061)  # a batch's rows into an empty queue: 5 ms + 1 ms
    slow.release(63)
    with pytest.raises(Shed, match="about 506 ms"):
        slow.admit(1, clock() + 0.3)  # one row ahead at 2 rows a second is half a second


def test_the_queue_bound_refuses_one_row_more_until_rows_are_released() -> None:
    clock = FakeClock()
    a = admission(clock, max_queue_rows=10, rows_per_s=10.0, call_s=0.5)
    a.admit(10, clock() + 60)
    with pytest.raises(Shed, match="the queue holds 10 rows, at most 10") as full:
        a.admit(1, clock() + 60)
    # Retry-After: the queue as it stands answered, in whole seconds: 5 ms + 10 rows at 10/s + 0.5 s
    assert (full.value.why, full.value.retry_after_s) == ("queue", 2.0)
    assert a.backlog(4) and not a.backlog(10)
    a.release(10)
    a.admit(1, clock() + 60)
    assert a.queued_rows == 1 and shed(a, "queue") == 1


def test_a_stop_refuses_every_request_and_a_deadline_passed_while_waiting_expires() -> None:
    clock = FakeClock(5.0)
    a = admission(clock)
    a.stop()
    with pytest.raises(Shed, match="stopping") as stopping:
        a.admit(1, clock() + 60)
    assert (stopping.value.why, stopping.value.retry_after_s) == ("stopping", 1.0) and a.queued_rows == 0
    assert a.expired(5.0, 5.0) is None
    late = a.expired(5.0, 5.05)
    assert late is not None and str(late) == "the deadline passed 50 ms before its batch was scored"
    assert shed(a, "expired") == 1 and shed(a, "stopping") == 1 and a.shed == 1  # expiry is not a refusal


def test_the_rate_is_measured_over_whole_cycles_with_a_backlog_behind_them() -> None:
    clock = FakeClock()
    a = admission(clock, rows_per_s=0.0, call_s=0.0)
    a.called(0.002)
    a.cycle_ended(64, backlog=False)
    assert a.rows_per_s == 32_000  # a first guess from the call alone, until a backlog measures
    a.rows_per_s = 20_000.0
    clock.advance(0.004)
    a.cycle_ended(64, backlog=True)  # 64 rows in a 4 ms cycle: 16,000/s, weighing a fifth
    assert a.rows_per_s == pytest.approx(19_200)
    clock.advance(0.004)
    a.cycle_ended(64, backlog=False)  # nothing waited: an idle cycle says nothing of the rate
    assert a.rows_per_s == pytest.approx(19_200)
    clock.advance(0.008)
    a.cycle_ended(64, backlog=True)  # measured from the last cycle's end: 8,000/s
    assert a.rows_per_s == pytest.approx(0.8 * 19_200 + 0.2 * 8_000)


def test_a_slow_call_of_a_full_batch_does_not_keep_refusing_a_one_row_request_into_an_empty_queue() -> None:
    """After a 110 ms call of 256 rows (a saturated server's last batch), an empty queue admits a
    one-row request with a 100 ms deadline: its call is 1/256 of it. Where no call follows to
    measure again, the old call's whole time would refuse every such request for good."""
    clock = FakeClock()
    a = Admission(4096, 256, 0.002, clock, OnlineMetrics())
    a.called(0.110, 256)
    a.admit(1, clock() + 0.100)
    assert a.answer_in(0, batch=1) == pytest.approx(0.002 + 0.110 / 256)
    a.called(0.110, 256)
    with pytest.raises(Shed, match="an answer takes about 112 ms"):
        a.admit(255, clock() + 0.100)  # a full batch of its own (256 rows with the one queued) takes the whole call
