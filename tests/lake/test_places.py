"""The catalog a lake config names: opened once another process created a new SQL catalog's tables first."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyiceberg.catalog.sql as sql
import pytest
from sqlalchemy.exc import OperationalError

from streamer.config import LakeConfig
from streamer.config_check import Location
from streamer.errors import ConfigError
from streamer.lake.places import open_catalog


def racing(monkeypatch: pytest.MonkeyPatch, fails: int, why: str) -> list[int]:
    """The SQL catalog's first ``fails`` opens lose the race to create its tables (as SQLite tells
    the second of two processes); the others open the real catalog. Returns the opens, counted."""
    real, opens = sql.SqlCatalog, [0]

    def catalog(*args: Any, **kwargs: Any) -> Any:
        opens[0] += 1
        if opens[0] <= fails:
            raise OperationalError("CREATE TABLE iceberg_tables (...)", {}, Exception(why))
        return real(*args, **kwargs)

    monkeypatch.setattr(sql, "SqlCatalog", catalog)
    return opens


@pytest.mark.parametrize("why", ["table iceberg_tables already exists",  # its tables
                                 "UNIQUE constraint failed: iceberg_namespace_properties.catalog_name"])  # its namespace
def test_a_catalog_whose_tables_another_process_made_meanwhile_is_opened_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, why: str) -> None:
    opens = racing(monkeypatch, 1, why)
    catalog = open_catalog(LakeConfig(warehouse=Location(str(tmp_path / "lake"))))
    assert opens == [2] and catalog.list_namespaces() == [("streamer",)]


def test_any_other_failure_to_open_the_catalog_is_refused_at_once_naming_the_key(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opens = racing(monkeypatch, 5, "disk I/O error")
    with pytest.raises(ConfigError) as caught:
        open_catalog(LakeConfig(warehouse=Location(str(tmp_path / "lake"))))
    assert opens == [1] and caught.value.key == "lake.catalog_uri" and "disk I/O error" in caught.value.reason
