"""The lanes of a processor: one per model it scores with, each with its own serving, stages, batcher, scoring queue and prediction topic.

A chunk's rows fan out to their models' lanes (pipeline/route.py says which); each lane batches
its own rows (its model's ``batching``), scores them in order with its own serving (its reloads,
breaker, fallback and challengers) and writes them to its own topic. The loop commits an offset
only once its row's output is acknowledged, whatever lane it went through (kafka/offsets.py
keeps the contiguous done prefix, so lanes may be acknowledged in any order). One model is one lane.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from streamer.config import Config, prediction_topic
from streamer.formats.codec import Codec
from streamer.pipeline.batcher import FlushReason, MicroBatcher
from streamer.pipeline.inference import Inference
from streamer.pipeline.records import Messages, Rows
from streamer.pipeline.route import Router
from streamer.pipeline.serving import Serving
from streamer.pipeline.stages import Reject, Stages


@dataclass(frozen=True, slots=True)
class Lane:
    """One model's way through the loop. ``cfg``: the one-model config it scores with (config.for_model)."""

    name: str
    serving: Serving
    stages: Stages
    batcher: MicroBatcher[Rows]
    inference: Inference
    topic: str  # its predictions' topic

    @classmethod
    def of(cls, cfg: Config, serving: Serving, decoder: Codec, encoder: Codec,
           clock: Callable[[], float] = time.monotonic) -> Lane:
        b = cfg.batching
        return cls(cfg.model.name, serving, Stages.serving(decoder, encoder, cfg, serving.runner),
                   MicroBatcher(b.max_size, b.max_wait_ms, clock, join=Rows.join),
                   Inference(serving, cfg.model.pipelined, b.max_size), prediction_topic(cfg, cfg.model.name))


class Lanes:
    """A processor's lanes, the default model's first, asked together where the loop asks them all."""

    def __init__(self, lanes: Sequence[Lane]) -> None:
        assert lanes, "a processor scores with at least one model"
        self.each = tuple(lanes)
        self.default = self.each[0]
        self.by_name = {lane.name: lane for lane in self.each}

    def __iter__(self) -> Iterator[Lane]:
        return iter(self.each)

    def __getitem__(self, name: str) -> Lane:
        return self.by_name[name]

    @property
    def scoring(self) -> int:
        """Batches flushed and not yet scored, in every lane."""
        return sum(len(lane.inference) for lane in self.each)

    @property
    def batched(self) -> int:
        """Rows in open batches, in every lane."""
        return sum(len(lane.batcher) for lane in self.each)

    @property
    def poll_s(self) -> float:
        return min(lane.inference.poll_s for lane in self.each)

    def behind(self, timeout_s: float) -> bool:
        """A lane's model is behind (its queue is full): wait for it, and read nothing this pass."""
        return any(lane.inference.behind(timeout_s) for lane in self.each)

    def remaining_s(self) -> float | None:
        """The soonest open batch's time left (None: no open batch)."""
        left = [s for lane in self.each if (s := lane.batcher.remaining_s()) is not None]
        return min(left) if left else None

    def flush(self, reason: FlushReason) -> None:
        """Every open batch to its lane's scoring queue."""
        for lane in self.each:
            lane.inference.add(lane.batcher.flush(reason) or [])

    def wait(self) -> None:
        """Wait for a result of the first lane that has batches out."""
        for lane in self.each:
            if len(lane.inference):
                lane.inference.wait()
                return

    def keep(self, keep: Callable[[Rows], Rows]) -> None:
        """Keep only ``keep(rows)`` in every lane (a rebalance)."""
        for lane in self.each:
            lane.batcher.drop(keep)
            lane.inference.keep(keep)

    def decode(self, chunk: Messages,
               router: Router | None) -> tuple[dict[str, Rows], dict[str | None, list[Reject]]]:
        """Each lane's decoded rows, and the rejects by the lane whose model names their dead
        letters (None: the route's, which no model scored: the default model's name). Without a
        router the default lane decodes the chunk."""
        if router is None:
            rows, bad = self.default.stages.decode(chunk)
            return {self.default.name: rows}, {self.default.name: bad}
        routed, unrouted = router.split(chunk)
        parts: dict[str, Rows] = {}
        rejects: dict[str | None, list[Reject]] = {None: unrouted}
        for name, part in routed.items():
            parts[name], bad = self.by_name[name].stages.decode(part)
            rejects[name] = rejects.get(name, []) + bad
        return parts, rejects

    @property
    def servings(self) -> dict[str, Serving]:
        """Every model's serving by name, the default's first."""
        return {lane.name: lane.serving for lane in self.each}

    def start(self, started: Callable[[str, str, str], None]) -> None:
        """Warm every model up and start its scoring (a thread when pipelined); ``started(provider,
        version, model)`` for each."""
        for lane in self.each:
            lane.serving.warm_up()
            lane.inference.start()
            started(lane.serving.provider, lane.serving.model.version, lane.name)

    def reload(self) -> None:
        """Ask every model to load again between two batches (SIGHUP). Signal-safe."""
        for lane in self.each:
            lane.serving.ask_reload()

    def close(self, timeout_s: float) -> None:
        """Stop every scoring thread and close every serving (its challengers publish within ``timeout_s``)."""
        for lane in self.each:
            lane.inference.close()
            lane.serving.close(timeout_s)

    def clear(self) -> None:
        """Drop every batch of every lane (an aborted transaction reads them again)."""
        for lane in self.each:
            lane.batcher.drop(lambda rows: rows[:0])
            lane.inference.clear()
