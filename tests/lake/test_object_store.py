"""The lake's real parts together: pyiceberg and pyarrow write, DuckDB reads back, on disk and in S3 (SeaweedFS)."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import DayTransform
from pyiceberg.types import DoubleType, NestedField, StringType, TimestamptzType

from tests.support import duck, objectstore
from tests.support.objectstore import ObjectStore

TABLE_SCHEMA = Schema(NestedField(1, "key", StringType(), required=True),
                      NestedField(2, "event_time", TimestamptzType(), required=True),
                      NestedField(3, "score", DoubleType(), required=False))
BY_DAY = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=DayTransform(), name="event_day"))
SCHEMA = TABLE_SCHEMA.as_arrow()  # key: string not null, event_time: timestamp[us, tz=UTC] not null, score
DAY0 = datetime(2025, 3, 1, 22, 0, tzinfo=UTC)


def rows(first: int, n: int) -> pa.Table:
    """``n`` rows keyed ``k<first>``..., an hour apart from DAY0 + ``first`` hours, so they span days."""
    return pa.table({"key": [f"k{i}" for i in range(first, first + n)],
                     "event_time": [DAY0 + timedelta(hours=i) for i in range(first, first + n)],
                     "score": [i / 10 for i in range(first, first + n)]}, schema=SCHEMA)


def write_table(catalog: SqlCatalog) -> Table:
    """A table partitioned by day(event_time), two appends (two snapshots) tagged with a run id."""
    catalog.create_namespace("streamer")
    table = catalog.create_table("streamer.predictions", schema=TABLE_SCHEMA, partition_spec=BY_DAY)
    table.append(rows(0, 5), snapshot_properties={"streamer.run-id": "r1"})
    table.append(rows(5, 7), snapshot_properties={"streamer.run-id": "r1"})
    assert table.spec() == BY_DAY
    days = {row["event_day"] for row in table.inspect.files().column("partition").to_pylist()}
    assert days == {date(2025, 3, 1), date(2025, 3, 2)}
    return table


def assert_iceberg_reads_back(table: Table, store: ObjectStore | None) -> None:
    snapshots = table.snapshots()
    assert len(snapshots) == 2
    assert [s.summary["streamer.run-id"] for s in snapshots if s.summary] == ["r1", "r1"]
    con = duck.connect(store)
    count, keys, days = con.execute(
        "SELECT count(*), count(DISTINCT key), count(DISTINCT CAST(event_time AS DATE)) "
        "FROM iceberg_scan(?)", [table.metadata_location]).fetchone() or (0, 0, 0)
    assert (count, keys, days) == (12, 12, 2)
    got = {k for (k,) in con.execute("SELECT key FROM iceberg_scan(?)", [table.metadata_location]).fetchall()}
    assert got == {f"k{i}" for i in range(12)}


def write_hive_parquet(root: str, filesystem: pafs.FileSystem) -> None:
    data = rows(0, 12).append_column("day", pa.array([str((DAY0 + timedelta(hours=i)).date()) for i in range(12)]))
    ds.write_dataset(data, root, filesystem=filesystem, format="parquet",
                     partitioning=ds.partitioning(pa.schema([("day", pa.string())]), flavor="hive"))


def assert_parquet_reads_back(glob: str, store: ObjectStore | None) -> None:
    con = duck.connect(store)
    got = con.execute("SELECT day, count(*), count(DISTINCT key) FROM read_parquet(?, hive_partitioning = true) "
                      "GROUP BY day ORDER BY day", [glob]).fetchall()
    assert got == [(date(2025, 3, 1), 2, 2), (date(2025, 3, 2), 10, 10)]  # DuckDB types the hive value


def test_an_iceberg_table_in_the_store_reads_back_in_duckdb(object_store: ObjectStore, tmp_path: Path) -> None:
    bucket = object_store.bucket(f"lake-{uuid.uuid4().hex[:8]}")
    catalog = SqlCatalog("test", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"{bucket}/wh",
                         **object_store.pyiceberg_properties())
    table = write_table(catalog)
    assert table.metadata_location.startswith(f"{bucket}/wh/")
    assert_iceberg_reads_back(table, object_store)


def test_a_hive_parquet_dataset_in_the_store_reads_back_in_duckdb(object_store: ObjectStore) -> None:
    name = f"parquet-{uuid.uuid4().hex[:8]}"
    object_store.bucket(name)
    write_hive_parquet(f"{name}/out", object_store.arrow_filesystem())
    assert_parquet_reads_back(f"s3://{name}/out/**/*.parquet", object_store)


def test_a_wrong_key_is_refused(object_store: ObjectStore) -> None:
    """The store checks signatures: a test that passes signs as a real S3 client must."""
    bucket = object_store.bucket(f"keys-{uuid.uuid4().hex[:8]}")
    wrong = pafs.S3FileSystem(endpoint_override=object_store.host_port, scheme="http", region=object_store.region,
                              access_key="nobody", secret_key="nothing", connect_timeout=10, request_timeout=10)
    with pytest.raises(OSError, match="INVALID_ACCESS_KEY_ID|AccessDenied|ACCESS_DENIED"):
        with wrong.open_output_stream(f"{bucket.removeprefix('s3://')}/x.bin") as out:
            out.write(b"x")


def test_a_store_that_does_not_start_names_its_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(objectstore, "weed_binary", lambda: Path("/bin/false"))
    with pytest.raises(objectstore.ObjectStoreStartError, match=r"exited with 1(.|\n)*weed\.log"):
        with objectstore.seaweedfs(tmp_path):
            pass


def test_an_iceberg_table_on_disk_reads_back_in_duckdb(tmp_path: Path) -> None:
    catalog = SqlCatalog("test", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/wh")
    table = write_table(catalog)
    assert_iceberg_reads_back(table, None)


def test_a_hive_parquet_dataset_on_disk_reads_back_in_duckdb(tmp_path: Path) -> None:
    write_hive_parquet(str(tmp_path / "out"), pafs.LocalFileSystem())
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["day=2025-03-01", "day=2025-03-02"]
    assert_parquet_reads_back(f"{tmp_path}/out/**/*.parquet", None)
