"""lake/iceberg.py's table checks on an embedded catalog: a wrong type refused by name, a new column added."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from streamer.config import LakeConfig
from streamer.config_check import Location
from streamer.errors import ConfigError
from streamer.lake.iceberg import ensure_table
from streamer.lake.places import open_catalog

BASE = pa.schema([pa.field("event_id", pa.string(), nullable=False), pa.field("scores", pa.list_(pa.float32())),
                  pa.field("event_time", pa.timestamp("us", tz="UTC"), nullable=False)])


def test_a_new_required_output_is_added_as_an_optional_column(tmp_path: Path) -> None:
    catalog = open_catalog(LakeConfig(warehouse=Location(str(tmp_path / "lake"))))
    ensure_table(catalog, "streamer.scores", BASE, "event_time")
    more = BASE.append(pa.field("label", pa.int64(), nullable=False))  # a model output: never null
    table = ensure_table(catalog, "streamer.scores", more, "event_time")
    label = table.schema().find_field("label")
    assert (str(label.field_type), label.required) == ("long", False)  # the older rows have none
    assert [f.name for f in table.schema().fields] == ["event_id", "scores", "event_time", "label"]
    assert ensure_table(catalog, "streamer.scores", more, "event_time").schema() == table.schema()


def test_a_column_of_another_type_or_one_not_written_is_refused_by_name(tmp_path: Path) -> None:
    catalog = open_catalog(LakeConfig(warehouse=Location(str(tmp_path / "lake"))))
    ensure_table(catalog, "streamer.scores", BASE, "event_time")
    doubles = pa.schema([BASE.field(0), pa.field("scores", pa.list_(pa.float64())), BASE.field(2)])
    with pytest.raises(ConfigError, match="has column 'scores' as list<float>, these predictions write it as "
                                          "list<double>"):
        ensure_table(catalog, "streamer.scores", doubles, "event_time")
    with pytest.raises(ConfigError, match="has a column 'scores' .* that these predictions do not write"):
        ensure_table(catalog, "streamer.scores", pa.schema([BASE.field(0), BASE.field(2)]), "event_time")


def test_a_table_with_a_struct_column_takes_the_same_rows_again(tmp_path: Path) -> None:
    catalog = open_catalog(LakeConfig(warehouse=Location(str(tmp_path / "lake"))))
    item = pa.struct([pa.field("sku", pa.string()), pa.field("tags", pa.list_(pa.string()), nullable=False)])
    rows = BASE.append(pa.field("item", item)).append(pa.field("prices", pa.map_(pa.string(), pa.float64())))
    made = ensure_table(catalog, "streamer.scores", rows, "event_time")
    again = ensure_table(catalog, "streamer.scores", rows, "event_time")  # a struct's field ids are the table's own
    assert again.schema() == made.schema()
    other = BASE.append(pa.field("item", pa.struct([pa.field("sku", pa.int64())])))
    with pytest.raises(ConfigError, match="has column 'item' as struct<sku: optional string, tags: required "
                                          r"list<string>>, these predictions write it as struct<sku: optional long>"):
        ensure_table(catalog, "streamer.scores", other.append(rows.field("prices")), "event_time")
