"""Counts one processor keeps for summaries: the demo, the benchmarks and the tests."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

MAX_LATENCY_SAMPLES = 1_000_000


@dataclass
class Stats:
    """Counts kept by the processor for summaries (the demo, benchmarks, tests)."""

    events: int = 0
    predictions: int = 0
    dead_letters: Counter[str] = field(default_factory=Counter)
    batches: int = 0
    rows_batched: int = 0
    flushes: Counter[str] = field(default_factory=Counter)
    bisections: int = 0
    model_calls: int = 0
    degraded: int = 0  # rows the fallback scored
    reloads: int = 0  # model versions swapped in while running
    latencies_ms: list[float] = field(default_factory=list)
    commits: int = 0
    first_event_at: float | None = None  # monotonic time of the first consumed event
    last_ack_at: float | None = None  # monotonic time of the latest acknowledged output

    @property
    def outputs(self) -> int:
        """Inputs fully handled: predicted or dead-lettered, acknowledged."""
        return self.predictions + sum(self.dead_letters.values())

    def events_per_s(self) -> float:
        """Outputs per second from the first consumed event to the last ack (group join excluded)."""
        if self.first_event_at is None or self.last_ack_at is None:
            return 0.0
        return self.outputs / max(self.last_ack_at - self.first_event_at, 1e-9)

    def record_latencies(self, values_ms: Sequence[float] | np.ndarray) -> None:
        """Keep end-to-end latencies for percentiles, up to MAX_LATENCY_SAMPLES of them."""
        room = MAX_LATENCY_SAMPLES - len(self.latencies_ms)
        if room > 0:
            self.latencies_ms.extend(np.asarray(values_ms[:room], np.float64).tolist())
