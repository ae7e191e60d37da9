"""What a lake run writes to, and the plan it commits against: an Iceberg table or a Parquet dataset.

A run is exactly once because its sink is its checkpoint. Each commit records the run id, the
run's shard and the source range it covers (``[from, to)`` per partition: a topic's offsets, or a
file's row numbers), and a run that starts again with the same id reads them back and continues
where its last commit ended. Rows past the last commit were never visible, and are written again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa

from streamer.kafka.ranges import Ranges
from streamer.lake.files import DayFiles
from streamer.pipeline.records import Partition


@dataclass(frozen=True, slots=True)
class Shard:
    """Which partitions a process takes: those ``p`` with ``p % count == index``."""

    index: int = 0
    count: int = 1

    def takes(self, partition: int) -> bool:
        return partition % self.count == self.index

    def __str__(self) -> str:
        return f"{self.index}-of-{self.count}"


@dataclass(frozen=True, slots=True)
class Resume:
    """Where a run starts: its bounds, the position reached in each partition, its next commit's number."""

    bounds: Ranges
    reached: dict[Partition, int]
    seq: int

    @property
    def resumed(self) -> bool:
        return self.seq > 0

    @property
    def done(self) -> bool:
        return all(self.reached.get(p, s) >= e for p, (s, e) in self.bounds.items())

    def left(self) -> int:
        """Source positions still to read."""
        return sum(max(e - self.reached.get(p, s), 0) for p, (s, e) in self.bounds.items())


class Sink(Protocol):
    """A run's destination and checkpoint (iceberg.py, parquet.py)."""

    name: str  # how messages name it: 'table streamer.scores', 'parquet /data/scores'

    @property
    def rejects_at(self) -> str:
        """Where the run's rejects are, as a message names them: 'table streamer.scores_rejects'."""
        ...

    @property
    def committed_rows(self) -> tuple[int, int]:
        """(predictions, rejects) the run's commits hold, earlier writers' of its id too."""
        ...

    def resume(self, run_id: str, shard: Shard, plan: Ranges | None, force: bool) -> Resume:
        """The run's saved plan and progress (its bounds saved from ``plan`` when it has none).
        Raises ReplayFinishedError when it covered its whole plan, unless ``force`` (it starts again,
        its rows written before replaced)."""
        ...

    def write(self, predictions: pa.Table | None, rejects: pa.Table | None) -> int:
        """Add rows to the open files (nothing is visible before :meth:`commit`); the number of
        ``predictions`` it could not keep and wrote as rejects instead (a key-value store's rows
        without an entity id)."""
        ...

    def due(self) -> bool:
        """A file reached the target size."""
        ...

    def commit(self, covered: Ranges) -> None:
        """Make what was written visible, as one commit that records ``covered``."""
        ...

    def finish(self) -> None: ...


def ranges_text(ranges: Mapping[Partition, tuple[int, int]]) -> str:
    return json.dumps({f"{t}:{p}": [a, b] for (t, p), (a, b) in sorted(ranges.items())}, separators=(",", ":"))


def ranges_of(text: str) -> Ranges:
    out: Ranges = {}
    for key, (a, b) in json.loads(text).items():
        topic, _, partition = key.rpartition(":")
        out[(topic, int(partition))] = (int(a), int(b))
    return out


class FilesSink:
    """What both sinks share: a run's open prediction and reject files (files.py), named by run,
    shard, commit number and a count, so that a resumed run writes the same names again."""

    def __init__(self) -> None:
        self._run, self._shard, self._seq, self._n = "", Shard(), 0, 0
        self._files: DayFiles | None = None
        self._rejected: DayFiles | None = None
        # (predictions, rejects) the shard's commits hold, its earlier writers' too; each commit records them
        self.committed_rows = (0, 0)
        self._pending = (0, 0)

    name: str  # each sink's (Sink.name)

    @property
    def rejects_at(self) -> str:
        return f"{self.name}_rejects"

    def _name(self) -> str:
        self._n += 1
        return f"{self._run}-{self._shard}-{self._seq:06d}-{self._n}"

    def write(self, predictions: pa.Table | None, rejects: pa.Table | None) -> int:
        assert self._files is not None and self._rejected is not None
        if predictions is not None:
            self._files.write(predictions)
        if rejects is not None:
            self._rejected.write(rejects)
        self._pending = (self._pending[0] + (0 if predictions is None else predictions.num_rows),
                         self._pending[1] + (0 if rejects is None else rejects.num_rows))
        return 0

    def _totals(self) -> tuple[int, int]:
        """What the shard's commits hold once the open files are committed."""
        return self.committed_rows[0] + self._pending[0], self.committed_rows[1] + self._pending[1]

    def _committed(self, totals: tuple[int, int]) -> None:
        self.committed_rows, self._pending = totals, (0, 0)

    def due(self) -> bool:
        return self._files is not None and self._files.full()
