"""The guard of a store (online/guard.py): one failure skips the store for skip_ms, one probe then
asks it again, and at most max_in_flight asks wait on it at once. A fake clock, real coroutines."""

from __future__ import annotations

import asyncio

import pytest

from streamer.errors import StoreError
from streamer.online.guard import Guard, Late


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def ok() -> str:
    return "ok"


async def fails() -> str:
    raise StoreError("the store at HOST: TimeoutError")


def test_a_failure_skips_the_store_for_skip_ms_then_one_probe_closes_it_or_opens_it_again() -> None:
    clock = Clock()
    guard = Guard("the store", skip_ms=1000, max_in_flight=8, clock=clock)

    async def run() -> None:
        assert await guard.ask(ok) == "ok" and not guard.open
        with pytest.raises(StoreError, match="TimeoutError"):
            await guard.ask(fails)
        assert guard.open
        clock.now = 0.999
        asked = []

        async def counted() -> str:
            asked.append(1)
            return "ok"

        with pytest.raises(StoreError, match=r"the store failed 999 ms ago: skipped for 1000 ms"):
            await guard.ask(counted)
        assert asked == []  # skipped: never asked
        clock.now = 1.0
        with pytest.raises(StoreError, match="TimeoutError"):  # the probe fails: open again from 1.0
            await guard.ask(fails)
        clock.now = 1.5
        with pytest.raises(StoreError, match="skipped"):
            await guard.ask(counted)
        clock.now = 2.0
        assert await guard.ask(counted) == "ok" and not guard.open and asked == [1]
        assert await guard.ask(counted) == "ok"

    asyncio.run(run())


def test_while_the_probe_waits_the_others_are_skipped() -> None:
    clock = Clock()
    guard = Guard("the store", skip_ms=100, max_in_flight=8, clock=clock)

    async def run() -> None:
        with pytest.raises(StoreError):
            await guard.ask(fails)
        clock.now = 0.2
        release = asyncio.Event()

        async def slow() -> str:
            await release.wait()
            return "ok"

        probe = asyncio.create_task(guard.ask(slow))
        await asyncio.sleep(0)  # the probe is asking
        with pytest.raises(StoreError, match="skipped"):
            await guard.ask(ok)
        release.set()
        assert await probe == "ok" and not guard.open

    asyncio.run(run())


def test_past_max_in_flight_an_ask_is_skipped_and_a_timeout_opens_the_guard_but_a_late_ask_does_not() -> None:
    guard = Guard("the store", skip_ms=1000, max_in_flight=2, clock=Clock())

    async def run() -> None:
        release = asyncio.Event()

        async def slow() -> str:
            await release.wait()
            return "ok"

        waiting = [asyncio.create_task(guard.ask(slow)) for _ in range(2)]
        await asyncio.sleep(0)
        with pytest.raises(StoreError, match="2 asks are waiting on it already"):
            await guard.ask(ok)
        release.set()
        assert await asyncio.gather(*waiting) == ["ok", "ok"] and guard.in_flight == 0

        async def late() -> str:
            raise Late("the store did not answer within 3 ms (the request's deadline)")

        with pytest.raises(Late):
            await guard.ask(late)
        assert not guard.open  # the request's own deadline, not the store's failure

        async def times_out() -> str:
            raise TimeoutError

        with pytest.raises(TimeoutError):
            await guard.ask(times_out)
        assert guard.open

    asyncio.run(run())


def test_a_timeout_the_request_s_deadline_cut_opens_the_guard_once_it_waited_blame_s() -> None:
    """A store of a 1 s timeout asked with 0.9 s left: past 0.9 s it is failing (the guard opens),
    though the request's deadline set the budget; asked with 10 ms left, it is not to blame."""

    async def never() -> str:
        await asyncio.Event().wait()
        return "never"

    async def run(budget: float) -> tuple[type[BaseException], bool]:
        guard = Guard("the store", skip_ms=1000, max_in_flight=8, clock=Clock())
        try:
            await guard.within(never, budget, 1.0, "kv.timeout_ms")
        except StoreError as exc:
            return type(exc), guard.open
        raise AssertionError("answered")

    assert asyncio.run(run(0.01)) == (Late, False)
    assert asyncio.run(run(0.06)) == (StoreError, True)
