"""`streamer features load`: rows of Parquet files or an Iceberg table as the Redis hashes online requests fetch their features from.

The source is read batch by batch through Arrow (memory holds one batch, however large the
input): a Parquet file, a folder of them (local or ``s3://``, in the order of their sorted
paths), or an Iceberg table of ``lake.catalog`` (its current snapshot). stores/loader.py writes
each row as the hash ``<prefix>:<entity id>`` (``input.entity_field`` is the entity column) and
the fields' kinds. A stop (SIGTERM, Ctrl+C) ends the load between two pipelines: what was
written stays, and running the same command again writes every row again, the same.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, TextIO

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from streamer.config import KvConfig, LakeConfig, OnlineConfig
from streamer.config_check import key_prefix
from streamer.errors import ConfigError
from streamer.lake.places import identifier, open_catalog
from streamer.lake.table import parquet_files
from streamer.observe.bar import ProgressBar
from streamer.stores.loader import FeatureLoader, LoadCounts


@dataclass(frozen=True, slots=True)
class OnlinePart:
    """The part of a config the loader reads beside the unscored sections: ``online.features.prefix``,
    the default ``--prefix`` (config_file.load_part)."""

    online: OnlineConfig = field(default_factory=OnlineConfig)


@dataclass(frozen=True, slots=True)
class LoadSummary:
    """What a load did, finished or stopped."""

    location: str
    prefix: str
    address: str
    counts: LoadCounts
    seconds: float
    stopped: bool

    def lines(self) -> list[str]:
        c = self.counts
        lines = [f"features load {'stopped' if self.stopped else 'finished'}: {c.rows} rows loaded from "
                 f"{self.location} into {self.prefix}:<entity id> (the Redis store at {self.address}), "
                 f"{c.rows / max(self.seconds, 1e-9):,.0f} rows/s, {self.seconds:.1f} s in all"]
        if c.skipped:
            more = f" and {c.skipped - len(c.skipped_at)} more" if c.skipped > len(c.skipped_at) else ""
            lines.append(f"skipped {c.skipped} rows without an entity id: {', '.join(c.skipped_at)}{more}")
        if self.stopped:
            lines.append("stopped by a signal: run the same command again to load every row")
        return lines

    @property
    def all_skipped(self) -> bool:
        return self.counts.skipped > 0 and self.counts.rows == 0


def batches(lake: LakeConfig, location: str, rows: int) -> tuple[int, Iterator[tuple[str, int, pa.RecordBatch]]]:
    """The rows of ``location`` in all, and its batches of up to ``rows`` rows, each with its
    source's name and the row number of its first row there."""
    found = parquet_files(lake, location, "--from")
    if found is not None:
        fs, files = found
        total = 0
        for f in files:
            with fs.open_input_file(f) as stream:
                total += pq.ParquetFile(stream).metadata.num_rows
        return total, _files(fs, files, rows)
    from pyiceberg.exceptions import NoSuchTableError

    name = identifier(lake, location, "--from")
    try:
        table = open_catalog(lake).load_table(name)
    except NoSuchTableError as exc:
        raise ConfigError("--from", f"{location!r} is no file or folder here, nor a table of the catalog ({exc})") from exc
    snap = table.current_snapshot()
    if snap is None:
        return 0, iter(())
    scan = table.scan(snapshot_id=snap.snapshot_id)
    return int(scan.count()), _table(f"{name}@{snap.snapshot_id}", scan, rows)


def _files(fs: pafs.FileSystem, files: list[str], rows: int) -> Iterator[tuple[str, int, pa.RecordBatch]]:
    for f in files:
        with fs.open_input_file(f) as stream:
            at = 0
            for batch in pq.ParquetFile(stream).iter_batches(rows):
                yield f, at, batch
                at += batch.num_rows


def _table(name: str, scan: Any, rows: int) -> Iterator[tuple[str, int, pa.RecordBatch]]:
    at = 0
    for big in scan.to_arrow_batch_reader():  # batches of pyiceberg's size: cut to the pipelines'
        for off in range(0, big.num_rows, rows):
            batch = big.slice(off, rows)
            yield name, at, batch
            at += batch.num_rows


def load_features(kv: KvConfig, lake: LakeConfig, location: str, prefix: str, entity_field: str, *,
                  stop: threading.Event | None = None, progress: TextIO | None = None) -> LoadSummary:
    """Load every row of ``location`` as ``<prefix>:<entity id>`` hashes of ``kv``'s store; ``stop``
    set ends it after the pipeline in flight."""
    if kv.address is None:
        raise ConfigError("kv.address", "is required: the Redis store the features are loaded into")
    key_prefix("--prefix", prefix)
    total, chunks = batches(lake, location, kv.pipeline_rows)
    bar = ProgressBar(total, progress or sys.stderr, "features load")
    loader = FeatureLoader(kv, prefix, entity_field)
    started, stopped = time.monotonic(), False
    try:
        for source, first, batch in chunks:
            if stop is not None and stop.is_set():
                stopped = True
                break
            loader.write(batch, source, first)
            bar.update(loader.counts.rows + loader.counts.skipped)
    finally:
        loader.close()
    bar.close(loader.counts.rows + loader.counts.skipped)
    return LoadSummary(location, prefix, kv.address, loader.counts, time.monotonic() - started, stopped)
