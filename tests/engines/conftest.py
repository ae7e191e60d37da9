"""What the engine tests share: one table of 1,000,000 rows (some that cannot be scored) and what
``streamer score`` writes for it, made once per session; and the Spark and Ray clusters, which only
these tests use: started by the first test that asks, stopped after this folder's last test, so the
rest of the suite never carries their idle daemons."""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from streamer.commands.lake import Target, run_score
from streamer.config import Config
from tests.lake.test_score import config, many
from tests.support.ray_cluster import RayCluster
from tests.support.ray_cluster import ray_cluster as running_ray
from tests.support.spark_cluster import SparkCluster
from tests.support.spark_cluster import spark_cluster as running_spark

ROWS = 1_000_000
FILES = 4
# Rows that cannot be scored, by row number in the table: each a reject with its reason.
BAD = {17: {"features": [1.0] * 3}, 250_001: {"features": [float("nan")] * 32}, 999_999: {"features": None}}
STAMPS = ("run_id", "scored_at", "rejected_at")  # the run's own: never equal across two runs


@pytest.fixture(scope="package")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayCluster]:
    """A real Ray cluster (a head and one more node, tests/support/ray_cluster.py) for this folder,
    started by the first test that asks for it; its cost paid once. Fails loudly if none starts."""
    with running_ray(tmp_path_factory.mktemp("ray")) as cluster:
        yield cluster


@pytest.fixture(scope="package")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    """A real Spark standalone cluster (a master and two one-core workers, tests/support/spark_cluster.py)
    for this folder, shared by every Spark test and the docs page; stopped after its last test."""
    with running_spark(tmp_path_factory.mktemp("spark")) as cluster:
        yield cluster


@dataclass(frozen=True)
class Scored:
    """A table in ``FILES`` Parquet files under ``folder``, the config that scores it, and what
    ``streamer score`` wrote for it (predictions and rejects)."""

    cfg: Config
    folder: Path
    predictions: pa.Table
    rejects: pa.Table


def unstamped(table: pa.Table) -> pa.Table:
    """``table`` less the run's own stamps, in the order of the rows' places."""
    return table.drop_columns([c for c in STAMPS if c in table.column_names]).sort_by(
        [("source_partition", "ascending"), ("source_offset", "ascending")])


@pytest.fixture(scope="session")
def million(tmp_path_factory: pytest.TempPathFactory) -> Scored:
    root = tmp_path_factory.mktemp("million")
    cfg = config(root)
    table = many(ROWS)
    for i, change in BAD.items():
        for name, value in change.items():
            column = table.column(name).combine_chunks()
            values = pa.array([value], column.type)
            index = table.schema.get_field_index(name)
            table = table.set_column(index, name, pa.concat_arrays([column.slice(0, i), values, column.slice(i + 1)]))
    folder = root / "events"
    folder.mkdir()
    per = ROWS // FILES
    for f in range(FILES):
        pq.write_table(table.slice(f * per, per), folder / f"part-{f}.parquet", row_group_size=65_536)
    run_score(cfg, str(folder), Target(parquet=str(root / "scores")), run_id="reference", progress=io.StringIO())
    predictions = ds.dataset(root / "scores", format="parquet").to_table()
    rejects = ds.dataset(root / "scores_rejects", format="parquet").to_table()
    assert predictions.num_rows == ROWS - len(BAD) and rejects.num_rows == len(BAD)
    assert np.all(np.diff(np.sort(predictions.column("source_offset").to_numpy())) >= 0)
    return Scored(cfg, folder, predictions, rejects)
