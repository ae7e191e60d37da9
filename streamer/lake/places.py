"""Where lake writes go: the Iceberg catalog and the filesystem of a folder or ``s3://`` URL, from ``lake:``.

The one place the object store's secrets are unwrapped, at the client boundary (as
``librdkafka_config`` does for Kafka's). The embedded catalog is pyiceberg's SQL catalog on SQLite:
no server, its file beside the warehouse (or ``lake-catalog.db`` in the working directory for an
``s3://`` warehouse, unless ``lake.catalog_uri`` names another).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.fs as pafs

from streamer.config import LakeConfig
from streamer.errors import ConfigError

OPEN_TRIES = 3  # a new SQL catalog whose tables another process created between its check and ours
# What a SQL database says to the second of two processes creating the same table or row
# (SQLite's table and unique constraint; PostgreSQL's unique key).
RACE_LOST = ("already exists", "UNIQUE constraint failed", "duplicate key value")


def catalog_uri(lake: LakeConfig) -> str:
    if lake.catalog_uri is not None and lake.catalog_uri.value:
        return lake.catalog_uri.value
    if lake.warehouse.remote:
        return f"sqlite:///{Path('lake-catalog.db').resolve()}"
    return f"sqlite:///{Path(lake.warehouse) / 'catalog.db'}"


def warehouse_uri(lake: LakeConfig) -> str:
    """The catalog's ``warehouse`` property: the ``s3://`` URL, or the local folder as a ``file:`` URI."""
    return str(lake.warehouse) if lake.warehouse.remote else Path(lake.warehouse).as_uri()


def io_properties(lake: LakeConfig) -> dict[str, str]:
    """pyiceberg's FileIO properties for the object store (none for a local warehouse)."""
    s3 = lake.s3
    props = {"s3.region": s3.region, "s3.connect-timeout": "10", "s3.request-timeout": "30"}
    if s3.endpoint:  # a store of one's own: buckets by path, not by host name
        props.update({"s3.endpoint": s3.endpoint, "s3.force-virtual-addressing": "false"})
    if s3.access_key_id is not None and s3.secret_access_key is not None:
        props["s3.access-key-id"] = s3.access_key_id.value
        props["s3.secret-access-key"] = s3.secret_access_key.value
    return props


def catalog_properties(lake: LakeConfig) -> dict[str, str]:
    """pyiceberg's properties of the configured catalog: its URI, the warehouse, the object store's
    FileIO, and a REST catalog's token or credential (secrets unwrapped: for the client alone)."""
    props = {"uri": catalog_uri(lake), "warehouse": warehouse_uri(lake), **io_properties(lake)}
    if lake.catalog == "rest":
        props.update({k: v.value for k, v in (("token", lake.catalog_token), ("credential", lake.catalog_credential))
                      if v is not None})
    return props


def open_catalog(lake: LakeConfig) -> Any:
    """The configured catalog (pyiceberg's), its namespace created when missing. Processes that
    open a new SQL catalog at once (``--workers``, a Job's pods) race to create its tables: the
    one that finds them (or the namespace) made meanwhile opens it again."""
    for attempt in range(1, OPEN_TRIES + 1):
        try:
            return _open_catalog(lake)
        except ConfigError as exc:
            if attempt == OPEN_TRIES or not any(lost in exc.reason for lost in RACE_LOST):
                raise
    raise AssertionError("unreachable")


def _open_catalog(lake: LakeConfig) -> Any:
    from pyiceberg.catalog.rest import RestCatalog
    from pyiceberg.catalog.sql import SqlCatalog

    props = catalog_properties(lake)
    secrets = [s for s in (lake.catalog_uri, lake.catalog_token, lake.catalog_credential, lake.s3.secret_access_key)
               if s is not None]
    try:
        if lake.catalog == "rest":
            catalog: Any = RestCatalog("streamer", **props)
        else:
            if not lake.warehouse.remote:
                Path(lake.warehouse).mkdir(parents=True, exist_ok=True)
            catalog = SqlCatalog("streamer", **props)
        catalog.create_namespace_if_not_exists(lake.namespace)
    except Exception as exc:  # noqa: BLE001 - SQLAlchemy's and HTTP's many errors: the key is what matters
        reason = str(exc)
        for secret in secrets:
            reason = secret.hide_in(reason)
        raise ConfigError("lake.catalog_uri", f"cannot open the {lake.catalog} catalog: {reason}") from None
    return catalog


def identifier(lake: LakeConfig, name: str, key: str = "--to-table") -> str:
    """``namespace.table``: a name without a namespace goes to ``lake.namespace``."""
    if not name or name.startswith(".") or name.endswith("."):
        raise ConfigError(key, f"{name!r} is not a table name")
    return name if "." in name else f"{lake.namespace}.{name}"


def filesystem(lake: LakeConfig, location: str) -> tuple[pafs.FileSystem, str]:
    """The Arrow filesystem of a folder or an ``s3://`` URL, and the path within it."""
    if location.startswith("s3://"):
        s3 = lake.s3
        keys: dict[str, Any] = {}
        if s3.access_key_id is not None and s3.secret_access_key is not None:
            keys = {"access_key": s3.access_key_id.value, "secret_key": s3.secret_access_key.value}
        endpoint = s3.endpoint or None
        scheme = "http" if endpoint and endpoint.startswith("http://") else "https"
        fs = pafs.S3FileSystem(region=s3.region, scheme=scheme, connect_timeout=10, request_timeout=30,
                               endpoint_override=endpoint.split("://", 1)[-1] if endpoint else None,
                               **keys)
        return fs, location.removeprefix("s3://").rstrip("/")
    path = Path(location.removeprefix("file://")).resolve()
    return pafs.LocalFileSystem(), str(path)
