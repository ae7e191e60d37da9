"""DuckDB for reading back what the tests wrote: Iceberg tables and Parquet, on disk or in the S3 store.

The avro, iceberg and httpfs extensions come from the duckdb-extension-* wheels (the files
``duckdb_extension_<name>/extensions/v<duckdb version>/<name>.duckdb_extension``), loaded by
path. DuckDB's automatic install and load of known extensions are off: it never downloads
anything, and a missing wheel is an error that names the wheel. The session's time zone is UTC,
so a ``timestamptz`` cast to ``DATE`` is the day Iceberg's ``day()`` partition holds it in.

Example::

    con = connect(store)
    con.sql(f"SELECT count(*) FROM iceberg_scan('{table.metadata_location}')").fetchone()
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import duckdb

from tests.support.objectstore import ObjectStore


def extension_file(name: str) -> Path:
    """The ``<name>.duckdb_extension`` file of the installed ``duckdb-extension-<name>`` wheel."""
    spec = importlib.util.find_spec(f"duckdb_extension_{name}")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the duckdb-extension-{name}=={duckdb.__version__} wheel is not installed")
    package = Path(next(iter(spec.submodule_search_locations)))
    found = package / "extensions" / f"v{duckdb.__version__}" / f"{name}.duckdb_extension"
    if not found.exists():
        raise FileNotFoundError(f"{found} is missing: the duckdb-extension-{name} wheel must match "
                                f"DuckDB {duckdb.__version__}")
    return found


def connect(store: ObjectStore | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB that reads Avro and Iceberg, and with ``store``, ``s3://`` paths in it."""
    con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    con.execute("SET TimeZone = 'UTC'")  # a timestamptz cast to a date gives its UTC day on any machine
    names = ["avro", "iceberg"] + (["httpfs"] if store is not None else [])  # iceberg needs avro first
    for name in names:
        con.execute(f"LOAD '{extension_file(name)}'")
    if store is not None:
        con.execute(
            "CREATE SECRET store (TYPE s3, KEY_ID ?, SECRET ?, REGION ?, ENDPOINT ?, "
            "URL_STYLE 'path', USE_SSL false)",
            [store.access_key_id, store.secret_access_key, store.region, store.host_port])
    return con
