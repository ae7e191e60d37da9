"""Replays into the lake on the real broker: an Iceberg table and a Parquet dataset, read back by DuckDB."""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

import duckdb
import pytest

from streamer.commands.lake import Target, run_lake_replay
from streamer.config import Config, LakeConfig
from streamer.config_check import Location
from streamer.errors import ReplayFinishedError
from streamer.formats.configured import output_codec
from streamer.kafka.ranges import When
from streamer.pipeline.reload import checked_runner
from tests.conftest import Topics, make_config
from tests.integration.test_replay_kafka import produce_stamped

pytestmark = pytest.mark.kafka
DAY_MS = 86_400_000


def recent(n: int, step_ms: int) -> int:
    """The first stamp of ``n`` events ``step_ms`` apart that end now: a broker's retention (by
    record time) would delete older ones while the test reads them."""
    import time

    return int(time.time() * 1000) - n * step_ms


def lake_config(bootstrap: str, topics: Topics, tmp_path: Path, target_file_mb: int = 1) -> Config:
    cfg = make_config(bootstrap, topics)
    return replace(cfg, lake=LakeConfig(warehouse=Location(str(tmp_path / "lake")), target_file_mb=target_file_mb))


def iceberg(metadata: str, sql: str) -> list[tuple]:
    import duckdb_extension_avro
    import duckdb_extension_iceberg

    con = duckdb.connect()
    for mod in (duckdb_extension_avro, duckdb_extension_iceberg):
        path = next(Path(mod.__file__).parent.glob("extensions/*/*.duckdb_extension"))
        con.execute(f"LOAD '{path}'")
    return con.execute(sql.replace("{T}", f"iceberg_scan('{metadata}')")).fetchall()


def test_replay_into_an_iceberg_table_reads_back_in_duckdb(bootstrap: str, topics: Topics, tmp_path: Path) -> None:
    cfg = lake_config(bootstrap, topics, tmp_path)
    produce_stamped(bootstrap, cfg, topics.input, 0, 3000, step_ms=DAY_MS // 1000,
                    base_ms=recent(3000, DAY_MS // 1000))  # 1000 events a day
    summary = run_lake_replay(cfg, When("earliest"), When("latest"), Target(table="scores"), run_id="r1",
                              progress=io.StringIO())
    assert (summary.counts.predictions, summary.counts.rejects) == (3000, 0)
    from streamer.lake.places import open_catalog

    table = open_catalog(cfg.lake).load_table("streamer.scores")
    rows = iceberg(table.metadata_location, "SELECT count(*), count(DISTINCT (source_partition, source_offset)), "
                                            "count(DISTINCT event_id), min(run_id), max(run_id) FROM {T}")
    assert rows == [(3000, 3000, 3000, "r1", "r1")]
    days = iceberg(table.metadata_location, "SELECT count(DISTINCT CAST(event_time AS DATE)) FROM {T}")
    assert days[0][0] in (3, 4)
    with pytest.raises(ReplayFinishedError):
        run_lake_replay(cfg, When("earliest"), When("latest"), Target(table="scores"), run_id="r1",
                        progress=io.StringIO())


def lake_config_file(tmp_path: Path, bootstrap: str, topics: Topics, **lake: object) -> Path:
    """The fault suite's config file (the example's, on these topics) with a lake: section."""
    import yaml

    from tests.support.faults import write_config

    path = write_config(tmp_path / "config.yaml", bootstrap=bootstrap, input_topic=topics.input,
                        output_topic=topics.output, group=topics.group, guarantee="at_least_once")
    doc = yaml.safe_load(path.read_text())
    doc["lake"] = {"warehouse": str(tmp_path / "lake"), **lake}
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.timeout(300)
def test_two_workers_write_the_same_rows_as_one(bootstrap: str, topics: Topics, tmp_path: Path) -> None:
    from streamer.cli import main
    from streamer.config_file import load_config
    from streamer.lake.places import open_catalog

    path = lake_config_file(tmp_path, bootstrap, topics, target_file_mb=1)
    cfg = load_config(path)
    produce_stamped(bootstrap, make_config(bootstrap, topics), topics.input, 0, 60_000, step_ms=5000,
                    base_ms=recent(60_000, 5000))
    assert main(["replay", "--config", str(path), "--from", "earliest", "--to-table", "two", "--workers", "2",
                 "--run-id", "w"]) == 0
    run_lake_replay(cfg, When("earliest"), When("latest"), Target(table="one"), run_id="w", progress=io.StringIO())
    catalog = open_catalog(cfg.lake)
    one, two = (catalog.load_table(f"streamer.{t}") for t in ("one", "two"))
    shards = {s.summary.get("streamer.shard") for s in two.metadata.snapshots if s.summary.get("streamer.run-id")}
    assert shards == {"0-of-2", "1-of-2"}
    cols = "source_partition, source_offset, event_id, scores, run_id"
    con_sql = (f"SELECT count(*) FROM ((SELECT {cols} FROM {{A}} EXCEPT SELECT {cols} FROM {{B}}) UNION ALL "
               f"(SELECT {cols} FROM {{B}} EXCEPT SELECT {cols} FROM {{A}}))")
    scan = "iceberg_scan('{}')"
    sql = con_sql.replace("{A}", scan.format(one.metadata_location)).replace("{B}", scan.format(two.metadata_location))
    assert iceberg(one.metadata_location, sql) == [(0,)]
    assert iceberg(two.metadata_location, "SELECT count(*), count(DISTINCT (source_partition, source_offset)) FROM {T}"
                   ) == [(60_000, 60_000)]


@pytest.mark.timeout(300)
def test_the_same_backfill_to_an_s3_store(bootstrap: str, topics: Topics, tmp_path: Path, object_store: object) -> None:
    """A table whose warehouse is s3:// and a Parquet dataset on s3://, through a real S3 store (SeaweedFS),
    read back by DuckDB over S3."""
    from streamer.config import S3Config, Secret
    from streamer.lake.places import open_catalog
    from tests.support import duck
    from tests.support.objectstore import ObjectStore

    assert isinstance(object_store, ObjectStore)
    bucket = object_store.bucket(f"lake-{topics.group[-8:]}")
    s3 = S3Config(endpoint=object_store.endpoint, region=object_store.region,
                  access_key_id=Secret(object_store.access_key_id),
                  secret_access_key=Secret(object_store.secret_access_key))
    cfg = replace(make_config(bootstrap, topics), lake=LakeConfig(
        warehouse=Location(f"{bucket}/warehouse"), catalog_uri=Secret(f"sqlite:///{tmp_path / 'catalog.db'}"), s3=s3))
    produce_stamped(bootstrap, cfg, topics.input, 0, 2000, step_ms=60_000, base_ms=recent(2000, 60_000))
    for target in (Target(table="scores"), Target(parquet=f"{bucket}/scores")):
        summary = run_lake_replay(cfg, When("earliest"), When("latest"), target, run_id="s3", progress=io.StringIO())
        assert summary.counts.predictions == 2000
    table = open_catalog(cfg.lake).load_table("streamer.scores")
    assert table.metadata_location.startswith(f"{bucket}/warehouse/")
    con = duck.connect(object_store)
    for source in (f"iceberg_scan('{table.metadata_location}')",
                   f"read_parquet('{bucket}/scores/**/*.parquet', hive_partitioning = true)"):
        assert con.execute(f"SELECT count(*), count(DISTINCT (source_partition, source_offset)) FROM {source}"
                           ).fetchall() == [(2000, 2000)]
    assert object_store.arrow_filesystem().get_file_info(f"{bucket[5:]}/scores/_SUCCESS").size > 0


def test_offsets_the_broker_deleted_before_the_run_read_them_are_counted_not_hidden(
        bootstrap: str, topics: Topics) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    from streamer.formats.configured import input_codec
    from streamer.lake.sink import Resume
    from streamer.lake.topic import TopicSource
    from streamer.pipeline.stages import Stages
    from tests.support.faults import end_offsets

    cfg = make_config(bootstrap, topics)
    produce_stamped(bootstrap, cfg, topics.input, 0, 900, base_ms=recent(900, 1000))
    ends = end_offsets(bootstrap, topics.input)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_records([TopicPartition(topics.input, 0, 100)], request_timeout=30).values():
        future.result(timeout=30)  # retention's effect, on cue: offsets 0..99 of partition 0 are gone
    runner = checked_runner(cfg)
    source = TopicSource(cfg, Stages.serving(input_codec(cfg.input), output_codec(cfg), cfg, runner))
    resume = Resume({(topics.input, p): (0, end) for p, end in ends.items()}, {}, 0)
    chunks = list(source.chunks(resume))
    assert sum(c.gone for c in chunks) == 100
    assert sum(len(c.rows) for c in chunks) == 800
