"""score_dataframe on a local Spark session: one scoring of each row whatever reads the two frames;
the lake's catalog as Spark's settings."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import cloudpickle
import pyarrow as pa
import pytest

from streamer.config import LakeConfig
from streamer.config_check import Location, Secret
from streamer.engines.scorer import ArrowScorer
from streamer.engines.spark import catalog_conf, score_dataframe
from streamer.errors import ConfigError
from tests.lake.test_score import config, events


class CountingScorer(ArrowScorer):
    """An ArrowScorer that adds each batch's row count to a file: how often rows were scored."""

    def __init__(self, *args: object, tally: Path, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.tally = tally

    def __getstate__(self) -> dict[str, object]:
        return {**super().__getstate__(), "tally": self.tally}

    def __setstate__(self, state: dict[str, object]) -> None:
        super().__setstate__(state)
        self.tally = state["tally"]  # type: ignore[assignment]

    def outcomes(self, batch: pa.RecordBatch | pa.Table) -> pa.Table:
        with self.tally.open("a") as out:
            out.write(f"{batch.num_rows}\n")
        return super().outcomes(batch)


@pytest.fixture(scope="module")
def spark() -> Iterator[object]:
    from pyspark.sql import SparkSession

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers need not import tests/
    kept = os.environ.get("PYSPARK_PYTHON")
    os.environ["PYSPARK_PYTHON"] = sys.executable  # the workers' Python: this one, with the spark extra
    session = (SparkSession.builder.master("local[2]").appName("frames").config("spark.ui.enabled", "false")
               .config("spark.sql.execution.arrow.maxRecordsPerBatch", "500")
               .getOrCreate())
    yield session
    session.stop()
    if kept is None:
        os.environ.pop("PYSPARK_PYTHON")
    else:
        os.environ["PYSPARK_PYTHON"] = kept
    cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def test_each_row_is_scored_once_however_many_actions_read_both_frames(spark: object, tmp_path: Path) -> None:
    cfg = config(tmp_path)
    table = events(3000, {7: {"features": [1.0] * 3}, 2900: {"features": [float("nan")] * 32}})
    df = spark.createDataFrame(table).repartition(3)  # type: ignore[attr-defined]
    tally = tmp_path / "scored.txt"
    predictions, rejects = score_dataframe(df, cfg, "once", scorer=CountingScorer(cfg, "once", tally=tally))
    assert (predictions.count(), rejects.count()) == (2998, 2)
    got = predictions.toArrow()
    assert sorted(rejects.toArrow().column("error").to_pylist()) == ["ValidationError"] * 2
    assert got.num_rows == 2998 and set(got.column("run_id").to_pylist()) == {"once"}
    assert sum(int(n) for n in tally.read_text().split()) == 3000  # four actions, one scoring


def test_the_lake_catalog_as_sparks_streamer_catalog(tmp_path: Path) -> None:
    lake = LakeConfig(warehouse=Location(str(tmp_path / "lake")))
    conf = catalog_conf(lake)
    assert conf["spark.sql.catalog.streamer.type"] == "jdbc"
    assert conf["spark.sql.catalog.streamer.uri"] == f"jdbc:sqlite:{tmp_path / 'lake' / 'catalog.db'}"
    assert conf["spark.sql.catalog.streamer.warehouse"] == (tmp_path / "lake").as_uri()
    assert conf["spark.sql.iceberg.check-nullability"] == "false"
    rest = catalog_conf(replace(lake, catalog="rest", catalog_uri=Secret("http://127.0.0.1:8181"),
                                catalog_token=Secret("t0k")))
    assert (rest["spark.sql.catalog.streamer.type"], rest["spark.sql.catalog.streamer.token"]) == ("rest", "t0k")
    with pytest.raises(ConfigError, match="lake.catalog_uri.*neither"):
        catalog_conf(replace(lake, catalog_uri=Secret("postgresql://db/lake")))
