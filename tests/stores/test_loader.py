"""`streamer features load` into a real Redis, read back as online requests read features
(stores/features.py's RedisFeatures): Parquet files, a folder, an Iceberg table; skipped rows; a stop."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from streamer import extras
from streamer.cli import main
from streamer.commands.features import load_features
from streamer.config import Config, FeaturesConfig, KvConfig, LakeConfig, OnlineConfig, Secret
from streamer.config_check import Location
from streamer.config_file import load_config
from streamer.dev.redis import LocalRedis
from streamer.errors import EXIT_CONFIG, EXIT_STOPPED, ConfigError, MissingExtra
from streamer.stores.feast import FeastFeatures
from streamer.stores.features import RedisFeatures, feature_source
from streamer.stores.keys import feature_key
from tests.conftest import EXAMPLE
from tests.support.feast import TIMESTAMP, entity_rows
from tests.support.redis import client, kv_config

ROOT = Path(__file__).resolve().parents[2]


pytestmark = pytest.mark.usefixtures("own_signals")  # `streamer features load` takes SIGTERM and SIGINT for its stop


def config_file(tmp_path: Path, kv: KvConfig) -> str:
    """The example config with ``kv`` as its kv: section and a lake in ``tmp_path``."""
    doc = yaml.safe_load(EXAMPLE.read_text())
    for section, key in (("input", "schema"), ("model", "path"), ("output", "schema")):
        doc[section][key] = str((EXAMPLE.parent / doc[section][key]).resolve())
    assert kv.password is not None
    doc["kv"] = {"address": kv.address, "password": kv.password.value, "prefix": kv.prefix, "pipeline_rows": 64}
    doc["lake"] = {"warehouse": str(tmp_path / "lake")}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def fetched(kv: KvConfig, prefix: str, ids: list[str]) -> list[dict[str, Any]]:
    async def run() -> list[dict[str, Any]]:
        source = RedisFeatures(FeaturesConfig(kind="redis", prefix=prefix), kv)
        try:
            return [await source.fetch(e) for e in ids]
        finally:
            await source.close()

    return asyncio.run(run())


def as_fields(row: dict[str, Any]) -> dict[str, Any]:
    """A Parquet row as the loader writes it: no entity id, no nulls, the time in milliseconds."""
    out = {k: v for k, v in row.items() if k != "entity_id" and v is not None}
    out[TIMESTAMP] = int(row[TIMESTAMP].timestamp() * 1000)
    return out


def test_a_folder_loaded_reads_back_as_its_rows_strings_kept_strings_and_skipped_rows_named(
        redis_server: LocalRedis, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kv = kv_config(redis_server)
    table = entity_rows(300)
    ids = table.column("entity_id").to_pylist()
    ids[17], ids[250] = None, ""  # two rows without an entity id
    table = table.set_column(0, "entity_id", pa.array(ids, pa.string()))
    (tmp_path / "rows").mkdir()
    pq.write_table(table.slice(0, 200), tmp_path / "rows" / "a.parquet", row_group_size=50)
    pq.write_table(table.slice(200), tmp_path / "rows" / "b.parquet")
    prefix = f"{kv.prefix}:features"

    code = main(["features", "load", "--config", config_file(tmp_path, kv), "--from", str(tmp_path / "rows"),
                 "--prefix", prefix])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "298 rows loaded" in out
    assert f"skipped 2 rows without an entity id: {tmp_path / 'rows' / 'a.parquet'} row 17, " \
           f"{tmp_path / 'rows' / 'b.parquet'} row 50" in out
    rows = [r for r in table.to_pylist() if r["entity_id"]]
    got = fetched(kv, prefix, [r["entity_id"] for r in rows] + ["nobody"])
    assert got[:-1] == [as_fields(r) for r in rows] and got[-1] == {}
    assert {r["country"] for r in got[:-1]} >= {"07", "1e3"}  # strings of digits stay strings
    assert client(redis_server).hgetall(prefix) == {b"features": b"json", b"amount": b"json", b"country": b"str",
                                                    b"visits": b"json", TIMESTAMP.encode(): b"json"}


def test_loading_again_replaces_a_feature_that_became_null(redis_server: LocalRedis, tmp_path: Path) -> None:
    kv = kv_config(redis_server)
    lake, prefix = LakeConfig(warehouse=Location(str(tmp_path / "lake"))), f"{kv.prefix}:f"
    first = pa.table({"entity_id": ["u1", "u2"], "amount": [1.5, 2.5], "tier": ["a", "b"]})
    pq.write_table(first, tmp_path / "one.parquet")
    load_features(kv, lake, str(tmp_path / "one.parquet"), prefix, "entity_id")
    pq.write_table(pa.table({"entity_id": ["u1"], "amount": pa.array([None], pa.float64())}), tmp_path / "two.parquet")
    summary = load_features(kv, lake, str(tmp_path / "two.parquet"), prefix, "entity_id")
    assert summary.counts.rows == 1 and not summary.stopped
    assert fetched(kv, prefix, ["u1", "u2"]) == [{"tier": "a"}, {"amount": 2.5, "tier": "b"}]


def test_an_iceberg_table_loads_as_its_rows(redis_server: LocalRedis, tmp_path: Path) -> None:
    from streamer.lake.places import open_catalog

    kv = kv_config(redis_server, pipeline_rows=100)
    lake = LakeConfig(warehouse=Location(str(tmp_path / "lake")))
    table = entity_rows(250)
    open_catalog(lake).create_table("streamer.features", schema=table.schema).append(table)
    summary = load_features(kv, lake, "features", f"{kv.prefix}:f", "entity_id")
    assert summary.counts.rows == 250 and summary.counts.skipped == 0
    rows = table.to_pylist()
    assert fetched(kv, f"{kv.prefix}:f", [r["entity_id"] for r in rows]) == [as_fields(r) for r in rows]


def test_a_stop_ends_the_load_between_two_pipelines(redis_server: LocalRedis, tmp_path: Path) -> None:
    kv = kv_config(redis_server, pipeline_rows=50)
    pq.write_table(entity_rows(200), tmp_path / "rows.parquet")

    class AfterTwo(threading.Event):  # set once two pipelines were written
        looks = 0

        def is_set(self) -> bool:
            self.looks += 1
            return self.looks > 2

    summary = load_features(kv, LakeConfig(), str(tmp_path / "rows.parquet"), f"{kv.prefix}:f", "entity_id",
                            stop=AfterTwo())
    assert summary.stopped and summary.counts.rows == 100
    assert "stopped by a signal: run the same command again to load every row" in summary.lines()
    assert fetched(kv, f"{kv.prefix}:f", ["e0099", "e0100"])[1] == {}


def test_what_cannot_load_is_refused_naming_the_key(redis_server: LocalRedis, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    kv = kv_config(redis_server)
    pq.write_table(pa.table({"user": ["u1"], "amount": [1.0]}), tmp_path / "users.parquet")
    with pytest.raises(ConfigError, match="input.entity_field.*has no column 'entity_id'.*user, amount"):
        load_features(kv, LakeConfig(), str(tmp_path / "users.parquet"), "f", "entity_id")
    pq.write_table(pa.table({"entity_id": ["u1"], "blob": [b"\x00"]}), tmp_path / "blob.parquet")
    with pytest.raises(ConfigError, match="--from: column 'blob' .* holds bytes"):
        load_features(kv, LakeConfig(), str(tmp_path / "blob.parquet"), "f", "entity_id")
    with pytest.raises(ConfigError, match="kv.address"):
        load_features(KvConfig(), LakeConfig(), str(tmp_path / "users.parquet"), "f", "entity_id")
    pq.write_table(pa.table({"entity_id": pa.array([None, None], pa.string()), "a": [1, 2]}),
                   tmp_path / "anonymous.parquet")
    path = config_file(tmp_path, kv)
    assert main(["features", "load", "--config", path, "--from", str(tmp_path / "nothing")]) == EXIT_CONFIG
    assert main(["features", "load", "--config", path, "--from", str(tmp_path / "anonymous.parquet")]) == EXIT_CONFIG
    assert main(["features", "load", "--config", path, "--from", str(tmp_path / "users.parquet"),
                 "--prefix", "a b"]) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert "--from: no file or folder at" in err and "no row of" in err and "--prefix" in err


def test_the_configured_feature_source_and_what_cannot_work(redis_server: LocalRedis) -> None:
    cfg = load_config(EXAMPLE)
    assert feature_source(cfg) is None

    def with_features(kv: KvConfig = KvConfig(), **features: Any) -> Config:
        return replace(cfg, kv=kv, online=OnlineConfig(features=FeaturesConfig(**features)))

    with pytest.raises(ConfigError, match="kv.address.*online.features.kind redis"):
        feature_source(with_features(kind="redis"))
    kv = KvConfig(address=redis_server.address, password=Secret(redis_server.password))
    redis, feast = (feature_source(with_features(kv, kind="redis")),
                    feature_source(with_features(kind="feast", url="http://127.0.0.1:6566", features=("v:f",))))
    assert isinstance(redis, RedisFeatures) and isinstance(feast, FeastFeatures)
    assert feast.url == "http://127.0.0.1:6566/get-online-features"
    asyncio.run(redis.close())


def test_a_feature_source_without_the_kv_extra_is_refused_naming_the_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(extras.importlib.util, "find_spec", lambda name: None if name == "aiohttp" else real(name))
    cfg = replace(load_config(EXAMPLE), online=OnlineConfig(features=FeaturesConfig(
        kind="feast", url="http://127.0.0.1:6566", features=("v:f",))))
    with pytest.raises(MissingExtra, match=r"^online.features.kind feast needs the kv extra \(aiohttp not installed\)"):
        feature_source(cfg)


def test_the_summary_names_ten_skipped_rows_and_counts_the_rest(redis_server: LocalRedis, tmp_path: Path) -> None:
    kv = kv_config(redis_server)
    pq.write_table(pa.table({"entity_id": pa.array([None] * 12 + ["u1"], pa.string()), "a": list(range(13))}),
                   tmp_path / "rows.parquet")
    summary = load_features(kv, LakeConfig(), str(tmp_path / "rows.parquet"), f"{kv.prefix}:f", "entity_id")
    assert summary.counts.rows == 1 and summary.counts.skipped == 12
    assert summary.lines()[1].endswith("row 9 and 2 more")
    assert client(redis_server).exists(feature_key(f"{kv.prefix}:f", "u1")) == 1


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_command_between_pipelines_with_exit_6(redis_server: LocalRedis, tmp_path: Path,
                                                                 sig: signal.Signals) -> None:
    """Sent as soon as the first pipeline landed (the kinds hash is there): a summary that says
    stopped, exit 6, no traceback, and fewer rows than the file's."""
    kv = kv_config(redis_server)
    rows, prefix = 200_000, f"{kv.prefix}:f"
    pq.write_table(pa.table({"entity_id": [f"u{i}" for i in range(rows)], "a": list(range(rows))}),
                   tmp_path / "rows.parquet")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "streamer", "features", "load", "--config",
                             config_file(tmp_path, kv), "--from", str(tmp_path / "rows.parquet"), "--prefix", prefix],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    r = client(redis_server)
    try:
        deadline = time.monotonic() + 60
        while not r.exists(prefix) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == EXIT_STOPPED, (out, err)
    assert "Traceback" not in err and "features load stopped" in out, (out, err)
    loaded = int(out.split(": ", 1)[1].split(" rows loaded")[0])
    assert 0 < loaded < rows
    assert r.dbsize() and r.exists(f"{prefix}:u0") and not r.exists(f"{prefix}:u{rows - 1}")
