"""What the benchmarks share to measure: pinned cores, a run's own config, its CPU and wake-ups, rounds.

Importing it puts the project on ``sys.path``, so a script in benchmarks/ imports it before
``streamer``. :data:`WINDOW` and :data:`WAKEUPS` are rebound by :func:`timed` for each run: read them
as ``harness.WINDOW`` and ``harness.WAKEUPS`` at the time of use, never imported by name.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from streamer.config import Config  # noqa: E402
from streamer.kafka import clients  # noqa: E402

T = TypeVar("T")


class Pinning:
    """``--pin``: the broker's core and the client's (this process). Affinity is per thread and
    inherited: set before the broker starts, it is the broker's; set after, every thread this
    process starts later (librdkafka's, ONNX Runtime's) gets the client's."""

    def __init__(self) -> None:
        self.broker: int | None = None
        self.client: int | None = None

    def choose(self) -> None:
        cores = sorted(os.sched_getaffinity(0))
        if len(cores) < 2:
            raise SystemExit("--pin needs two cores")
        self.broker, self.client = cores[0], cores[1]
        os.sched_setaffinity(0, {self.broker})  # the broker, started next, inherits it

    def client_side(self) -> None:
        if self.client is not None:
            os.sched_setaffinity(0, {self.client})

    def beside_broker(self) -> None:  # a helper process (the paced producer): off the client's core
        if self.broker is not None:
            os.sched_setaffinity(0, {self.broker})

    def __str__(self) -> str:
        return "unpinned" if self.client is None else f"broker on core {self.broker}, client on core {self.client}"


PINNED = Pinning()


def fresh(base: Config, tag: str) -> Config:
    """The base config with its own group and output topic, so the runs share only the input."""
    run = uuid.uuid4().hex[:6]
    return replace(base, input=replace(base.input, group_id=f"bench-{tag}-{run}"),
                   output=replace(base.output, topic=f"bench-{tag}-out-{run}"))


def python_threads_cpu() -> float:
    """CPU seconds of this process's threads that are not librdkafka's (``rdk:*``): the loop,
    the inference thread, ONNX Runtime's. Each thread's CPU clock read from its Linux id."""
    total = 0.0
    for tid in os.listdir("/proc/self/task"):
        try:
            if not Path(f"/proc/self/task/{tid}/comm").read_text().startswith("rdk:"):
                total += time.clock_gettime((~int(tid) << 3) | 6)  # MAKE_THREAD_CPUCLOCK(tid, SCHED)
        except OSError:
            continue  # the thread ended while we looked
    return total


class CpuWindow:
    """The process CPU time between a figure's first event and its last output, the window its
    rate is measured over: start-up (a model session, a heap settled, a group joined) and shutdown
    are left out of both. A figure that marks nothing is timed whole. Beside it, the share of the
    Python side (every thread but librdkafka's): what the processor's own code costs, apart from
    the client library's threads, whose busy-waits (Wakeups) come and go from run to run."""

    def __init__(self) -> None:
        self.started: float | None = None
        self.stopped: float | None = None
        self.python: float | None = None  # CPU seconds of the Python side within the window

    def start(self) -> None:
        if self.started is None:
            self.started = time.process_time()
            self.python = -python_threads_cpu()

    def stop(self) -> None:
        if self.stopped is None:
            self.stopped = time.process_time()
            if self.python is not None:
                self.python += python_threads_cpu()

    def open(self) -> bool:
        """Whether the window has started and not stopped: the time now is the figure's."""
        return self.started is not None and self.stopped is None


WINDOW = CpuWindow()


class Wakeups:
    """The producers' broker-thread wake-ups (librdkafka's statistics, ``brokers.*.wakeups``) per
    event of a figure, printed beside each run's CPU per event. An idempotent producer's broker
    thread can wake in a busy loop while a partition waits for its request in flight: librdkafka
    counts the messages in flight against a cap of five requests, so a partition with a batch out
    has no room, and once linger.ms has passed for its queued messages the thread's next wake-up
    is now, until the response comes (rdkafka_broker.c, rd_kafka_toppar_producer_serve). That is
    hundreds of thousands of wake-ups per 100,000 messages against ~1,000, and 1-3 us of CPU an
    event, in some runs and not in others. Statistics come every 100 ms: the last 100 ms of a
    figure may be missing from its count, and its count starts when its producer does (the group
    join included), its CPU at its first event. (g) builds its own clients and reports none."""

    def __init__(self) -> None:
        self.latest: dict[str, int] = {}  # by producer instance

    def settings(self) -> dict[str, Any]:
        return {"statistics.interval.ms": 100, "stats_cb": self.on_stats}

    def on_stats(self, stats_json: str) -> None:
        stats = json.loads(stats_json)
        self.latest[stats["name"]] = sum(int(b.get("wakeups", 0)) for b in stats.get("brokers", {}).values())

    def total(self) -> int:
        return sum(self.latest.values())


WAKEUPS = Wakeups()


def probed(cfg: Config) -> clients.KafkaClients:
    """The config's clients, their producers reporting wake-ups to WAKEUPS."""
    return replace(clients.KafkaClients.from_config(cfg),
                   producer=lambda **extra: clients.make_producer(cfg, **{**WAKEUPS.settings(), **extra}))


def timed(fn: Callable[[], float], n: int) -> tuple[float, float, float, float]:
    """``fn()`` (events/s), the process CPU time per event of its window and its Python side's
    (NaN for a figure that marks no window), in microseconds, and the producers' wake-ups per event."""
    global WINDOW, WAKEUPS
    WINDOW, WAKEUPS = CpuWindow(), Wakeups()
    before = time.process_time()
    rate = fn()
    after = time.process_time()
    python = WINDOW.python / n * 1e6 if WINDOW.python is not None and WINDOW.stopped else float("nan")
    return rate, ((WINDOW.stopped or after) - (WINDOW.started or before)) / n * 1e6, python, WAKEUPS.total() / n


def rounds(runs: Mapping[str, T], repeat: int) -> Iterator[tuple[int, str, T]]:
    """Each of ``runs`` once a round for ``repeat`` rounds, as (round, tag, run), in a shuffled order
    each round, seeded by the round: a slow spell of the machine hits no figure each round."""
    for round_ in range(repeat):
        order = list(runs.items())
        random.Random(round_).shuffle(order)
        for tag, run in order:
            yield round_, tag, run
