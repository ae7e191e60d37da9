"""The holds: whether input flows, and why not; back-off and outputs to redo.

The processor *holds* (pauses its partitions, reports unhealthy, commits nothing past the
failure, retries with back-off) for four causes: the model looks broken, an output could not be
written (the dead-letter topic is missing or denied, the broker is away), input cannot be
decoded because something it needs is away (the Schema Registry: unreachable, slow, 5xx), or the
input is wholly broken (every row of the last ``broken_after`` chunks failed validation with one
reason class, pipeline/broken.py: a config or producer problem, not a stream of dead letters).
:class:`Holds` keeps one hold per cause, each a :class:`Hold` (reason, retry time, back-off), and answers
questions; it never calls into the processor, which acts on the answers. What to do with a
failed output is decided before it gets here (kafka/messages.py: refused, shrink, retry): only
the retries reach the holds.

Transitions (back-off: ``retry_backoff_s`` doubling per repeat up to ``retry_backoff_max_s``):

    hold     event                                   next                       the loop is told
    none     hold_model / hold_input / redo,          held (back-off 1x)         paused, unhealthy
             writes_failed
    held     the same cause again                     held (back-off 2x, max)    paused, unhealthy
    model    model_may_run before the retry time      model                      keep the batch
    model    model_answered                           none                       resume
    input    paused asked after the retry time        input (not paused)         read the chunk again
    input    input_decoded                            none                       resume
    none     judge: the Nth wholly broken chunk in a  broken (back-off 1x)       read it again later,
             row with one reason class                                           paused, unhealthy
    broken   paused asked after the retry time        broken (not paused)        read the chunk again
    broken   judge: wholly broken, the same class     broken (back-off 2x, max)  read it again later
    broken   judge: a row passes, or another failure  none                       route it as usual
    output   resend after the retry time              output (re-sent)           produce the redo list
    output   settle: nothing in flight, redo empty,   none                       resume
             re-sent (or an abort's back-off over)
    any      forget(partitions)                       the same                   their redo dropped

Worked example (backoff 0.5 s, max 30 s): a dead letter fails at t=0 -> held, redo it at 0.5;
re-sent at 0.5 and fails again -> back-off 1.0, redo at 1.5; re-sent at 1.5, acknowledged at 1.6
-> :meth:`settle` sees nothing in flight and releases the hold; input resumes.

Broken input (N = 3): chunks 1 and 2 fail wholly with "field 'amount' is null or missing ..."
and are dead-lettered (the pattern is not known yet); chunk 3 fails the same way -> held, not
dead-lettered, read again after 0.5 s; it fails the same way again -> back-off 1.0 s; the
producer is fixed, the next read has a row that passes -> released, the chunk routed as usual.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from streamer.kafka.messages import Failure, Output
from streamer.pipeline.broken import Broken
from streamer.pipeline.records import Partition

log = logging.getLogger(__name__)


@dataclass
class Hold:
    """Why the processor holds, and when it tries again."""

    reason: str
    retry_at: float
    backoff_s: float
    resent: bool = False  # the failed outputs were produced again


class Holds:
    """Blocked, back-off and redo state for one processor."""

    def __init__(self, retry_backoff_s: float, retry_backoff_max_s: float,
                 clock: Callable[[], float], broken_after: int = 0) -> None:
        """``broken_after``: wholly broken chunks in a row, of one reason class, that hold the input (0: never)."""
        self._first_s, self._max_s, self._clock = retry_backoff_s, retry_backoff_max_s, clock
        self.model: Hold | None = None
        self.delivery: Hold | None = None
        self.source: Hold | None = None  # decoding's dependency (the registry) is away
        self.broken: Hold | None = None  # every row fails validation the same way
        self._broken_after = broken_after
        self._streak: tuple[str, int] = ("", 0)  # the last chunks' shared reason class, how many in a row
        self._redo: list[Output] = []
        self._held_by = ""  # the model that holds (several models: pipeline/lanes.py)

    @property
    def blocked(self) -> bool:
        return (self.model is not None or self.delivery is not None or self.source is not None
                or self.broken is not None)

    @property
    def paused(self) -> bool:
        now = self._clock()
        # Input holds pause until their retry time, then let the loop read the chunk again.
        held = any(h is not None and now < h.retry_at for h in (self.source, self.broken))
        return self.model is not None or self.delivery is not None or held

    @property
    def reason(self) -> str | None:
        block = self.model or self.delivery or self.source or self.broken
        return block.reason if block else None

    # ---- input --------------------------------------------------------------------------------

    def hold_input(self, reason: str) -> None:
        """Input could not be decoded for want of a dependency: pause it, back off, re-read."""
        self.source = self._backoff(self.source, reason)
        log.error("%s; input paused, reading it again in %.1f s", reason, self.source.backoff_s)

    def input_decoded(self) -> None:
        """A chunk decoded: the dependency answers again."""
        if self.source is not None:
            log.info("input decodes again: resuming")
        self.source = None

    def judge(self, broken: Broken | None) -> bool:
        """A decoded chunk's verdict (pipeline/broken.py; None: a row passed, or the rows failed in
        different ways). True: hold the chunk (read it again after the back-off, dead-letter nothing
        of it); False: route it as usual."""
        count = self._streak[1] + 1 if broken is not None and broken.reason_class == self._streak[0] else 1
        self._streak = (broken.reason_class, count) if broken is not None else ("", 0)
        if broken is not None and 0 < self._broken_after <= count:
            last = "batch" if self._broken_after == 1 else f"{self._broken_after} batches"
            reason = (f"input broken: every row of the last {last} fails validation with: {broken.example} "
                      f"(fix the events or the config: the held rows are read again)")
            self.broken = self._backoff(self.broken, reason)
            log.error("%s; input paused, reading it again in %.1f s", self.broken.reason, self.broken.backoff_s)
            return True
        if self.broken is not None:
            log.info("input passes validation again (or fails another way): resuming")
        self.broken = None
        return False

    # ---- the model --------------------------------------------------------------------------

    def model_may_run(self) -> bool:
        """False while the model is held and its retry is not due yet."""
        return self.model is None or self._clock() >= self.model.retry_at

    def hold_model(self, reason: str, model: str = "") -> None:
        """A model failed: block (or stay blocked) with a longer back-off, held by ``model``."""
        self.model = self._backoff(self.model, f"model failing: {reason}")
        self._held_by = model
        log.error("%s; input paused, retrying in %.1f s", reason, self.model.backoff_s)

    def model_answered(self, model: str = "") -> None:
        """A model scored a batch: unblock, unless another model holds (its answer alone releases it)."""
        if self.model is not None and model != self._held_by:
            return
        if self.model is not None:
            log.info("the model answers again: resuming input")
        self.model = None

    # ---- outputs ----------------------------------------------------------------------------

    def redo(self, retry: Sequence[Failure]) -> None:
        """Outputs to produce again after a back-off (their verdict: retry); input holds meanwhile."""
        if not retry:
            return
        out, err = retry[-1]
        self._redo.extend(o for o, _ in retry)
        backoff = self.writes_failed(f"cannot write to {out.topic}: {err.str()}")
        log.warning("%d outputs could not be written (%s: %s): input paused, retrying in %.1f s",
                    len(retry), out.topic, err, backoff)

    def writes_failed(self, reason: str) -> float:
        """Writing failed (an aborted transaction redoes from its commit): back off."""
        self.delivery = self._backoff(self.delivery, reason)
        return self.delivery.backoff_s

    def resend(self) -> list[Output]:
        """The outputs to produce again, once their back-off is over (then marked as re-sent)."""
        block = self.delivery
        if block is None or not self._redo or self._clock() < block.retry_at:
            return []
        redo, self._redo = self._redo, []
        block.resent = True
        return redo

    def settle(self, in_flight: int) -> bool:
        """Unblock writes when nothing failed again; True when this call unblocked."""
        block = self.delivery
        if block is None or self._redo or in_flight:
            return False
        # Everything re-sent was acknowledged (a failure would have refilled the redo list), or,
        # after an aborted transaction, the back-off is over and the redo starts from the commit.
        if block.resent or self._clock() >= block.retry_at:
            self.delivery = None
            log.info("outputs are being written again: resuming input")
            return True
        return False

    def forget(self, tps: set[Partition]) -> None:
        """Partitions revoked or lost: their outputs are their next owner's to redo."""
        self._redo = [o for o in self._redo if o.source_tp not in tps]

    def _backoff(self, block: Hold | None, reason: str) -> Hold:
        backoff = self._first_s if block is None else min(block.backoff_s * 2, self._max_s)
        return Hold(reason, self._clock() + backoff, backoff)
