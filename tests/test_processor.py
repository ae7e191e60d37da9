"""The processor's rebalance, blocking and commit paths, driven with fake clients: no broker.

The loop runs in the test's thread; ``until`` is called once per pass, and the steps below act
between passes the way the broker would between two ``consume()`` calls. The real broker tests
(`*_kafka.py`) prove the same promises end to end.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from confluent_kafka import KafkaError
from prometheus_client import CollectorRegistry

from streamer.config import Config, dead_letter_topic, with_overrides
from streamer.config_file import load_config
from streamer.errors import BrokerError, ConfigError, ProducerFatalError
from streamer.formats.codec import Codec
from streamer.formats.configured import output_codec
from streamer.formats.json_events import JsonCodec
from streamer.house import Wiring
from streamer.kafka.checkpoint import FENCE_WINDOW_S, MAX_RENEWALS
from streamer.kafka.clients import KafkaClients
from streamer.kafka.side import open_kafka
from streamer.kafka.topics import TopicWait
from streamer.observe.metrics import Metrics
from streamer.observe.stats import Stats
from streamer.pipeline.inference import FULL
from streamer.processor import Processor
from streamer.testing import FakeClock, FunctionRunner
from tests.support.fakes import FakeConsumer, FakeProducer, event, raise_kafka, serving_of

ROOT = Path(__file__).resolve().parent.parent
TOPIC = "features"
P0, P1 = (TOPIC, 0), (TOPIC, 1)


def config(guarantee: str = "at_least_once", max_wait_ms: int = 60_000, pipelined: bool = False,
           **processing: object) -> Config:
    cfg = load_config(ROOT / "deploy" / "config" / "example.yaml",
                      env={"KAFKA_BOOTSTRAP": "fake:9092", "INPUT_TOPIC": TOPIC, "OUTPUT_TOPIC": "scores",
                           "GROUP_ID": "g"})
    return with_overrides(cfg, input={"format": "json", "schema": None}, model={"pipelined": pipelined},
                          batching={"max_size": 100, "max_wait_ms": max_wait_ms},
                          processing={"guarantee": guarantee, "commit_interval_ms": 50,
                                      "retry_backoff_ms": 20, "retry_backoff_max_ms": 40, **processing})


class Harness:
    """A processor wired to a fake consumer and producer."""

    def __init__(self, cfg: Config, runner: Any = None, decoder: Codec | None = None,
                 topics: TopicWait | None = None, metrics: Metrics | None = None) -> None:
        self.consumer, self.producer = FakeConsumer(), FakeProducer()
        self.producers: list[FakeProducer] = []  # every one the processor made, in order
        self.error_cb: Callable[[KafkaError], None] = lambda err: None
        clients = KafkaClients(consumer=lambda **kw: self.consumer.configure(**kw), producer=self._producer,
                               ensure_topic=lambda topic, like: None)
        runner = runner or FunctionRunner(lambda x: x[:, :1], 32)
        self.clock = FakeClock()  # each pass of the loop takes 10 ms of it
        self.metrics = metrics
        wiring = Wiring(cfg, serving_of(cfg, runner, self.clock), decoder or JsonCodec(cfg.input.max_message_bytes),
                        output_codec(cfg), open_kafka(cfg, clients), metrics=metrics, clock=self.clock,
                        topics=topics)
        self.processor = Processor(wiring)

    def _producer(self, error_cb: Callable[[KafkaError], None], **_: object) -> FakeProducer:
        """The first producer is ``self.producer`` (set up before the run); each later one (a
        replacement for a fatal one) is fresh and becomes ``self.producer``."""
        if self.producers:
            self.producer = FakeProducer()
        self.producers.append(self.producer)
        self.error_cb = error_cb
        return self.producer

    def run(self, *steps: Callable[[Stats], bool], passes: int = 200) -> None:
        """Run the loop; each step is called every pass until it returns True, then the next.
        The loop stops after the last step (or fails after ``passes`` passes)."""
        todo, count = list(steps), [0]

        def until(stats: Stats) -> bool:
            count[0] += 1
            self.clock.advance(0.01)
            assert count[0] < passes, f"steps left undone after {passes} passes: {todo}"
            while todo and todo[0](stats):
                todo.pop(0)
            return not todo

        self.processor.run(until=until)

    def predictions(self) -> list[tuple[int, int]]:
        """(source partition, source offset) of every acknowledged prediction, in write order."""
        codec = output_codec(self.processor.cfg)
        return [(p["source_partition"], p["source_offset"])
                for p in (codec.decode(v) for t, v in self.producer.written if t == "scores")]


@pytest.mark.parametrize("pipelined", [False, True])
def test_revoke_drains_the_open_batch_and_commits_it_before_returning(pipelined: bool) -> None:
    h = Harness(config(pipelined=pipelined))  # max_wait 60 s: nothing flushes by time, only by the revoke
    h.consumer.rebalance("assign", [P0, P1])
    h.consumer.append(P0, [event(i) for i in range(5)])
    h.consumer.append(P1, [event(i) for i in range(3)])
    seen_in_revoke: dict[str, object] = {}

    def watched(kind: str, parts: list) -> None:
        if kind == "revoke":
            seen_in_revoke.update(committed=dict(h.consumer.committed), written=len(h.producer.written))

    h.consumer.after_callback = watched

    def consumed(s: Stats) -> bool:
        if s.events == 8:
            assert s.predictions == 0 and not h.consumer.commits  # the batch is open, nothing due
            h.consumer.rebalance("revoke", [P0])
            return True
        return False

    h.run(consumed, lambda s: P0 not in h.consumer.assigned)
    # Before the callback returned: every row scored, acknowledged and committed.
    assert seen_in_revoke == {"committed": {P0: 5, P1: 3}, "written": 8}
    assert h.processor.stats.flushes["revoke"] == 1
    assert sorted(h.predictions()) == [(0, i) for i in range(5)] + [(1, i) for i in range(3)]


def test_lost_partitions_commit_nothing_of_their_work() -> None:
    h = Harness(config(max_wait_ms=0))
    h.producer.hold = True  # outputs sent, their acks not reported yet
    h.consumer.rebalance("assign", [P0, P1])
    h.consumer.append(P0, [event(i) for i in range(4)])
    h.consumer.append(P1, [event(i) for i in range(4)])

    def sent(s: Stats) -> bool:
        if len(h.producer.pending) == 8:
            h.consumer.rebalance("lose", [P0])
            return True
        return False

    def lost_then_acked(s: Stats) -> bool:
        if P0 in h.consumer.assigned:
            return False
        h.producer.hold = False
        return s.predictions == 8

    h.run(sent, lost_then_acked)
    assert all(P0 not in c for c in h.consumer.commits), h.consumer.commits
    assert h.consumer.committed == {P1: 4}


def test_a_failed_delivery_blocks_input_and_the_redo_unblocks_it() -> None:
    h = Harness(config(max_wait_ms=0))
    h.consumer.rebalance("assign", [P0])
    h.consumer.append(P0, [event(i) for i in range(10)])
    h.producer.fail_next = 3  # the first three predictions time out
    states: list[tuple[str | None, dict]] = []

    def blocked(s: Stats) -> bool:
        states.append((h.processor.unhealthy_reason, dict(h.consumer.committed)))
        return not h.processor.healthy and P0 in h.consumer.paused

    def recovered(s: Stats) -> bool:
        states.append((h.processor.unhealthy_reason, dict(h.consumer.committed)))
        return h.processor.healthy and P0 not in h.consumer.paused and h.consumer.committed == {P0: 10}

    h.run(blocked, recovered)
    reasons = {reason for reason, _ in states if reason is not None}
    assert reasons and all(r.startswith("cannot write to scores") for r in reasons), reasons
    # While blocked, nothing past the first failed row was committed.
    assert all(c.get(P0, 0) == 0 for reason, c in states if reason is not None)
    assert sorted(set(h.predictions())) == [(0, i) for i in range(10)]
    assert h.processor.stats.predictions == 10


class RegistryAway:
    """A codec whose dependency (a Schema Registry) is away for the first ``away`` decodes."""

    schema_json = "{}"

    def __init__(self, away: int) -> None:
        self.away, self.json = away, JsonCodec()

    def decode(self, data: bytes) -> dict:
        if self.away > 0:
            self.away -= 1
            raise BrokerError("schema registry: lookup of schema id 2 failed: connection refused")
        return dict(self.json.decode(data))

    def encode(self, record: dict) -> bytes:
        return self.json.encode(record)


def test_a_registry_outage_pauses_input_backs_off_and_reads_the_chunk_again(
        caplog: pytest.LogCaptureFixture) -> None:
    """Not a dead letter and not an exit: the records are fine, something they need is away."""
    h = Harness(config(max_wait_ms=0), decoder=RegistryAway(away=3))
    h.consumer.rebalance("assign", [P0])
    h.consumer.append(P0, [event(i) for i in range(10)])
    states: list[tuple[str | None, bool, dict]] = []

    def note(s: Stats) -> bool:
        states.append((h.processor.unhealthy_reason, P0 in h.consumer.paused, dict(h.consumer.committed)))
        return False

    h.run(lambda s: note(s) or (not h.processor.healthy and P0 in h.consumer.paused),
          lambda s: note(s) or (h.processor.healthy and h.consumer.committed == {P0: 10}))
    held = [st for st in states if st[0] is not None]
    assert held and all(reason.startswith("schema registry:") for reason, _, _ in held)
    assert all(c == {} for _, _, c in held)  # nothing committed while the registry was away
    assert any(paused for _, paused, _ in held)
    holds = [r for r in caplog.records if "input paused, reading it again" in r.getMessage()]
    assert len(holds) == 3  # each failed read backs off, then the chunk is read again
    assert sorted(h.predictions()) == [(0, i) for i in range(10)]  # every event once, none lost
    assert h.processor.stats.dead_letters.total() == 0


def test_unacknowledged_outputs_are_never_committed() -> None:
    h = Harness(config(max_wait_ms=0))
    h.producer.hold = True  # sent, and no delivery report comes
    h.consumer.rebalance("assign", [P0])
    h.consumer.append(P0, [event(i) for i in range(10)])
    passes = [0]

    def many_commit_intervals(s: Stats) -> bool:
        assert h.consumer.commits == [], "committed inputs whose outputs were not acknowledged"
        passes[0] += 1
        if passes[0] == 30:  # 300 ms: six commit intervals went by
            assert len(h.producer.pending) == 10
            h.producer.hold = False
            return True
        return False

    h.run(many_commit_intervals, lambda s: h.consumer.committed == {P0: 10})


def test_an_open_batch_is_flushed_within_max_wait_when_the_consume_timeout_is_longer() -> None:
    """The consume wait is cut to what is left of the open batch's max_wait_ms: a trickle is
    scored max_wait after its first event, not a whole consume timeout later. The fake consumer's
    empty poll() takes its whole timeout of the fake clock, as a real one waits."""
    h = Harness(with_overrides(config(max_wait_ms=100), input={"consume_timeout_ms": 5_000}))
    h.consumer.clock = h.clock
    h.consumer.rebalance("assign", [P0])
    sent: list[float] = []

    def one_event(s: Stats) -> bool:
        h.consumer.append(P0, [event(0)])
        sent.append(h.clock())
        return True

    h.run(one_event, lambda s: s.predictions == 1)
    waited = h.clock() - sent[0]
    assert 0.1 <= waited <= 0.1 + 0.05, waited  # max_wait, and a few 10 ms passes of the loop


def test_while_outputs_wait_for_their_acks_the_loop_polls_for_them_often() -> None:
    """Acks are served between two consumes: with outputs unacknowledged a consume waits at most
    ACK_POLL_S, not the whole consume timeout, so an ack is seen (and its latency measured) soon."""
    from streamer.kafka.delivery import ACK_POLL_S

    h = Harness(with_overrides(config(max_wait_ms=0), input={"consume_timeout_ms": 5_000}))
    h.consumer.clock = h.clock
    h.consumer.rebalance("assign", [P0])
    h.consumer.append(P0, [event(0)])
    h.producer.hold = True  # produced, not acknowledged
    marks: list[float] = []

    def held(s: Stats) -> bool:
        if h.processor.kafka.deliveries.in_flight:
            marks.append(h.clock())
        return len(marks) >= 20

    def acked(s: Stats) -> bool:
        h.producer.hold = False
        return s.predictions == 1

    h.run(held, acked)
    steps = np.diff(marks)
    assert steps.max() <= 0.01 + ACK_POLL_S + 1e-9, steps.max()  # a pass, and at most one short wait


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
def test_a_burst_is_committed_once_the_input_goes_quiet_not_an_interval_later(guarantee: str) -> None:
    """A pass whose whole consume wait read nothing, with nothing in flight, commits what is done
    (exactly-once readers see the outputs only then); while input keeps coming, only the
    interval commits (60 s here: never within the test)."""
    h = Harness(config(guarantee, max_wait_ms=0, commit_interval_ms=60_000, transaction_timeout_ms=120_000))
    h.consumer.clock = h.clock  # an empty poll takes its whole timeout (100 ms) of the fake clock
    h.consumer.rebalance("assign", [P0])

    def committed() -> dict:
        if guarantee == "exactly_once":
            return h.producer.sent_offsets[-1] if "commit" in h.producer.transactions else {}
        return h.consumer.committed

    def streaming(s: Stats) -> bool:
        assert committed() == {}, "committed while the input kept coming"
        if s.events < 30:
            h.consumer.append(P0, [event(s.events)])  # one event a pass: never quiet
            return False
        return True

    h.run(streaming, lambda s: committed() == {P0: 30})
    assert h.clock() < 1.0  # 30 passes of 10 ms and one quiet consume: far from the interval


def test_gaps_shorter_than_a_consume_timeout_are_not_quiet() -> None:
    """Events every 50 ms, the passes between them reading nothing: no commit before the interval
    (a transaction per gap would cost the broker a marker per partition each time); once they stop
    for a consume timeout (100 ms), one."""
    h = Harness(config("exactly_once", max_wait_ms=0, commit_interval_ms=60_000, transaction_timeout_ms=120_000))
    h.consumer.rebalance("assign", [P0])
    passes, fed = [0], [0.0]

    def gappy(s: Stats) -> bool:
        assert "commit" not in h.producer.transactions, "committed in a 50 ms gap"
        passes[0] += 1
        if passes[0] % 5 == 0:  # a pass is 10 ms of the fake clock
            h.consumer.append(P0, [event(s.events)])
            fed[0] = h.clock()
        return s.events >= 20

    h.run(gappy, lambda s: "commit" in h.producer.transactions)
    assert 0.1 <= h.clock() - fed[0] <= 0.15, h.clock() - fed[0]
    assert h.producer.sent_offsets == [{P0: 20}]


def test_a_failing_quiet_commit_is_not_retried_every_pass() -> None:
    """A quiet spell commits once: a commit that fails for good (authorization, say) waits for
    the interval, not one attempt (and warning) a pass."""
    h = Harness(config(max_wait_ms=0, commit_interval_ms=60_000, transaction_timeout_ms=120_000))
    h.consumer.clock = h.clock
    h.consumer.rebalance("assign", [P0])
    h.consumer.append(P0, [event(i) for i in range(3)])
    h.consumer.commit_errors = [{P0: KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED)}] * 100
    since: list[float] = []
    tried: list[int] = []

    def quiet_for_2_s(s: Stats) -> bool:
        if s.predictions == 3 and not since:
            since.append(h.clock())
        tried.append(100 - len(h.consumer.commit_errors))
        return bool(since) and h.clock() - since[0] > 2.0

    h.run(quiet_for_2_s)  # (the shutdown's own commit comes after)
    assert tried[-1] == 1, f"the quiet spell's commit was tried {tried[-1]} times"


def test_exactly_once_a_quiet_input_waits_for_the_acks_before_it_commits() -> None:
    """Quiet but with outputs unacknowledged, the transaction is not committed (its commit would
    block on them, and again at every quiet pass); once they are acknowledged it is."""
    h = Harness(config("exactly_once", max_wait_ms=0, commit_interval_ms=60_000, transaction_timeout_ms=120_000))
    h.consumer.clock = h.clock
    h.producer.hold = True  # sent, no delivery report yet
    h.consumer.rebalance("assign", [P0])
    h.consumer.append(P0, [event(i) for i in range(5)])

    def held(s: Stats) -> bool:
        assert "commit" not in h.producer.transactions, "committed while outputs were unacknowledged"
        h.producer.hold = h.clock() < 1.0
        return not h.producer.hold

    h.run(held, lambda s: h.producer.sent_offsets[-1:] == [{P0: 5}])
    assert h.clock() < 2.0  # quiet and acknowledged: committed at once, not after the interval


def test_a_failed_commit_is_retried() -> None:
    h = Harness(config(max_wait_ms=0, commit_interval_ms=20))
    h.consumer.rebalance("assign", [P0, P1])
    h.consumer.append(P0, [event(i) for i in range(3)])
    h.consumer.append(P1, [event(i) for i in range(3)])
    h.consumer.commit_errors = [raise_kafka(KafkaError.REQUEST_TIMED_OUT),
                                {P1: KafkaError(KafkaError.REBALANCE_IN_PROGRESS)}]
    h.run(lambda s: h.consumer.committed == {P0: 3, P1: 3})
    assert not h.consumer.commit_errors  # both failures happened, and commits went on after them
    assert h.consumer.commits[0] == {P0: 3}  # the partial failure kept the other partition's commit


def test_shutdown_flushes_the_open_batch_waits_for_acks_and_commits() -> None:
    h = Harness(config())  # max_wait 60 s: only the shutdown flushes
    h.producer.hold = True  # acks come only when the shutdown waits for them (flush)
    h.consumer.rebalance("assign", [P0, P1])
    h.consumer.append(P0, [event(i) for i in range(6)])
    h.consumer.append(P1, [event(i) for i in range(2)])
    h.run(lambda s: s.events == 8)
    assert h.processor.stats.flushes["shutdown"] == 1
    assert h.processor.stats.predictions == 8
    assert h.consumer.committed == {P0: 6, P1: 2}
    assert h.consumer.closed


def test_exactly_once_puts_the_offsets_in_the_transaction_never_through_the_consumer() -> None:
    h = Harness(config("exactly_once", max_wait_ms=0, commit_interval_ms=20))
    h.consumer.rebalance("assign", [P0])
    h.consumer.append(P0, [event(i) for i in range(5)])
    h.run(lambda s: s.predictions == 5)
    assert h.consumer.commits == []
    assert h.producer.sent_offsets[-1] == {P0: 5}
    assert h.producer.transactions[:2] == ["init", "begin"]
    i = h.producer.transactions.index("send_offsets")
    assert h.producer.transactions[i + 1] == "commit"


def test_exactly_once_a_failed_output_aborts_and_reads_again_from_the_last_commit() -> None:
    h = Harness(config("exactly_once", max_wait_ms=0, commit_interval_ms=20))
    h.consumer.rebalance("assign", [P0])
    h.consumer.append(P0, [event(i) for i in range(6)])
    h.producer.fail_next = 1
    h.run(lambda s: s.predictions == 6)
    assert "abort" in h.producer.transactions
    assert h.producer.sent_offsets[-1] == {P0: 6}
    # Acknowledged outputs of the aborted transaction were written off, and redone: the counts
    # only include what committed.
    assert h.processor.stats.predictions == 6


def test_exactly_once_an_aborted_commit_reads_again_from_the_last_committed_transaction() -> None:
    """A commit_transaction answering an abortable error: the transaction is aborted and its input
    read again from the previous commit, never from the positions the failed commit carried."""
    h = Harness(config("exactly_once", max_wait_ms=0, commit_interval_ms=20))
    h.consumer.rebalance("assign", [P0])
    h.consumer.append(P0, [event(i) for i in range(3)])

    def committed_then_more(s: Stats) -> bool:
        if s.predictions < 3:
            return False
        assert h.producer.sent_offsets[-1] == {P0: 3}
        h.producer.abortable_in["commit"] = KafkaError(KafkaError._STATE, "commit failed", txn_requires_abort=True)
        h.consumer.append(P0, [event(i) for i in range(3, 6)])
        return True

    h.run(committed_then_more, lambda s: s.predictions == 6)
    assert "abort" in h.producer.transactions
    assert h.producer.sent_offsets[-2:] == [{P0: 6}, {P0: 6}]  # the failed commit, then the redo
    assert [off for _, off in h.predictions()].count(4) == 2  # aborted once, written again


def test_exactly_once_a_producer_gone_fatal_in_an_abort_is_replaced_and_nothing_is_lost() -> None:
    """INVALID_TXN_STATE from abort_transaction (a network cut, librdkafka issue 4849) is fatal:
    a new producer is made (init_transactions again), everything uncommitted is read again."""
    h = Harness(config("exactly_once", max_wait_ms=0, commit_interval_ms=20))
    h.consumer.rebalance("assign", [P0])
    h.consumer.append(P0, [event(i) for i in range(6)])
    first = h.producer
    first.fail_next = 1  # an output fails, so the transaction must abort; the abort is fatal
    first.fatal_in["abort"] = KafkaError(KafkaError.INVALID_TXN_STATE, fatal=True)
    h.run(lambda s: s.predictions == 6)
    assert len(h.producers) == 2 and first.purged
    assert h.producer.transactions[0] == "init" and h.producer.sent_offsets[-1] == {P0: 6}
    assert sorted(h.predictions()) == [(0, i) for i in range(6)]  # the new producer wrote them all


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
def test_a_fatal_error_callback_replaces_the_producer_at_the_next_commit(guarantee: str) -> None:
    h = Harness(config(guarantee, max_wait_ms=0, commit_interval_ms=20))
    h.consumer.rebalance("assign", [P0])
    h.consumer.append(P0, [event(i) for i in range(4)])
    h.producer.hold = True  # sent, not acknowledged when the producer dies

    def die(s: Stats) -> bool:
        if len(h.producer.pending) == 4:
            h.error_cb(KafkaError(KafkaError._FATAL, "idempotence broken", fatal=True))
            return True
        return False

    h.run(die, lambda s: len(h.producers) == 2 and s.predictions == 4
          and (h.consumer.committed.get(P0) == 4 or h.producer.sent_offsets[-1:] == [{P0: 4}]))
    assert sorted(h.predictions()) == [(0, i) for i in range(4)]  # redone through the new one


def test_a_fenced_producer_is_replaced_once_and_a_second_fence_soon_after_ends_the_loop() -> None:
    """librdkafka reports any stale epoch as fenced, the coordinator's own bump after a timed-out
    transaction too: the first fence is survived; fenced again within FENCE_WINDOW_S, another
    instance holds the transactional.id and the loop ends rather than take it back."""
    h = Harness(config("exactly_once", max_wait_ms=0, commit_interval_ms=20))
    h.consumer.rebalance("assign", [P0])
    h.consumer.append(P0, [event(i) for i in range(4)])

    def fence(s: Stats) -> bool:
        h.error_cb(KafkaError(KafkaError._FENCED, "fenced: old epoch", fatal=True))
        return True

    def later(s: Stats) -> bool:
        h.clock.advance(FENCE_WINDOW_S + 1)  # long after: a transaction timed out again, not a rival
        return True

    with pytest.raises(ProducerFatalError, match="fenced"):
        h.run(fence, lambda s: len(h.producers) == 2 and s.predictions == 4,
              later, fence, lambda s: len(h.producers) == 3,
              fence, lambda s: False)  # fenced again at once: a rival instance
    assert h.producers[1].transactions[0] == "init" and h.producers[1].sent_offsets[-1] == {P0: 4}
    assert len(h.producers) == 3


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
def test_a_producer_that_stays_fatal_is_replaced_five_times_then_the_loop_ends(guarantee: str) -> None:
    """Every replacement goes fatal at once, with no commit in between: after MAX_RENEWALS of them
    the loop ends with ProducerFatalError (exit 3: a restart may find the cluster healthy)."""
    h = Harness(config(guarantee, max_wait_ms=0, commit_interval_ms=20))
    h.consumer.rebalance("assign", [P0])

    def keep_dying(s: Stats) -> bool:
        h.error_cb(KafkaError(KafkaError._FATAL, "idempotence broken", fatal=True))
        return False

    with pytest.raises(ProducerFatalError, match="idempotence broken") as raised:
        h.run(keep_dying)
    assert not isinstance(raised.value, ConfigError)  # the cli's exit 3, not 2
    assert len(h.producers) == MAX_RENEWALS + 1


@pytest.mark.parametrize("pipelined", [False, True])
@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
def test_scores_reach_the_output_in_partition_order(guarantee: str, pipelined: bool) -> None:
    h = Harness(config(guarantee, max_wait_ms=0, commit_interval_ms=20, pipelined=pipelined))
    h.consumer.rebalance("assign", [P0])
    h.consumer.append(P0, [event(i) for i in range(250)])
    h.run(lambda s: s.predictions == 250)
    offsets = [o for _, o in h.predictions()]
    assert offsets == sorted(offsets) and len(set(offsets)) == 250
    assert np.isfinite(h.processor.stats.latencies_ms).all()


def test_a_stop_during_start_up_is_not_lost() -> None:
    """SIGTERM while the model warms up or the group is joined: the loop must not start (it used
    to, because start-up set the running flag after the signal had cleared it)."""
    h = Harness(config())
    warm_up = h.processor.runner.warm_up

    def warm_up_then_stop(rows: int) -> None:
        warm_up(rows)
        h.processor.stop()  # as the signal handler does

    h.processor.runner.warm_up = warm_up_then_stop  # type: ignore[method-assign]
    passes: list[int] = []
    h.processor.run(until=lambda s: passes.append(1) or len(passes) > 50)
    assert passes == []  # the loop never turned; the shutdown drain and close still ran


def test_pipelined_the_loop_reads_no_more_while_the_model_is_behind() -> None:
    """Backpressure: with FULL batches queued and in flight, the loop waits for the model instead
    of reading (the backlog stays in Kafka, not in memory), and reads again as it catches up."""
    release = threading.Event()

    def slow(x: np.ndarray) -> np.ndarray:
        assert release.wait(10)
        return x[:, :1]

    cfg = with_overrides(config(max_wait_ms=0, pipelined=True), input={"consume_max_messages": 100})
    h = Harness(cfg, runner=FunctionRunner(slow, 32))
    h.consumer.rebalance("assign", [P0])
    h.consumer.append(P0, [event(i) for i in range(1_000)])  # 10 batches of 100
    passes = [0]

    def held_back(s: Stats) -> bool:
        passes[0] += 1
        assert s.events <= FULL * 100, s.events  # read: what it holds, and no more
        if passes[0] == 50:  # fifty passes behind the model: still only FULL batches read
            assert s.predictions == 0 and s.events == FULL * 100
            release.set()
            return True
        return False

    h.run(held_back, lambda s: s.predictions == 1_000, passes=5_000)
    assert [o for _, o in h.predictions()] == list(range(1_000))


def test_predictions_carry_model_version_verbatim_and_the_digest_in_a_field() -> None:
    """model.version "1" reaches every prediction as "1"; the model file's digest travels beside
    it, in the prediction's model_digest field (no headers: the batch call takes the batch) and
    in each dead letter's headers, next to its model.version."""
    import hashlib

    from streamer.kafka.deadletter import header

    cfg = config(max_wait_ms=0)
    digest = hashlib.sha256(cfg.model.path.read_bytes()).hexdigest()[:12]
    h = Harness(cfg)
    batches = []
    produce_batch = h.producer.produce_batch

    def counted(topic: str, messages: list[dict[str, Any]], on_delivery: Any = None) -> int:
        batches.append((topic, len(messages)))
        return produce_batch(topic, messages, on_delivery=on_delivery)

    h.producer.produce_batch = counted  # type: ignore[method-assign]
    h.consumer.rebalance("assign", [P0])
    h.consumer.append(P0, [event(0), event(1), event(2, width=5), event(3)])  # 2: a dead letter
    h.run(lambda s: s.outputs == 4)
    codec = output_codec(cfg)
    by_topic: dict[str, list[tuple[bytes | None, Any]]] = {}
    for (topic, value), headers in zip(h.producer.written, h.producer.written_headers, strict=True):
        by_topic.setdefault(topic, []).append((value, headers))
    predictions = by_topic["scores"]
    assert cfg.model.version == "1" and len(predictions) == 3
    assert sum(n for topic, n in batches if topic == "scores") == 3  # every prediction went in a batch call
    for value, headers in predictions:
        assert headers is None
        p = codec.decode(value)
        assert (p["model_version"], p["model_digest"]) == ("1", digest)
    ((_, letter_headers),) = by_topic[dead_letter_topic(cfg)]
    assert header(letter_headers, "model.version") == "1" and header(letter_headers, "model.digest") == digest


class Listing:
    """A cluster's topic listing; ``topics`` can change between two listings."""

    def __init__(self) -> None:
        self.topics: dict[str, Any] = {}
        self.asked = 0

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        self.asked += 1
        return type("Metadata", (), {"topics": dict(self.topics)})()


def test_run_reads_nothing_and_is_unhealthy_naming_the_topic_until_the_output_topic_exists() -> None:
    listing, seen = Listing(), []

    def sleep(_: float) -> None:  # a back-off step of the wait: look, and create the topic at the third listing
        seen.append((h.processor.status(), h.consumer._callbacks, len(h.producers)))
        if listing.asked == 3:
            listing.topics["scores"] = type("Meta", (), {"error": None})()

    wait = TopicWait(lambda: listing, [("output.topic", "scores")], "fake:9092", sleep=sleep)
    h = Harness(config(max_wait_ms=0), topics=wait)
    h.consumer.rebalance("assign", [P0])
    h.consumer.append(P0, [event(i) for i in range(3)])
    h.run(lambda s: s.predictions == 3)
    assert listing.asked == 4 and seen
    status, subscribed, producers = seen[-1]
    assert not status.healthy and not status.ready
    assert status.reason == "topic 'scores' (output.topic) does not exist on fake:9092: waiting for it to be created"
    assert not subscribed and producers == 0  # nothing opened while it waited
    assert h.processor.status().reason == ""
    assert sorted(h.predictions()) == [(0, i) for i in range(3)]


def test_a_stop_while_waiting_for_a_topic_opens_nothing() -> None:
    listing = Listing()
    h: list[Harness] = []
    wait = TopicWait(lambda: listing, [("input.topics[0]", TOPIC)], "fake:9092",
                     sleep=lambda _: h[0].processor.stop() if listing.asked == 2 else None)
    h.append(Harness(config(), topics=wait))
    h[0].processor.run()
    assert listing.asked == 2 and not h[0].consumer._callbacks and h[0].producers == []


def lacking(i: int) -> bytes:
    """A JSON event without the model's field: a `validate` dead letter, the same reason every row."""
    return json.dumps({"event_id": f"bad{i}", "event_time": 1_700_000_000_000, "feats": [0.1] * 32}).encode()


def broken_input(n: int) -> Harness:
    cfg = with_overrides(config(max_wait_ms=0, broken_input_batches=n),
                         input={"consume_max_messages": 4})  # a batch: what one consume() returns
    h = Harness(cfg, metrics=Metrics(CollectorRegistry()))
    h.consumer.rebalance("assign", [P0])
    return h


def test_a_wholly_broken_input_is_held_after_n_batches_and_a_passing_row_releases_it(
        caplog: pytest.LogCaptureFixture) -> None:
    """Batch 1 (offsets 0-3) is dead-lettered, batch 2 (4-5) is held: nothing of it is dead-lettered
    or committed, it is read again with back-off; once a fixed event sits in the batch read, the
    hold lifts and the batch goes as usual (4, 5 dead letters; 6, 7 scored)."""
    h = broken_input(2)
    h.consumer.append(P0, [lacking(i) for i in range(6)])
    seen: list[tuple[int, dict]] = []

    def held(s: Stats) -> bool:
        reason = h.processor.unhealthy_reason
        if reason is None:
            return False
        assert reason.startswith("input broken: every row of the last 2 batches fails validation with: "
                                 "missing field 'features'")
        seen.append((s.dead_letters.total(), dict(h.consumer.committed)))
        assert broken_gauge(h) == 1
        probes = [r for r in caplog.records if r.getMessage().startswith("input broken")]
        return len(probes) >= 3 and P0 in h.consumer.paused  # read again twice, still broken

    def fixed(s: Stats) -> bool:
        h.consumer.append(P0, [event(i) for i in range(6, 10)])
        return True

    h.run(held, fixed, lambda s: h.processor.healthy and h.consumer.committed == {P0: 10})
    assert seen and all(letters == 4 for letters, _ in seen)  # batch 2 never dead-lettered while held
    assert all(committed.get(P0, 0) <= 4 for _, committed in seen)  # nor committed
    assert h.processor.stats.dead_letters.total() == 6
    assert h.predictions() == [(0, i) for i in range(6, 10)] and broken_gauge(h) == 0


def broken_gauge(h: Harness) -> float | None:
    assert h.metrics is not None
    return h.metrics.registry.get_sample_value("streamer_input_broken")


def test_partial_failures_never_hold_the_input() -> None:
    h = broken_input(1)
    h.consumer.append(P0, [lacking(i) if i % 4 else event(i) for i in range(40)])  # 3 of 4 fail
    h.run(lambda s: h.consumer.committed == {P0: 40} or not h.processor.healthy)
    assert h.processor.healthy and h.processor.stats.dead_letters.total() == 30


def test_broken_input_batches_zero_dead_letters_a_wholly_broken_input() -> None:
    h = broken_input(0)
    h.consumer.append(P0, [lacking(i) for i in range(40)])
    h.run(lambda s: h.consumer.committed == {P0: 40} or not h.processor.healthy)
    assert h.processor.healthy and h.processor.stats.dead_letters.total() == 40


def test_a_restart_with_a_fixed_config_scores_the_held_rows() -> None:
    """16 features into a model that takes 32: held from the first batch (N = 1), nothing dead-lettered
    or committed; a restart with the model that takes 16 scores every held row."""
    h = broken_input(1)
    h.consumer.append(P0, [event(i, width=16) for i in range(6)])
    h.run(lambda s: not h.processor.healthy)
    assert h.processor.unhealthy_reason is not None and "has 16 values" in h.processor.unhealthy_reason
    assert h.consumer.committed.get(P0, 0) == 0 and h.processor.stats.dead_letters.total() == 0
    fixed = Harness(h.processor.cfg, runner=FunctionRunner(lambda x: x[:, :1], 16))
    fixed.consumer = h.consumer  # the group's log and commits, read by a new member
    fixed.consumer.position_of, fixed.consumer.paused = {}, set()
    fixed.consumer.rebalance("assign", [P0])
    fixed.run(lambda s: fixed.consumer.committed == {P0: 6})
    assert fixed.predictions() == [(0, i) for i in range(6)] and fixed.processor.stats.dead_letters.total() == 0
