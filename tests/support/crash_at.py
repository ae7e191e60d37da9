"""`streamer run` with a crash planted in the commit path, for the fault-injection tests only.

    python -m tests.support.crash_at POINT[:N] run --config CONFIG

The process exits with code 86 (``os._exit``: no flush, no close, like SIGKILL) at the N-th
(default first) time the processor reaches POINT:

- ``before-commit``: input progress is about to be committed, its outputs already written:
  at-least-once, the consumer's ``commit`` with offsets; exactly-once,
  ``send_offsets_to_transaction`` (the outputs sit in the open transaction).
- ``inside-commit`` (exactly-once): the offsets are in the transaction, ``commit_transaction``
  is about to be called. A correct processor has committed nothing of this transaction, input
  offsets included; one that commits its offsets outside the transaction loses the batch.

The hook wraps the clients that ``streamer.kafka.clients`` hands out, so nothing in the package knows
about it: production code carries no fault switches.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from streamer import cli
from streamer.kafka import clients

EXIT_CODE = 86


class _Countdown:
    def __init__(self, point: str, nth: int) -> None:
        self.point, self.left = point, nth

    def reached(self, point: str) -> None:
        if point != self.point:
            return
        self.left -= 1
        if self.left == 0:
            print(f"crash_at: exiting at {point}", file=sys.stderr, flush=True)
            os._exit(EXIT_CODE)


class _Proxy:
    """Delegates everything to the real client except the calls that may crash first."""

    def __init__(self, real: Any, countdown: _Countdown) -> None:
        self._real, self._countdown = real, countdown

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def __len__(self) -> int:  # dunder methods do not go through __getattr__
        return len(self._real)


class _Consumer(_Proxy):
    def commit(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("offsets"):
            self._countdown.reached("before-commit")
        return self._real.commit(*args, **kwargs)


class _Producer(_Proxy):
    def send_offsets_to_transaction(self, *args: Any, **kwargs: Any) -> Any:
        self._countdown.reached("before-commit")
        return self._real.send_offsets_to_transaction(*args, **kwargs)

    def commit_transaction(self, *args: Any, **kwargs: Any) -> Any:
        self._countdown.reached("inside-commit")
        return self._real.commit_transaction(*args, **kwargs)


def main(argv: list[str]) -> int:
    point, _, nth = argv[0].partition(":")
    if point not in ("before-commit", "inside-commit"):
        raise SystemExit(f"crash_at: unknown point {point!r}")
    countdown = _Countdown(point, int(nth or 1))
    make_consumer, make_producer = clients.make_consumer, clients.make_producer
    clients.make_consumer = lambda cfg, **kw: _Consumer(make_consumer(cfg, **kw), countdown)  # type: ignore[assignment]
    clients.make_producer = lambda cfg, **kw: _Producer(make_producer(cfg, **kw), countdown)  # type: ignore[assignment]
    return cli.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
