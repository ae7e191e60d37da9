"""The gate: whether input flows, and why not. Blocked state, back-off and outputs to redo.

The processor *blocks* (pauses its partitions, reports unhealthy, commits nothing past the
failure, retries with back-off) in three cases: the model looks broken, an output could not be
written (the dead-letter topic is missing or denied, the broker is away), or input cannot be
decoded because something it needs is away (the Schema Registry: unreachable, slow, 5xx). The
gate keeps that state and answers questions; it never calls into the processor, which acts on
the answers:

- :meth:`model_may_run`: may the next batch go to the model now (not blocked, or retry due)?
- :meth:`hold_input` / :meth:`input_decoded`: decoding failed for want of a dependency (the
  loop re-reads the chunk after the back-off) / decoding works again;
- :meth:`resend`: the outputs to produce again now (back-off over), else nothing;
- :meth:`settle`: unblock once every re-sent output is acknowledged (or, after an aborted
  transaction, once the back-off is over and the redo starts from the last commit);
- :attr:`paused`: pause input now (blocked, and for a held input, its retry not yet due);
- :attr:`blocked` / :attr:`reason`: report unhealthy, and why.

Back-off doubles from ``retry_backoff_s`` up to ``retry_backoff_max_s`` while a cause persists.

Worked example (backoff 0.5 s, max 30 s): a dead letter fails at t=0 -> blocked, redo it at 0.5;
re-sent at 0.5 and fails again -> back-off 1.0, redo at 1.5; re-sent at 1.5, acknowledged at 1.6
-> :meth:`settle` sees nothing in flight and unblocks; input resumes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass

from confluent_kafka import KafkaError

from streamer.kafka.deadletter import cut_short, is_cut_short
from streamer.kafka.delivery import TOO_LARGE, Output, is_permanent
from streamer.pipeline.records import TopicPartition

log = logging.getLogger(__name__)


@dataclass
class Block:
    """Why the processor is blocked, and when it tries again."""

    reason: str
    retry_at: float
    backoff_s: float
    resent: bool = False  # the failed outputs were produced again


class Gate:
    """Blocked, back-off and redo state for one processor."""

    def __init__(self, retry_backoff_s: float, retry_backoff_max_s: float,
                 clock: Callable[[], float]) -> None:
        self._first_s, self._max_s, self._clock = retry_backoff_s, retry_backoff_max_s, clock
        self.model: Block | None = None
        self.delivery: Block | None = None
        self.source: Block | None = None  # decoding's dependency (the registry) is away
        self._redo: list[Output] = []

    @property
    def blocked(self) -> bool:
        return self.model is not None or self.delivery is not None or self.source is not None

    @property
    def paused(self) -> bool:
        held = self.source is not None and self._clock() < self.source.retry_at
        return self.model is not None or self.delivery is not None or held

    @property
    def reason(self) -> str | None:
        block = self.model or self.delivery or self.source
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

    # ---- the model --------------------------------------------------------------------------

    def model_may_run(self) -> bool:
        """False while the model is held and its retry is not due yet."""
        return self.model is None or self._clock() >= self.model.retry_at

    def hold_model(self, reason: str) -> None:
        """The model failed: block (or stay blocked) with a longer back-off."""
        self.model = self._backoff(self.model, f"model failing: {reason}")
        log.error("%s; input paused, retrying in %.1f s", reason, self.model.backoff_s)

    def model_answered(self) -> None:
        """The model scored a batch: unblock."""
        if self.model is not None:
            log.info("the model answers again: resuming input")
        self.model = None

    # ---- outputs ----------------------------------------------------------------------------

    def outputs_failed(self, failed: list[tuple[Output, KafkaError]], assigned: Collection[TopicPartition]
                       ) -> tuple[list[tuple[Output, KafkaError]], list[Output]]:
        """Sort failed deliveries into ``(refused, now)``: a prediction the broker refuses for good
        (too large, invalid) is refused, to be dead-lettered; a dead letter too large for its topic
        comes back cut short (deadletter.cut_short), to produce now; the rest are kept to produce
        again after a back-off, and block input meanwhile. Those of partitions revoked or lost
        meanwhile are their new owner's to redo."""
        refused, retry, now = [], [], []
        for out, err in failed:
            if out.source_tp not in assigned:
                continue
            if out.stage is not None and err.code() in TOO_LARGE and not is_cut_short(out.headers):
                now.append(cut_short(out))
            else:
                (refused if out.stage is None and is_permanent(err) else retry).append((out, err))
        if retry:
            out, err = retry[-1]
            self._redo.extend(o for o, _ in retry)
            backoff = self.writes_failed(f"cannot write to {out.topic}: {err.str()}")
            log.warning("%d outputs could not be written (%s: %s): input paused, retrying in %.1f s",
                        len(retry), out.topic, err, backoff)
        return refused, now

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

    def forget(self, tps: set[TopicPartition]) -> None:
        """Partitions revoked or lost: their outputs are their next owner's to redo."""
        self._redo = [o for o in self._redo if o.source_tp not in tps]

    def _backoff(self, block: Block | None, reason: str) -> Block:
        backoff = self._first_s if block is None else min(block.backoff_s * 2, self._max_s)
        return Block(reason, self._clock() + backoff, backoff)
