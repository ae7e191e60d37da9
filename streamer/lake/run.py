"""The loop of a lake run: read chunks, batch, score, write, commit at the file size; until the range is read.

One loop for both sources, a topic's range (topic.py) and a table's rows (table.py), on the
stream's parts: the same decode and validation, the same batcher (size-only: a batch flushes at
``max_size`` rows, a run's rows never wait on a clock), and a scorer: one model's serving
(breaker, fallback, the model's version and digest in every row), or a champion and a candidate side by side (evaluate/pair.py). A commit first scores every row read so far, so the range it records is wholly
written: predictions, and rejects (rows that cannot be decoded, validated or scored) with their
reason and original bytes. A model that cannot score at all fails the run; the same run id
resumes it from its last commit. A stop (SIGTERM, Ctrl+C: ``stop`` set) ends the reading after
the chunk in hand: the open batch is scored and written, and what was read is committed, so the
same run id resumes it where the stop left it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa

from streamer.kafka.ranges import Ranges
from streamer.lake.columns import PredictionColumns, rejects_table
from streamer.lake.sink import Resume, Sink
from streamer.pipeline.batcher import Batch, MicroBatcher
from streamer.pipeline.records import Partition, Rows, Stamp
from streamer.pipeline.serving import Serving
from streamer.pipeline.stages import Reject, without_poison


@dataclass(frozen=True, slots=True)
class Chunk:
    """Rows read from a source, its rejects, and the position each partition reached (next to read)."""

    rows: Rows
    rejects: list[Reject]
    reached: dict[Partition, int]
    gone: int = 0  # positions of the range the source no longer holds (a topic's retention deleted them)


class Source(Protocol):
    """Where a run's rows come from, from the positions of ``resume`` to its bounds."""

    def chunks(self, resume: Resume) -> Iterator[Chunk]: ...


@dataclass
class LakeCounts:
    """What a run did, as it goes: rows read, predictions and rejects written, commits made."""

    rows: int = 0
    predictions: int = 0
    rejects: int = 0
    commits: int = 0
    gone: int = 0
    stopped: bool = False  # a stop ended the run before its range's end (the same run id resumes it)


class Scorer(Protocol):
    """Turns a batch of rows into the sink's rows: a table of the rows it scored, and a reject
    for each row it could not score alone."""

    def warm_up(self) -> None: ...

    def score(self, rows: Rows) -> tuple[pa.Table, list[Reject]]: ...


class Predictions:
    """The lake's scorer: one model's predictions (breaker, the model's version and digest), a
    row of the prediction schema each."""

    def __init__(self, serving: Serving, columns: PredictionColumns, run_id: str) -> None:
        self.serving, self.columns, self.run_id = serving, columns, run_id

    def warm_up(self) -> None:
        self.serving.warm_up()

    def score(self, rows: Rows) -> tuple[pa.Table, list[Reject]]:
        out = self.serving.score(rows)  # ModelBrokenError: the run fails, resumable
        _, rows, scores, rejects = without_poison(rows, out.scores, out.poison)
        return self.columns.table(rows, scores, Stamp.of(out, int(time.time() * 1000), self.run_id)), rejects


class LakeRun:
    """Scores a source into a sink under one run id."""

    def __init__(self, sink: Sink, scorer: Scorer, run_id: str,
                 batch_size: int, on_progress: Callable[[LakeCounts], Any] = lambda c: None) -> None:
        self.sink, self.scorer, self.run_id = sink, scorer, run_id
        self._batcher: MicroBatcher[Rows] = MicroBatcher(batch_size, None, join=Rows.join)
        self.counts = LakeCounts()
        self._on_progress = on_progress

    def run(self, source: Source, resume: Resume, stop: threading.Event | None = None,
            abandon: threading.Event | None = None) -> LakeCounts:
        """Read ``source`` from ``resume``'s positions to its bounds, committing as files fill;
        when ``stop`` is set, only to the end of the chunk in hand (``counts.stopped``). When
        ``abandon`` is set (the run is another writer's now), it ends without another commit."""
        self.scorer.warm_up()
        covered: Ranges = {}
        since = dict(resume.reached)
        chunks = source.chunks(resume)
        try:
            for chunk in chunks:
                self._reject(chunk.rejects)
                self._score(self._batcher.add(chunk.rows))
                self.counts.rows += len(chunk.rows) + len(chunk.rejects)
                self.counts.gone += chunk.gone
                for pos, to in chunk.reached.items():
                    covered[pos] = (since.get(pos, resume.bounds[pos][0]), to)
                if abandon is not None and abandon.is_set():
                    break
                if self.sink.due():
                    covered = self._commit(covered, since)
                self._on_progress(self.counts)
                if stop is not None and stop.is_set():
                    break
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()  # a source's consumer or files, before the last commit
        if abandon is not None and abandon.is_set():  # what was read after the last commit is never visible
            self.counts.stopped = True
            return self.counts
        self._commit(covered, since)
        # A stop that came after the last row is a finish.
        self.counts.stopped = stop is not None and stop.is_set() and not Resume(resume.bounds, since, 0).done
        self.sink.finish()  # a Parquet dataset's _SUCCESS once every shard covered its range
        return self.counts

    def _commit(self, covered: Ranges, since: dict[Partition, int]) -> Ranges:
        flushed = self._batcher.flush("shutdown")
        if flushed is not None:
            self._score([flushed])
        if covered:
            self.sink.commit(covered)
            self.counts.commits += 1
            since.update({pos: to for pos, (_, to) in covered.items()})
        return {}

    def _score(self, batches: list[Batch[Rows]]) -> None:
        for batch in batches:
            table, rejects = self.scorer.score(batch.rows)
            unkept = self.sink.write(table, rejects_table(self.run_id, rejects) if rejects else None)
            self.counts.predictions += table.num_rows - unkept
            self.counts.rejects += len(rejects) + unkept

    def _reject(self, rejects: list[Reject]) -> None:
        if rejects:
            self.sink.write(None, rejects_table(self.run_id, rejects))
            self.counts.rejects += len(rejects)
