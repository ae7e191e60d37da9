"""When the input has gone quiet: the one commit a quiet spell may make before the interval's.

A burst's last outputs would otherwise wait up to ``processing.commit_interval_ms`` for their
commit, and exactly-once readers (``read_committed``) see them only then. So once the loop has
read nothing for ``after_s`` (``input.consume_timeout_ms``, at least :data:`MIN_QUIET_MS`) and
everything it read is done, the checkpoint commits at once; but once a spell: a quiet commit
that fails waits for the interval like any other (not one a pass, each with its warning), and a
stream whose gaps are shorter than ``after_s`` commits at the interval only (a transaction a gap
would cost the broker a marker per partition each time).

Worked example (after_s 0.1): events read at 0.00 and 0.05 s, the last output acknowledged at
0.08 s, passes every 0.03 s reading nothing: the pass at 0.14 s is not past the spell's 0.1 s
(0.09), the one at 0.17 s is and commits (the spell's commit is spent); the pass at 0.20 s does
not, nor any after it, until an event is read again.
"""

from __future__ import annotations

from collections.abc import Callable

MIN_QUIET_MS = 100  # a consume timeout of 0 (a busy loop) must not make every gap a quiet spell


class QuietSpell:
    """The input's quiet, timed by the loop's passes; an injected clock."""

    def __init__(self, after_s: float, clock: Callable[[], float]) -> None:
        self._after_s, self._clock = after_s, clock
        self._heard_at, self._spent = clock(), False

    def passed(self, heard: bool) -> bool:
        """Called once a pass (``heard``: the pass read something): has the input been quiet for
        ``after_s``, in a spell whose commit is not spent yet?"""
        now = self._clock()
        if heard:
            self._heard_at, self._spent = now, False
        return not self._spent and now - self._heard_at >= self._after_s

    def spend(self) -> None:
        """The spell's one commit is going out: the next waits for input and quiet again."""
        self._spent = True
