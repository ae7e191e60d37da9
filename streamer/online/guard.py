"""A store skipped while it fails: the guard of the feature fetch and of the precomputed lookup.

A stalled store costs each request that asks it its whole timeout, and holds a connection the
while; under load, the requests that wait on it crowd out the ones that could be answered. So
one failure (an error, or a timeout) opens the guard: for ``skip_ms`` every ask is skipped at
once, a :class:`StoreError` the caller degrades on without waiting. Then one request asks again
(the probe, the others still skipped): its success closes the guard, its failure opens it for
another ``skip_ms``. Closed, at most ``max_in_flight`` asks wait on the store at once; one more
is skipped, so a slow store never takes every connection of the pool.

Worked example, ``skip_ms`` 1000: Redis stops answering at t=0; the asks in flight time out at
t=50 ms and open the guard; asks until t=1.05 s are skipped (each answer degraded at once);
the first ask after that probes, times out at t=1.1 s, and the guard opens until t=2.1 s.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from streamer.errors import StoreError

T = TypeVar("T")
BLAME_S = 0.05  # an ask that waited this long (or its store's whole timeout) and timed out opens the guard


class Late(StoreError):
    """An ask the request's own deadline cut short, before the store's timeout: not the store's failure."""


class Guard:
    """The guard of one store, named ``name`` in the messages of the asks it skips."""

    def __init__(self, name: str, skip_ms: int, max_in_flight: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.name, self.skip_s, self.max_in_flight, self.clock = name, skip_ms / 1000, max_in_flight, clock
        self.in_flight = 0
        self._opened_at: float | None = None  # when the last failure opened it; None: closed
        self._probing = False

    @property
    def open(self) -> bool:
        return self._opened_at is not None

    async def within(self, pending: Callable[[], Awaitable[T]], budget: float, timeout_s: float, key: str) -> T:
        """``pending()`` asked through the guard, within ``budget`` seconds: past it, a
        StoreError naming ``key`` (the setting of the store's ``timeout_s``), or a :class:`Late`
        when the request's deadline cut the budget below the store's timeout and below
        :data:`BLAME_S`: a store that takes longer than that is failing, whoever's budget ran out."""
        late = budget < min(timeout_s, BLAME_S)
        why = "the request's deadline" if budget < timeout_s else key

        async def call() -> T:
            try:
                return await asyncio.wait_for(pending(), budget)
            except TimeoutError:
                raise (Late if late else StoreError)(
                    f"{self.name} did not answer within {budget * 1000:.0f} ms ({why})") from None

        return await self.ask(call)

    async def ask(self, call: Callable[[], Awaitable[T]]) -> T:
        """``call()``'s answer, or :class:`StoreError` at once when the guard skips it; a
        StoreError or a timeout of the call opens the guard (and goes up), a :class:`Late` does not."""
        probe = self._admit()
        self.in_flight += 1
        try:
            answer = await call()
        except Late:
            if probe:
                self._probing = False
            raise
        except (StoreError, TimeoutError):
            self._opened_at, self._probing = self.clock(), False
            raise
        except BaseException:
            if probe:
                self._probing = False
            raise
        finally:
            self.in_flight -= 1
        if probe or not self.open:
            self._opened_at, self._probing = None, False
        return answer

    def _admit(self) -> bool:
        """Whether the ask is the probe; StoreError when it is skipped."""
        if self._opened_at is None:
            if self.in_flight >= self.max_in_flight:
                raise StoreError(f"{self.name}: {self.in_flight} asks are waiting on it already (its max_in_flight)")
            return False
        waited = self.clock() - self._opened_at
        if waited < self.skip_s or self._probing:
            raise StoreError(f"{self.name} failed {waited * 1000:.0f} ms ago: skipped for "
                             f"{self.skip_s * 1000:.0f} ms (its skip_ms), then asked again")
        self._probing = True
        return True
