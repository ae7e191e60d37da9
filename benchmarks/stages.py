"""A processor figure's CPU per event by stage (StageCpu): the marks, the wrappers that set them, the report.

(c), (j), (n) and (o) are broken down per event into decode, model, encode and loop, in us of CPU
(StageCpu: observer callbacks and marks of the injected clients and runner; the loop is the rest of
the figure's CPU/event: consume, batching, produce, delivery reports, commits, librdkafka). The
model's share is the runner's calls: for (j), (n), (o) the ColumnTransformer model's own cost,
ONNX Runtime's, not the processor's, and reported apart. Each of (j), (n), (o) is printed with its
CPU/event against (a)'s, and against (c)'s on the non-model part: "j/c on the non-model part" is
(c's CPU/event - c's model share) / (j's CPU/event - j's model share), the ratio events/s would
give if the model cost nothing (target >= 0.8); the same for n/c and o/c. (c)'s CPU/event against
(a)'s is printed per round too (the two run in every round), so "<= 1.5x in 5 of 5 runs" reads off.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import harness
import numpy as np

from streamer.config import Config
from streamer.kafka import clients
from streamer.pipeline.reload import checked_runner

STAGES: dict[str, list[dict[str, float]]] = {}  # per figure: each run's StageCpu per event (us)


class StageCpu:
    """CPU per event of each stage of a processor figure, within its window (CpuWindow), in the
    thread CPU time (``time.thread_time``) of the loop's thread, between marks that its observer
    callbacks (streamer.house.Observer) and its injected clients and runner set:

    - decode: from the consumed chunk in hand (the consumer's call returned) to its rows decoded
      and validated (``decoded``);
    - model: the runner's calls (contract feed, the ONNX Runtime session, outputs collected), on
      whichever thread runs them (the loop's, or the inference thread when pipelined): for the
      ColumnTransformer figures that is ONNX Runtime's cost, not the processor's;
    - encode: from the model's answer (inline), or the loop's previous mark (pipelined: the
      previous batch handed to the producer, or the rows decoded, so the batcher's join of the
      batch falls in it), to its predictions encoded (``scored``);
    - loop: the rest of the figure's process CPU: consume, batching, produce, delivery reports,
      commits, and librdkafka's threads (the Kafka client's share).

    The marks cost a clock read each, a few per batch: nothing per event."""

    def __init__(self) -> None:
        self.loop_thread = threading.get_ident()  # the processor runs on the thread that builds it
        self.mark: float | None = None
        self.spent = {"decode": 0.0, "model": 0.0, "encode": 0.0}

    def step(self, stage: str | None) -> None:
        """A mark on the loop's thread: the time since the last one goes to ``stage`` (None: the loop's)."""
        if threading.get_ident() != self.loop_thread:
            return
        now = time.thread_time()
        if stage is not None and self.mark is not None and harness.WINDOW.open():
            self.spent[stage] += now - self.mark
        self.mark = now

    def model(self, seconds: float) -> None:
        if harness.WINDOW.open():
            self.spent["model"] += seconds

    def decoded(self, rows: Any) -> None:
        self.step("decode")

    def scored(self, batch: Any, seconds: float, out: Any, predicted: Any) -> None:
        self.step("encode")

    def acked(self, acked: Any) -> None:
        self.step(None)

    def per_event(self, n: int) -> dict[str, float]:
        return {k: v / n * 1e6 for k, v in self.spent.items()}


class MarkedClient:
    """A Kafka client whose calls ``marked`` set a StageCpu mark as they return (the time before
    them is the loop's); every other attribute is the client's own."""

    def __init__(self, inner: Any, stages: StageCpu, marked: tuple[str, ...]) -> None:
        self._inner, self._stages = inner, stages
        for name in marked:
            setattr(self, name, self._marking(getattr(inner, name)))

    def _marking(self, call: Callable[..., Any]) -> Callable[..., Any]:
        def marked(*args: Any, **kwargs: Any) -> Any:
            self._stages.step(None)  # what came before the call is the loop's (after scored: produce)
            try:
                return call(*args, **kwargs)
            finally:
                self._stages.step(None)
        return marked

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __len__(self) -> int:
        return len(self._inner)


class TimedRunner:
    """The figure's model runner (checked at start as the processor checks it), each call's thread
    CPU counted as the model's share (StageCpu)."""

    def __init__(self, inner: Any, stages: StageCpu) -> None:
        self._inner, self._stages = inner, stages

    def run(self, features: Any) -> Any:
        self._stages.step(None)  # the batch's inputs gathered: the loop's (inline)
        started = time.thread_time()
        try:
            return self._inner.run(features)
        finally:
            self._stages.model(time.thread_time() - started)
            if threading.get_ident() == self._stages.loop_thread:
                self._stages.mark = time.thread_time()  # counted already: the model's

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def staged(cfg: Config, stages: StageCpu) -> tuple[Any, clients.KafkaClients]:
    """The runner and clients of a figure whose stages are timed (StageCpu)."""
    kafka = harness.probed(cfg)
    return TimedRunner(checked_runner(cfg), stages), replace(
        kafka, consumer=lambda **extra: MarkedClient(kafka.consumer(**extra), stages, ("poll", "consume")),
        producer=lambda **extra: MarkedClient(kafka.producer(**extra), stages, ("produce_batch",)))


def stage_report(cpu: dict[str, list[float]]) -> None:
    """The breakdown of (c), (j), (n), (o) (StageCpu; the loop is the rest of each run's CPU/event),
    (j), (n), (o) against (a) and, on the non-model part, against (c); and (c)/(a) per round."""
    parts: dict[str, dict[str, float]] = {}
    for k, runs in sorted(STAGES.items()):
        split = {s: [r[s] for r in runs] for s in ("decode", "model", "encode")}
        split["loop"] = [total - sum(r.values()) for total, r in zip(cpu[k], runs, strict=True)]
        parts[k] = {s: float(np.median(v)) for s, v in split.items()}
        print(f"({k}) per event, us CPU (median of {len(runs)}): " + ", ".join(
            f"{s} {v:.2f}" for s, v in parts[k].items()) + f"; total {np.median(cpu[k]):.2f}")
    if domain := [k for k in "jno" if k in parts]:
        print("the ColumnTransformer model's own cost is ONNX Runtime's, not ours: " + ", ".join(
            f"({k}) {parts[k]['model']:.2f} us/event" for k in domain))
    if "a" in cpu:
        base_us = float(np.median(cpu["a"]))
        for k in domain:
            print(f"({k}) CPU/event against (a): {np.median(cpu[k]):.2f} / {base_us:.2f} us = "
                  f"{np.median(cpu[k]) / base_us:.2f}x")
    if "c" in parts:  # c's CPU/event less its model over k's less its model: as events/s would give k/c
        c_rest = float(np.median(cpu["c"])) - parts["c"]["model"]
        for k in domain:
            rest = float(np.median(cpu[k])) - parts[k]["model"]
            print(f"{k}/c on the non-model part: ({np.median(cpu['c']):.2f} - {parts['c']['model']:.2f}) / "
                  f"({np.median(cpu[k]):.2f} - {parts[k]['model']:.2f}) = {c_rest / rest:.2f} (target >= 0.8)")
    if "a" in cpu and "c" in cpu:  # the same round's (c) and (a): "<= 1.5x in R of R runs" reads off
        ratios = [c / a for c, a in zip(cpu["c"], cpu["a"], strict=True)]
        print("(c)/(a) CPU/event per round: " + " ".join(f"{r:.2f}" for r in ratios)
              + f"; <= 1.5x in {sum(r <= 1.5 for r in ratios)} of {len(ratios)} runs")
