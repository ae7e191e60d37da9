"""Background offset commits on their way: not sent twice, sent again when their answer is
overdue, and given up on (exit 70, for a restart) when the resend goes unanswered too.

librdkafka answers an asynchronous commit through the consumer's commit callback. After the
broker of a group's coordinator was killed and came back it was seen to answer none, ever, its
group state wedged (no fetches either) until the process restarted: without a deadline the
committed offset stood still for good. Committing an offset twice is harmless.

Worked example (deadline 30 s): position 10 of partition 0 sent at 0 s. An answer naming 10, or a
failure naming any offset, clears it. No answer by 30 s: it is sent again, with one warning; no
answer by 60 s either: the process exits 70, as the watchdog does for a call that blocks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from streamer.kafka import watchdog

log = logging.getLogger(__name__)
TopicPartition = tuple[str, int]


class OnItsWay:
    """The positions sent in the background and not answered yet; an injected clock."""

    def __init__(self, deadline_s: float, clock: Callable[[], float]) -> None:
        self.deadline_s, self._clock = deadline_s, clock
        self._sent: dict[TopicPartition, tuple[int, float]] = {}  # offset, when sent
        self._resent: dict[TopicPartition, int] = {}  # sent again for want of an answer

    def sendable(self, positions: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """``positions`` less those on their way and not overdue yet."""
        out: dict[TopicPartition, int] = {}
        overdue: list[str] = []
        now = self._clock()
        for tp, off in positions.items():
            sent = self._sent.get(tp)
            if sent is not None and sent[0] == off:
                if now - sent[1] < self.deadline_s:
                    continue
                if self._resent.get(tp) == off:  # the resend got none either: the consumer is wedged
                    watchdog.give_up(f"the commit of {tp[0]}[{tp[1]}] at {off}", 2 * self.deadline_s)
                self._resent[tp] = off
                del self._sent[tp]  # warned once, however the resend fares
                overdue.append(f"{tp[0]}[{tp[1]}] at {off}")
            out[tp] = off
        if overdue:
            log.warning("no answer to the background commit of %s within %.0f s: sending it again",
                        ", ".join(overdue), self.deadline_s)
        return out

    def sent(self, positions: dict[TopicPartition, int]) -> None:
        now = self._clock()
        self._sent.update((tp, (off, now)) for tp, off in positions.items())

    def answered(self, tp: TopicPartition, offset: int, ok: bool) -> None:
        """An answer: it clears its position; a failure clears the partition whatever it names."""
        if tp in self._sent and (self._sent[tp][0] == offset or not ok):
            del self._sent[tp]
        if ok:
            self._resent.pop(tp, None)

    def forget(self, tps: Iterable[TopicPartition] | None = None) -> None:
        """Nothing of these partitions (None: of any) is on its way any more: committed
        synchronously, lost, or named by no answer that failed."""
        for tp in list(self._sent if tps is None else tps):
            self._sent.pop(tp, None)
            self._resent.pop(tp, None)

    def unsent(self, positions: dict[TopicPartition, int]) -> bool:
        """Is any of ``positions`` not on its way?"""
        return any(self._sent.get(tp, (None,))[0] != off for tp, off in positions.items())
