"""Background offset commits on their way: one a partition at a time until its answer (or its
deadline) comes, sent again when that answer is overdue, and given up on (exit 70, for a
restart) when the resend goes unanswered too.

One a partition at a time, because the broker keeps the last commit it applies, not the highest:
a commit held up by a coordinator's failover (librdkafka retries it on the new coordinator) can
be applied after a newer one sent meanwhile, and the partition's committed offset goes back for
good. Seen in the cluster test: p2 committed at 4762 by the new coordinator, then at 3204 by the
retried older request 66 ms later; the processor, holding 4762 as committed, had nothing more to
send, so the group stayed 1,558 events behind after the input ended. A newer position of a
partition therefore waits for the answer to the one on its way (the tracker also takes each
answer as the broker's committed offset, older or not: offsets.py).

librdkafka answers an asynchronous commit through the consumer's commit callback. After the
broker of a group's coordinator was killed and came back it was seen to answer none, ever, its
group state wedged (no fetches either) until the process restarted: without a deadline the
committed offset stood still for good. Committing an offset twice is harmless.

Worked example (deadline 30 s): position 10 of partition 0 sent at 0 s; the partition reaches 25
at 1 s, which waits. The answer naming 10 at 2 s clears it (a failure naming 10, or no valid
offset, would too): 25 goes at the next commit. Had no answer come by 30 s, the partition's current position
would go then, with one warning; that resend unanswered by 60 s too: the process exits 70, as the
watchdog does for a call that blocks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from streamer.kafka import watchdog
from streamer.pipeline.records import Partition

log = logging.getLogger(__name__)


class OnItsWay:
    """The positions sent in the background and not answered yet; an injected clock."""

    def __init__(self, deadline_s: float, clock: Callable[[], float]) -> None:
        self.deadline_s, self._clock = deadline_s, clock
        self._sent: dict[Partition, tuple[int, float]] = {}  # offset, when sent
        self._resent: dict[Partition, int] = {}  # sent again for want of an answer

    def sendable(self, positions: dict[Partition, int]) -> dict[Partition, int]:
        """``positions`` less the partitions with a commit on its way and not overdue yet, whatever
        position it carries: the broker may apply two commits of a partition in another order
        than they were sent, so a newer one waits for the answer to the older."""
        out: dict[Partition, int] = {}
        overdue: list[str] = []
        now = self._clock()
        for tp, off in positions.items():
            if self._held(tp, now):
                continue
            sent = self._sent.get(tp)
            if sent is not None:  # overdue
                if self._resent.get(tp) == sent[0]:  # the resend got none either: the consumer is wedged
                    watchdog.give_up(f"the commit of {tp[0]}[{tp[1]}] at {sent[0]}", 2 * self.deadline_s)
                self._resent[tp] = off
                del self._sent[tp]  # warned once, however the resend fares
                overdue.append(f"{tp[0]}[{tp[1]}] at {sent[0]}")
            out[tp] = off
        if overdue:
            log.warning("no answer to the background commit of %s within %.0f s: sending the position "
                        "again", ", ".join(overdue), self.deadline_s)
        return out

    def sent(self, positions: dict[Partition, int]) -> None:
        now = self._clock()
        self._sent.update((tp, (off, now)) for tp, off in positions.items())

    def answered(self, tp: Partition, offset: int, ok: bool) -> None:
        """An answer naming the position on its way clears it (and its resend: the consumer is
        not wedged), so does a failure naming no valid offset; a stale answer, to an older
        commit of the partition, leaves the newer one on its way."""
        sent = self._sent.get(tp)
        if sent is not None and (sent[0] == offset or (not ok and offset < 0)):
            del self._sent[tp]
            self._resent.pop(tp, None)

    def forget(self, tps: Iterable[Partition] | None = None) -> None:
        """Nothing of these partitions (None: of any) is on its way any more: committed
        synchronously, lost, or named by no answer that failed."""
        for tp in list(self._sent if tps is None else tps):
            self._sent.pop(tp, None)
            self._resent.pop(tp, None)

    def unsent(self, positions: dict[Partition, int]) -> bool:
        """Would any of ``positions`` go out now: nothing of its partition on its way, or overdue?
        (A partition waiting for an older commit's answer does not, so a quiet spell does not
        spend its commit on it.)"""
        now = self._clock()
        return any(not self._held(tp, now) for tp in positions)

    def _held(self, tp: Partition, now: float) -> bool:
        """A commit of ``tp`` is on its way and not overdue yet: nothing of it goes now."""
        sent = self._sent.get(tp)
        return sent is not None and now - sent[1] < self.deadline_s
