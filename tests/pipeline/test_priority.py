"""The priority lock: one call at a time, an urgent waiter before an ordinary one."""

from __future__ import annotations

import threading
import time

from streamer.pipeline.priority import PriorityLock

WAIT_S = 5.0


def test_an_urgent_waiter_goes_before_an_ordinary_one_that_came_first() -> None:
    lock, order = PriorityLock(), []
    holding, release = threading.Event(), threading.Event()

    def first() -> None:
        with lock.hold():
            holding.set()
            release.wait(WAIT_S)

    def call(name: str, urgent: bool, queued: threading.Event) -> None:
        queued.set()
        with lock.hold(urgent):
            order.append(name)

    threads = [threading.Thread(target=first)]
    threads[0].start()
    assert holding.wait(WAIT_S)
    for name, urgent in (("stream", False), ("online", True)):
        queued = threading.Event()
        t = threading.Thread(target=call, args=(name, urgent, queued))
        t.start()
        assert queued.wait(WAIT_S)
        threads.append(t)
    deadline = time.monotonic() + WAIT_S
    while True:  # until both wait on the lock's condition (CPython's Condition keeps its waiters)
        assert time.monotonic() < deadline, "the two calls never both waited on the lock"
        with lock._cond:
            if len(lock._cond._waiters) == 2 and lock._urgent == 1:  # type: ignore[attr-defined]
                break
    release.set()
    for t in threads:
        t.join(WAIT_S)
    assert order == ["online", "stream"] and lock.yielded == 1
