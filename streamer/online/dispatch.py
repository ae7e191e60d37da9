"""Online requests batched by the stream's batcher, admitted against their deadlines, answered by future.

Callers (the data plane) :meth:`Dispatcher.submit` a request's rows with a deadline and get a
``concurrent.futures.Future``, or, from an event loop, an ``asyncio.Future`` of that loop: the
answers of one batch are then settled with one wake-up of the loop, not one each. One thread
owns a :class:`MicroBatcher` (the stream's flush policy: ``max_size`` rows, or ``max_wait_ms``
after the batch's first row), scores each batch it flushes with one call, and answers each
request with its own rows of the :class:`Scored` batch and its time in the queue. A request
larger than the room left in a batch is cut, and answered when its last piece is scored, its
pieces joined.

Admission is decided at once by :class:`Admission` (online/admission.py): the queue bound, the
deadline against the measured rate, the stop; a request whose deadline passes while it waits
is answered with :class:`Expired` instead of being scored.

Whatever fails, each caller is answered and its rows leave the queue: a row the model fails on
alone fails its own request (the batch answers the others), a failed model call fails its
batch's requests, and so does a fault of this thread outside the call (logged); a failure
between batches (a reload, a challenger) is logged and serving goes on.

Worked example: ``max_size 64``, ``max_wait_ms 5``; 10 requests of one row each within 5 ms are
one model call of 10 rows, flushed 5 ms after the first arrived; each caller gets its own row.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from streamer.errors import BadRequest, Expired, InferenceError, Refused, Shed
from streamer.model.signature import Columns
from streamer.online.admission import Admission
from streamer.online.meters import OnlineMetrics
from streamer.pipeline.batcher import Batch, MicroBatcher
from streamer.pipeline.records import Scored

log = logging.getLogger(__name__)
IDLE_S = 0.5  # how long the thread waits for a request when no batch is open
Score = Callable[[Columns, list[str]], Scored]  # a batch's feature columns and its rows' event ids -> its scores


@dataclass(frozen=True, slots=True)
class Answer:
    """A request's rows of the batch that scored them (its pieces joined, when it was cut), its
    time from admission to the model call, the call's seconds, and when the call ended (the
    dispatcher's clock)."""

    scored: Scored
    queued_s: float
    model_s: float = 0.0
    done_at: float = 0.0

    @property
    def outputs(self) -> dict[str, np.ndarray]:
        """Each prediction field's values, by name."""
        return self.scored.scores.arrays


@dataclass
class _Pending:
    features: Columns
    deadline: float
    admitted: float
    future: Any  # a concurrent.futures.Future, or an asyncio.Future of ``loop``
    loop: asyncio.AbstractEventLoop | None = None
    name: str = ""  # the request's id: its rows' event ids (name, or name/i for several rows)
    parts: dict[int, Scored] = field(default_factory=dict)  # first row -> its rows scored so far
    scored: int = 0
    failed: bool = False  # answered with an error already (its other pieces are dropped)


@dataclass(frozen=True, slots=True)
class _Piece:
    """Rows ``[lo, hi)`` of one pending request: what the batcher holds and cuts."""

    pending: _Pending
    lo: int
    hi: int

    def __len__(self) -> int:
        return self.hi - self.lo

    def __getitem__(self, idx: slice) -> _Piece:
        start, stop, _ = idx.indices(len(self))
        return _Piece(self.pending, self.lo + start, self.lo + stop)

    def ids(self) -> list[str]:
        """Its rows' event ids: the request's id, and the row's index when it has several."""
        p = self.pending
        if len(p.features) == 1:
            return [p.name]
        return [f"{p.name}/{i}" for i in range(self.lo, self.hi)]


class Dispatcher:
    """Admits requests, batches them with the stream's flush policy and scores each batch once."""

    def __init__(self, score: Score, max_size: int, max_wait_ms: int, max_queue_rows: int,
                 clock: Callable[[], float] = time.monotonic, metrics: OnlineMetrics | None = None,
                 between: Callable[[], object] = lambda: None) -> None:
        """``between``: what runs between batches (a reload, the challengers' publishing)."""
        self._score, self._clock, self._between = score, clock, between
        self.metrics = metrics or OnlineMetrics()
        self._batcher: MicroBatcher[Any] = MicroBatcher(max_size, max_wait_ms, clock, join=list)
        self.admission = Admission(max_queue_rows, max_size, max_wait_ms / 1000.0, clock, self.metrics)
        self._inbox: queue.Queue[_Pending | None] = queue.Queue()
        self._lock = threading.Lock()  # admission's, and the order of the inbox against a stop
        self._thread = threading.Thread(target=self._work, name="online-batcher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def submit(self, features: Columns, deadline: float, loop: asyncio.AbstractEventLoop | None = None,
               name: str | None = None) -> Any:
        """Admit ``features`` (one request's rows) to be answered by ``deadline`` (the clock's time),
        or raise :class:`Shed` at once. With ``loop`` (the caller's, running), an asyncio future of
        it; else a concurrent one. ``name``: the request's id, its rows' event ids where the serving
        hands them on (the challengers' shadow predictions); a random one when not given."""
        n = len(features)
        if n == 0:
            raise BadRequest("the request holds no rows")
        with self._lock:
            admitted = self.admission.admit(n, deadline)
            pending = _Pending(features, deadline, admitted, Future() if loop is None else loop.create_future(), loop,
                               name or f"online-{uuid.uuid4().hex}")
            self._inbox.put(pending)  # under the lock: a stop's end marker comes after every admitted request
        return pending.future

    async def answer(self, features: Columns, deadline: float, name: str | None = None) -> Answer:
        """:meth:`submit` from the running event loop, and the answer awaited; every way it is
        not answered raises :class:`Refused`."""
        if len(features) > self.admission.max_queue_rows:
            raise Refused(413, f"the request holds {len(features)} rows; online.max_queue_rows is "
                               f"{self.admission.max_queue_rows}")
        try:
            future = self.submit(features, deadline, asyncio.get_running_loop(), name)
        except Shed as exc:
            raise Refused(503, f"shed: {exc}", exc.retry_after_s, why=exc.why) from None
        except BadRequest as exc:
            raise Refused(400, str(exc)) from None
        try:
            answer: Answer = await future
            return answer
        except Expired as exc:
            raise Refused(503, f"expired: {exc}", 1.0, why="expired") from None
        except Exception as exc:  # noqa: BLE001 - the model's failure is the answer
            raise Refused(500, f"the model failed: {exc}") from None

    def stop(self, timeout_s: float) -> None:
        """Refuse new requests, answer every admitted one, and end the thread (within ``timeout_s``)."""
        with self._lock:
            self.admission.stop()
        self._inbox.put(None)
        self._thread.join(timeout_s)

    # ---- the batching thread ----------------------------------------------------------------

    def _work(self) -> None:
        while True:
            wait = self._batcher.remaining_s()
            due: list[Batch[Any]] = []
            try:
                item = self._inbox.get(timeout=IDLE_S if wait is None else wait)
            except queue.Empty:
                pass
            else:
                if item is None:  # stop: what is open is scored, then the thread ends
                    self._drain()
                    return
                due += self._batcher.add(_Piece(item, 0, len(item.features)))
            polled = self._batcher.poll()
            if polled is not None:
                due.append(polled)
            for batch in due:
                self._run(batch.rows)
            try:
                self._between()  # between batches: a new model version goes in, challengers publish
            except Exception:  # noqa: BLE001 - the requests are answered whatever a reload or a challenger does
                log.exception("online: between batches")

    def _drain(self) -> None:
        while True:
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                for batch in self._batcher.add(_Piece(item, 0, len(item.features))):
                    self._run(batch.rows)
        last = self._batcher.flush("shutdown")
        if last is not None:
            self._run(last.rows)

    def _run(self, pieces: Sequence[_Piece]) -> None:
        """Score a batch and answer its callers; whatever fails, each caller is answered and the
        batch's rows leave the queue; then admission measures the cycle (online/admission.py)."""
        settle: list[tuple[_Pending, Answer | BaseException]] = []
        rows = sum(len(p) for p in pieces)
        backlog = self.admission.backlog(rows)
        try:
            self._score_pieces(pieces, settle)
        except Exception as exc:  # noqa: BLE001 - a fault of this thread fails its batch, not the server
            log.exception("online: a batch of %d rows failed", rows)
            answered = {id(p) for p, _ in settle}
            for piece in pieces:
                p = piece.pending
                if not p.failed and id(p) not in answered:
                    p.failed = True
                    settle.append((p, exc))
        finally:
            with self._lock:
                self.admission.release(rows)
            self._settle(settle)
        self.admission.cycle_ended(rows, backlog)

    def _score_pieces(self, pieces: Sequence[_Piece], settle: list[tuple[_Pending, Answer | BaseException]]) -> None:
        now = self._clock()
        live = []
        for piece in pieces:
            p = piece.pending
            if p.failed:
                continue
            expired = self.admission.expired(p.deadline, now)
            if expired is not None:
                p.failed = True
                settle.append((p, expired))
                continue
            live.append(piece)
        if not live:
            return
        features = Columns.join([p.pending.features[p.lo:p.hi] for p in live])
        started = self._clock()
        try:
            out = self._score(features, [i for p in live for i in p.ids()])
            short = {k: len(v) for k, v in out.scores.arrays.items() if len(v) != len(features)}
            if short:
                raise InferenceError(f"the model answered {short} rows for a batch of {len(features)}")
        except Exception as exc:  # noqa: BLE001 - every caller of the batch gets the model's failure
            for piece in live:
                if not piece.pending.failed:
                    piece.pending.failed = True
                    settle.append((piece.pending, exc))
            return
        ended = self._clock()
        self.admission.called(ended - started, len(features))
        self.metrics.batch_rows.observe(len(features))
        at = 0
        for piece in live:
            n, p = len(piece), piece.pending
            first, at = at, at + n
            if p.failed:  # another of its pieces failed: answered already
                continue
            bad = next((r for r in range(first, at) if r in out.poison), None) if out.poison else None
            if bad is not None:  # a row the model fails on alone: its request alone gets the error
                p.failed = True
                settle.append((p, InferenceError(f"row {piece.lo + bad - first} of the request: {out.poison[bad]}")))
                continue
            mine = out.rows(first, at)
            p.scored += n
            if p.scored < len(p.features):
                p.parts[piece.lo] = mine
                continue
            if p.parts:  # the last of its pieces: join them, in order
                p.parts[piece.lo] = mine
                try:
                    mine = replace(mine, scores=Columns.join([p.parts[k].scores for k in sorted(p.parts)]))
                except (KeyError, ValueError) as exc:  # pieces of two models (a swap, the fallback) that differ
                    p.failed = True
                    settle.append((p, InferenceError(f"its rows were scored by models that answer differently: "
                                                     f"{exc}")))
                    continue
            settle.append((p, Answer(mine, started - p.admitted, ended - started, ended)))

    @staticmethod
    def _settle(settle: list[tuple[_Pending, Answer | BaseException]]) -> None:
        """Answer the callers: concurrent futures at once, each loop's futures in one wake-up of it."""
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[Any, Answer | BaseException]]] = {}
        for p, result in settle:
            if p.loop is None:
                _put(p.future, result)
            else:
                by_loop.setdefault(p.loop, []).append((p.future, result))
        for loop, items in by_loop.items():
            try:
                loop.call_soon_threadsafe(_put_all, items)
            except RuntimeError:  # the loop closed: nobody waits for these answers
                pass


def _put(future: Any, result: Answer | BaseException) -> None:
    try:
        if future.done():  # a caller that gave up (cancelled)
            return
        if isinstance(result, BaseException):
            future.set_exception(result)
        else:
            future.set_result(result)
    except (asyncio.InvalidStateError, concurrent.futures.InvalidStateError):  # cancelled just now
        pass


def _put_all(items: list[tuple[Any, Answer | BaseException]]) -> None:
    for future, result in items:
        _put(future, result)
