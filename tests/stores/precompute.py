"""The precompute tests' parts: a Parquet file of one event per entity, a config whose kv: section is
the test Redis, the same rows scored into Parquet to compare with, and the store's rows read back."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from streamer.commands.lake import run_score
from streamer.config_file import load_config
from streamer.dev.redis import LocalRedis
from streamer.stores.keys import KeySpace
from streamer.stores.precomputed import KINDS
from streamer.stores.values import decode_hash
from streamer.wiring.lake import Target
from tests.jobs.support import WIDTH, jobs_config
from tests.support.redis import client


def entities_file(path: Path, rows: int, seed: int = 11) -> Path:
    """``rows`` feature events, one per entity (``u<i>``), in row groups of 8,192."""
    rng = np.random.default_rng(seed)
    ids = np.arange(rows)
    pq.write_table(pa.table({
        "event_id": pa.array([f"e-{i}" for i in ids]),
        "entity_id": pa.array([f"u{i}" for i in ids]),
        "event_time": pa.array(1_767_225_600_000 + ids, pa.timestamp("ms", tz="UTC")),
        "features": pa.ListArray.from_arrays(np.arange(0, (rows + 1) * WIDTH, WIDTH, dtype=np.int32),
                                             pa.array(rng.random(rows * WIDTH, np.float32))),
    }), path, row_group_size=8192)
    return path


def kv_jobs_config(folder: Path, bootstrap: str, server: LocalRedis, prefix: str, **kv: Any) -> Path:
    """tests/jobs/support.py's config with a ``kv:`` section of ``server`` under ``prefix`` (``kv``: more keys)."""
    path = jobs_config(folder, bootstrap)
    more = "".join(f"  {k}: {v}\n" for k, v in kv.items())
    path.write_text(path.read_text() + f"kv:\n  address: {server.address}\n  password: {server.password}\n"
                                       f"  prefix: {prefix}\n{more}")
    return path


def scored_into_parquet(config: Path, source: Path, out: Path) -> dict[str, dict[str, Any]]:
    """``source`` scored by the config's model into a Parquet dataset: each entity's row, as the
    store keeps one (timestamps in epoch milliseconds, nulls left out)."""
    run_score(load_config(config), str(source), Target(parquet=str(out)), run_id="reference", progress=io.StringIO())
    table = pq.read_table(out, partitioning=None, ignore_prefixes=["_", "."])
    for name in ("event_time", "scored_at"):
        table = table.set_column(table.schema.get_field_index(name), name, table.column(name).cast(pa.int64()))
    rows = {}
    for row in table.to_pylist():
        row["event_time"] //= 1000
        row["scored_at"] //= 1000
        rows[row["entity_id"]] = {k: v for k, v in row.items() if v is not None}
    return rows


def store_rows(server: LocalRedis, prefix: str, run: str, entities: list[str]) -> dict[str, dict[str, Any]]:
    """The hashes of ``entities`` in ``run`` under ``prefix``, decoded by the run's kinds."""
    keys, r = KeySpace(prefix), client(server)
    kinds = orjson.loads(r.hget(keys.run(run), KINDS))
    pipe = r.pipeline(transaction=False)
    for entity in entities:
        pipe.hgetall(keys.entity(run, entity))
    return {entity: decode_hash(raw, kinds) for entity, raw in zip(entities, pipe.execute(), strict=True)}


def same_row(stored: dict[str, Any], reference: dict[str, Any]) -> dict[str, Any]:
    """The fields where a stored prediction differs from the reference row (the run and its time aside)."""
    skip = {"run_id", "scored_at"}
    names = (set(stored) | set(reference)) - skip
    return {n: (stored.get(n), reference.get(n)) for n in names if stored.get(n) != reference.get(n)}
