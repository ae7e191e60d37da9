"""Flushed batches to the model, strictly in order: on the loop's thread, or on an inference thread.

Pipelined (``model.pipelined``): ONNX Runtime releases the GIL while it runs, so one inference
thread scores batch N while the loop decodes batch N+1 and produces batch N-1. At most
:data:`DEPTH` batches are handed to the thread at a time (the rest wait in order); with
:data:`FULL` batches queued and in flight the loop reads nothing more until one is produced
(backpressure: the model, not memory, sets the pace; the consumer is still polled every few
batches, so the group sees it alive). The loop takes results only in the order it handed the
batches out, so outputs per partition stay in input order, and every batch is scored whole by
one model call sequence (bisection happens inside the thread's call, and a hot swap names each
batch by the model that scored it). Whatever disturbs the batches in flight (a batch the model
cannot take, a rebalance, an aborted transaction) bumps a generation: results of an older
generation are dropped when they arrive (the thread skips those it has not begun), and the
surviving batches are handed out again, in order. Not pipelined, the same calls score each
batch inline.

``model.pipelined`` unset (auto): inline at first; pipelined once the median of the first
:data:`AUTO_BATCHES` batches of at least half ``batching.max_size`` rows took the model
:data:`AUTO_MS` or more (a model that fast gains nothing from a thread); a batch searched for poison
rows is not timed.

Worked example (depth 2): batches 1 2 3 queued; 1 and 2 go to the thread; 1 comes back, its
outputs are produced while 3 goes out; 2 fails (the model is broken): it and 3 go back to the head
of the queue, 3's result is dropped when it arrives, and both are handed out again once the
model may run.
"""

from __future__ import annotations

import logging
import queue
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from streamer.errors import ModelBrokenError
from streamer.pipeline.batcher import Batch
from streamer.pipeline.records import Rows, Scored
from streamer.pipeline.serving import Serving

log = logging.getLogger(__name__)
DEPTH = 2  # batches handed to the inference thread at a time: one running, one ready behind it
AUTO_MS = 1.0
AUTO_BATCHES = 3
POLL_S = 0.001  # the loop's consume wait while batches are in flight
FULL = 2 * DEPTH  # batches queued and in flight at which the loop stops reading (backpressure)


@dataclass(frozen=True, slots=True)
class Inferred:
    """A batch through the model: its ``out``, or the ``error`` that holds it (the loop retries it later)."""

    batch: Batch[Rows]
    out: Scored | None
    error: ModelBrokenError | None = None
    seconds: float = 0.0


class Inference:
    """The scoring queue of one processor."""

    def __init__(self, serving: Serving, pipelined: bool | None, rows: int) -> None:
        self._serving, self._want, self._rows = serving, pipelined, rows
        self.pipelined = False
        self._pending: deque[Batch[Rows]] = deque()  # not handed out yet, in order
        self._inflight: deque[Batch[Rows]] = deque()  # handed to the thread, in order
        self._generation = 0
        self._inbox: queue.Queue[tuple[int, Batch[Rows]] | None] = queue.Queue()
        self._outbox: queue.Queue[tuple[int, Inferred, BaseException | None]] = queue.Queue()
        self._arrived: deque[tuple[int, Inferred, BaseException | None]] = deque()  # taken by wait()
        self._thread: threading.Thread | None = None
        self._timings: list[float] = []  # auto: seconds of the first full-ish batches

    def start(self) -> None:
        """Start the inference thread when pipelined; auto starts inline and decides on the
        first :data:`AUTO_BATCHES` batches of at least half ``batching.max_size`` rows (no model
        call of its own: a model that hangs from the start hangs the loop, visibly)."""
        if self._want:
            self._start_thread()
        later = " (pipelined if the model proves heavy)" if self._want is None else ""
        log.info("inference %s", "pipelined on its own thread" if self._want
                 else f"on the loop's thread{later}")

    def _start_thread(self) -> None:
        self.pipelined = True
        self._thread = threading.Thread(target=self._work, name="inference", daemon=True)
        self._thread.start()

    def _timed(self, done: Inferred) -> None:
        """Auto: time full-ish batches scored inline in one model call (not the fallback's, which
        makes none); pipeline once their median is heavy. A batch searched for poison rows is not
        timed: its many small calls are mostly the search's Python, which holds the GIL, so a
        thread would only take turns with the loop (every 1%-poison benchmark run went pipelined)."""
        if done.out is None or done.out.calls != 1 or len(done.batch.rows) * 2 < self._rows:
            return
        self._timings.append(done.seconds)
        if len(self._timings) < AUTO_BATCHES:
            return
        ms = statistics.median(self._timings) * 1000
        self._want = heavy = ms >= AUTO_MS
        log.info("the model takes %.1f ms a batch: inference %s", ms,
                 "pipelined from now on" if heavy else "stays on the loop's thread")
        if heavy:
            self._start_thread()

    @property
    def full(self) -> bool:
        return len(self) >= FULL

    def behind(self, timeout_s: float) -> bool:
        """Full (the model is behind): wait up to ``timeout_s`` for a result, and tell the loop
        to read nothing this pass. Reading on would only grow the queue; pausing the partitions
        instead makes librdkafka drop what it prefetched and fetch it again on resume (measured:
        a quarter of the throughput on Kafka)."""
        if not self.full:
            return False
        self.wait(timeout_s)
        return True

    @property
    def poll_s(self) -> float:
        """How long the loop may block in consume: briefly while the thread has batches, whose
        results are to be produced as soon as they come."""
        return POLL_S if self._inflight else float("inf")

    def __len__(self) -> int:
        return len(self._pending) + len(self._inflight)

    def add(self, batches: list[Batch[Rows]] | Batch[Rows]) -> None:
        self._pending.extend(batches if isinstance(batches, list) else [batches])

    def ready(self, may_run: Callable[[], bool]) -> Iterator[Inferred]:
        """Scored batches, in order. Stops after a batch the model could not take (its Inferred
        carries the error; it stays first in line). ``may_run`` is asked before each hand-out."""
        if not self.pipelined:
            while self._pending and may_run():
                done = self._score(self._pending[0])
                if done.error is None:
                    self._pending.popleft()
                if self._want is None:
                    self._timed(done)
                yield done
                if self.pipelined:  # decided just now: the rest go to the thread
                    break
                if done.error is not None:
                    return
            return
        self._hand_out(may_run)
        while self._inflight:
            try:
                item = self._arrived.popleft() if self._arrived else self._outbox.get_nowait()
            except queue.Empty:
                return
            generation, done, crash = item
            if crash is not None:
                raise crash  # a bug in the thread: the loop dies as it would have inline
            if generation != self._generation:
                continue  # disturbed since it was handed out: scored again from the queue
            assert done.batch is self._inflight[0], "results come back in hand-out order"
            if done.error is not None:
                self._take_back()
                yield done
                return
            self._inflight.popleft()
            yield done
            self._hand_out(may_run)

    def wait(self, timeout_s: float = 1.0) -> None:
        """Block until the next result is there (or ``timeout_s``): a drain waits for the thread."""
        if self._inflight and not self._arrived:
            try:
                self._arrived.append(self._outbox.get(timeout=timeout_s))  # ready() takes it first
            except queue.Empty:
                return

    def keep(self, keep: Callable[[Rows], Rows]) -> None:
        """Keep only ``keep(rows)`` of every batch (a rebalance); in-flight ones are redone."""
        self._take_back()
        self._pending = deque(b for b in (b.keep(keep) for b in self._pending) if len(b.rows))

    def clear(self) -> None:
        """Drop every batch (an aborted transaction reads them again)."""
        self._take_back()
        self._pending.clear()

    def close(self) -> None:
        if self._thread is not None:
            self._generation += 1
            self._inbox.put(None)
            self._thread.join(30)

    # ---- internals ------------------------------------------------------------------------

    def _hand_out(self, may_run: Callable[[], bool]) -> None:
        while self._pending and len(self._inflight) < DEPTH and may_run():
            batch = self._pending.popleft()
            self._inflight.append(batch)
            self._inbox.put((self._generation, batch))

    def _take_back(self) -> None:
        """Everything in flight back to the head of the queue, in order; its results are stale."""
        if self._inflight:
            self._generation += 1
            self._pending.extendleft(reversed(self._inflight))
            self._inflight.clear()

    def _score(self, batch: Batch[Rows]) -> Inferred:
        started = time.perf_counter()
        try:
            out = self._serving.score(batch.rows)
        except ModelBrokenError as exc:
            return Inferred(batch, None, exc, time.perf_counter() - started)
        return Inferred(batch, out, None, time.perf_counter() - started)

    def _work(self) -> None:
        while (item := self._inbox.get()) is not None:
            generation, batch = item
            if generation != self._generation:
                continue  # taken back since (an int read under the GIL): not scored for nothing
            try:
                self._outbox.put((generation, self._score(batch), None))
            except BaseException as exc:  # noqa: BLE001 - handed to the loop, which raises it
                self._outbox.put((generation, Inferred(batch, None), exc))
