"""The rows a Ray run reads carry the places `streamer score` gives them: Parquet files by their sorted number and
row, an Iceberg table's snapshot as one partition numbered in its scan's order
(no cluster: the read tasks' function itself)."""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from streamer.commands.lake import Target, run_score
from streamer.config import Config, LakeConfig
from streamer.engines.ray_read import placed_source, read_piece
from streamer.engines.scorer import POSITION
from streamer.lake.places import open_catalog
from tests.lake.test_score import config, events


def places(lake: LakeConfig, location: str) -> dict[str, tuple[str, int, int]]:
    """event_id -> (source, partition, row) as the Ray read gives them, every piece read."""
    source, _ = placed_source(lake, location)
    tables = [t for piece in source.pieces for t in read_piece(source.lake, piece)]
    table = pa.concat_tables(tables)
    return dict(zip(table.column("event_id").to_pylist(),
                    zip(*(table.column(c).to_pylist() for c in POSITION), strict=True), strict=True))


def scored(cfg: Config, location: str, out: Path) -> dict[str, tuple[str, int, int]]:
    """event_id -> (source_topic, source_partition, source_offset) as `streamer score` writes them."""
    run_score(cfg, location, Target(parquet=str(out)), run_id="ref", progress=io.StringIO())
    t = ds.dataset(out, format="parquet").to_table()
    return dict(zip(t.column("event_id").to_pylist(), zip(t.column("source_topic").to_pylist(),
                    t.column("source_partition").to_pylist(), t.column("source_offset").to_pylist(), strict=True),
                    strict=True))


def test_parquet_files_and_an_iceberg_table_are_read_with_streamer_scores_places(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    rows = events(5000, {})
    (tmp_path / "in").mkdir()
    pq.write_table(rows.slice(0, 3000), tmp_path / "in" / "b.parquet", row_group_size=500)
    pq.write_table(rows.slice(3000), tmp_path / "in" / "a.parquet", row_group_size=700)
    got = places(cfg.lake, str(tmp_path / "in"))
    assert len(got) == 5000 and got == scored(cfg, str(tmp_path / "in"), tmp_path / "p")

    catalog = open_catalog(cfg.lake)
    table = catalog.create_table("streamer.events", schema=rows.schema)
    table.append(rows.slice(0, 2000))
    table.append(rows.slice(2000))
    got = places(cfg.lake, "events")
    assert len(got) == 5000 and got == scored(cfg, "events", tmp_path / "t")

