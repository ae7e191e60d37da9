"""The lake's catalog as Spark's settings."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from streamer.config import LakeConfig
from streamer.config_check import Location, Secret
from streamer.engines.spark import catalog_conf
from streamer.errors import ConfigError


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
