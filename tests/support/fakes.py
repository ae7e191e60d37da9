"""Small stand-ins for librdkafka's consumer and producer, for unit tests of the processor's loop.

They model only what the loop relies on, the way librdkafka behaves: rebalance callbacks run
inside ``consume()``; ``close()`` runs the revoke callback; delivery callbacks run inside
``poll()`` and ``flush()``; a paused partition hands out nothing. The real broker tests prove the
integration; these prove the loop's decisions, fast and deterministically.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

TP = tuple[str, int]


class FakeMessage:
    def __init__(self, topic: str, partition: int, offset: int, value: bytes | None,
                 key: bytes | None = None, timestamp_ms: int = 1_700_000_000_000) -> None:
        self._t, self._p, self._o, self._v, self._k, self._ts = topic, partition, offset, value, key, timestamp_ms

    def topic(self) -> str:
        return self._t

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o

    def value(self) -> bytes | None:
        return self._v

    def key(self) -> bytes | None:
        return self._k

    def headers(self) -> list[tuple[str, bytes]] | None:
        return None

    def timestamp(self) -> tuple[int, int]:
        return (1, self._ts)

    def error(self) -> None:
        return None


def event(i: int, width: int = 32) -> bytes:
    """A JSON feature event the processor accepts (``input.format: json``)."""
    return json.dumps({"event_id": f"e{i}", "entity_id": f"a{i}", "event_time": 1_700_000_000_000,
                       "features": [0.01 * i] * width}).encode()


class FakeConsumer:
    """Partitions with logs; a group that assigns, revokes or loses them when told to."""

    def __init__(self) -> None:
        self.logs: dict[TP, list[FakeMessage]] = {}
        self.position_of: dict[TP, int] = {}
        self.assigned: set[TP] = set()
        self.paused: set[TP] = set()
        self.commits: list[dict[TP, int]] = []  # every successful commit, as given
        self.commit_errors: list[Exception | dict[TP, KafkaError]] = []  # the next commits fail so
        self.committed: dict[TP, int] = {}
        self._callbacks: dict[str, Callable[..., None]] = {}
        # called with (kind, partitions) as each rebalance callback returns: what it left behind
        self.after_callback: Callable[[str, list[TP]], None] = lambda kind, tps: None
        self._rebalances: list[tuple[str, list[TP]]] = []
        self.in_callback: str | None = None
        self.closed = False
        self.clock: Any = None  # a FakeClock: an empty poll() advances it by its whole timeout
        self._on_commit: Callable[..., None] | None = None
        self._answers: list[tuple[Any, list[Any]]] = []  # asynchronous commits, reported on consume

    # ---- test controls ----------------------------------------------------------------------
    def append(self, tp: TP, values: list[bytes]) -> None:
        log = self.logs.setdefault(tp, [])
        base = len(log)
        log.extend(FakeMessage(tp[0], tp[1], base + i, v, key=b"k") for i, v in enumerate(values))

    def rebalance(self, kind: str, tps: list[TP]) -> None:
        """``assign``, ``revoke`` or ``lose`` these partitions during the next ``consume()``."""
        self._rebalances.append((kind, tps))

    # ---- the librdkafka surface the processor uses ------------------------------------------
    def subscribe(self, topics: list[str], on_assign: Callable[..., None], on_revoke: Callable[..., None],
                  on_lost: Callable[..., None]) -> None:
        self._callbacks = {"assign": on_assign, "revoke": on_revoke, "lose": on_lost}

    def consume(self, n: int, timeout: float) -> list[FakeMessage]:
        answers, self._answers = self._answers, []
        for err, result in answers:
            self._on_commit(err, result)
        while self._rebalances:
            kind, tps = self._rebalances.pop(0)
            self._run_callback(kind, tps)
        out: list[FakeMessage] = []
        for tp in sorted(self.assigned - self.paused):
            log, pos = self.logs.get(tp, []), self.position_of.get(tp, self.committed.get(tp, 0))
            take = log[pos:pos + n - len(out)]
            out.extend(take)
            self.position_of[tp] = pos + len(take)
        return out

    def poll(self, timeout: float) -> FakeMessage | None:
        got = self.consume(1, timeout)
        if not got and timeout > 0:  # a real consumer waits, and other threads (inference) run meanwhile
            time.sleep(min(timeout, 0.001))
            if self.clock is not None:
                self.clock.advance(timeout)
        return got[0] if got else None

    def configure(self, on_commit: Callable[..., None] | None = None, **_: Any) -> FakeConsumer:
        """Take the client settings the processor passes (only the commit callback matters)."""
        self._on_commit = on_commit
        return self

    def commit(self, offsets: list[TopicPartition], asynchronous: bool = True) -> list[TopicPartition] | None:
        """Synchronous: the result, or raise. Asynchronous: the same outcome is reported to
        ``on_commit`` during the next ``consume()``/``poll()``, as librdkafka does."""
        if not asynchronous:
            return self._commit(offsets)
        assert self._on_commit is not None, "an asynchronous commit needs an on_commit callback"
        try:
            result = self._commit(offsets)
        except KafkaException as exc:
            self._answers.append((exc.args[0], offsets))
            return None
        failed = [tp for tp in result if tp.error is not None]
        self._answers.append((failed[0].error if failed else None, result))
        return None

    def _commit(self, offsets: list[TopicPartition]) -> list[TopicPartition]:
        if self.commit_errors:
            failure = self.commit_errors.pop(0)
            if isinstance(failure, Exception):
                raise failure
            result = []
            for tp in offsets:
                err = failure.get((tp.topic, tp.partition))
                result.append(TopicPartition(tp.topic, tp.partition, tp.offset) if err is None else _failed(tp, err))
            self._record({(tp.topic, tp.partition): tp.offset for tp in result if tp.error is None})
            return result
        self._record({(tp.topic, tp.partition): tp.offset for tp in offsets})
        return [TopicPartition(tp.topic, tp.partition, tp.offset) for tp in offsets]

    def pause(self, tps: list[TopicPartition]) -> None:
        self.paused |= {(tp.topic, tp.partition) for tp in tps}

    def resume(self, tps: list[TopicPartition]) -> None:
        self.paused -= {(tp.topic, tp.partition) for tp in tps}

    def seek(self, tp: TopicPartition) -> None:
        self.position_of[(tp.topic, tp.partition)] = tp.offset

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self.position_of.get((tp.topic, tp.partition), 0))
                for tp in tps]

    def consumer_group_metadata(self) -> str:
        return "group-metadata"

    def close(self) -> None:
        if self.assigned:
            self._run_callback("revoke", sorted(self.assigned))
        self.closed = True

    def _run_callback(self, kind: str, tps: list[TP]) -> None:
        parts = [TopicPartition(t, p) for t, p in tps]
        if kind == "assign":
            self.assigned |= set(tps)
        self.in_callback = kind
        try:
            self._callbacks[kind](self, parts)
        finally:
            self.in_callback = None
        self.after_callback(kind, tps)
        if kind != "assign":
            self.assigned -= set(tps)
            for tp in tps:  # the next owner starts from the committed offset
                self.position_of.pop(tp, None)

    def _record(self, positions: dict[TP, int]) -> None:
        self.commits.append(positions)
        self.committed.update(positions)


def _failed(tp: TopicPartition, err: KafkaError) -> Any:
    """What librdkafka returns for a partition whose commit failed (``error`` is read-only on a
    real TopicPartition, so a stand-in with the same fields)."""
    return SimpleNamespace(topic=tp.topic, partition=tp.partition, offset=tp.offset, error=err)


class FakeProducer:
    """Holds produced messages until ``poll``/``flush`` reports them, acked or failed as told."""

    def __init__(self) -> None:
        self.pending: list[tuple[str, bytes | None, Callable[..., None], Any]] = []
        self.written: list[tuple[str, bytes | None]] = []  # acknowledged, in order
        self.written_headers: list[Any] = []  # the headers of each of written, in its order
        self.fail_next = 0  # this many of the next reports fail
        self.error = KafkaError(KafkaError._MSG_TIMED_OUT)
        self.hold = False  # report nothing on poll() (flush() still reports, as it waits)
        self.transactions: list[str] = []  # init, begin, send_offsets, commit, abort, in order
        self.sent_offsets: list[dict[TP, int]] = []
        self.fatal_in: dict[str, KafkaError] = {}  # transactional call -> the fatal error it raises
        self.abortable_in: dict[str, KafkaError] = {}  # transactional call -> raised once, abortable
        self.purged = False

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None,
                headers: Any = None, on_delivery: Callable[..., None] | None = None) -> None:
        assert on_delivery is not None
        self.pending.append((topic, value, on_delivery, headers))

    def produce_batch(self, topic: str, messages: list[dict[str, Any]],
                      on_delivery: Callable[..., None] | None = None) -> int:
        for m in messages:  # as librdkafka's batch call: a message's headers are not taken
            self.produce(topic, m.get("value"), m.get("key"), on_delivery=on_delivery)
        return len(messages)

    def poll(self, timeout: float = 0) -> int:
        return 0 if self.hold else self._report()

    def flush(self, timeout: float = 0) -> int:
        self._report()
        return len(self.pending)

    def __len__(self) -> int:
        return len(self.pending)

    def _report(self) -> int:
        reported, self.pending = self.pending, []
        for topic, value, callback, headers in reported:
            if self.fail_next > 0:
                self.fail_next -= 1
                callback(self.error, FakeMessage(topic, -1, -1, value))
            else:
                self.written.append((topic, value))
                self.written_headers.append(headers)
                callback(None, FakeMessage(topic, -1, -1, value))
        return len(reported)

    # ---- transactions -------------------------------------------------------------------------
    def init_transactions(self, timeout: float) -> None:
        self.transactions.append("init")

    def begin_transaction(self) -> None:
        self.transactions.append("begin")

    def send_offsets_to_transaction(self, offsets: list[TopicPartition], metadata: Any, timeout: float) -> None:
        assert metadata == "group-metadata"
        self.transactions.append("send_offsets")
        self.sent_offsets.append({(tp.topic, tp.partition): tp.offset for tp in offsets})

    def commit_transaction(self, timeout: float) -> None:
        if "commit" in self.abortable_in:
            raise KafkaException(self.abortable_in.pop("commit"))
        self.transactions.append("commit")

    def abort_transaction(self, timeout: float) -> None:
        self.transactions.append("abort")
        if "abort" in self.fatal_in:
            raise KafkaException(self.fatal_in["abort"])
        self.pending = []  # aborted: their reports never come

    def purge(self) -> None:
        self.purged, self.pending = True, []


def raise_kafka(code: int) -> KafkaException:
    return KafkaException(KafkaError(code))


def serving_of(cfg: Any, runner: Any, clock: Callable[[], float], **kw: Any) -> Any:
    """A Serving of ``runner`` under ``cfg``'s model, processing and batch size (what wiring hands it)."""
    from streamer.pipeline.serving import Serving

    return Serving(cfg.model, cfg.processing, cfg.batching.max_size, runner, clock, **kw)
