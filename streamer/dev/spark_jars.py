"""The jars a Spark job of streamer adds to pyspark's own, resolved once by Maven into ``.cache/spark-jars``.

``deploy/spark/pom.xml`` pins Apache Iceberg's Spark runtime (the ``streamer`` catalog, Iceberg's
readers and writers) and the SQLite JDBC driver (the lake's SQL catalog, ``<warehouse>/catalog.db``).
:func:`ensure_jars` copies them into ``.cache/spark-jars/<iceberg version>/`` with Maven's
dependency plugin, the first time alone; spark-submit takes them as ``--jars`` (:func:`jars_arg`).
``make spark-jars`` runs it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

from streamer.errors import LocalBrokerError

REPO_ROOT = Path(__file__).resolve().parents[2]
POM = REPO_ROOT / "deploy" / "spark" / "pom.xml"
CACHE_DIR = Path(os.environ.get("STREAMER_SPARK_JARS", REPO_ROOT / ".cache" / "spark-jars"))


def iceberg_version(pom: Path = POM) -> str:
    """The Iceberg version pinned in the pom (the single place it is written)."""
    node = ET.parse(pom).getroot().find("m:properties/m:iceberg.version", {"m": "http://maven.apache.org/POM/4.0.0"})
    if node is None or not node.text:
        raise LocalBrokerError(f"{pom} has no <iceberg.version> property")
    return node.text.strip()


def ensure_jars(pom: Path = POM, cache_dir: Path = CACHE_DIR) -> Path:
    """Resolve the pom's jars with Maven into ``cache_dir/<iceberg version>``; returns that folder."""
    jars = cache_dir / iceberg_version(pom)
    marker = jars / ".complete"
    if marker.exists():
        return jars
    if shutil.which("mvn") is None:
        raise LocalBrokerError("Maven ('mvn') is not on PATH: it is needed to fetch Iceberg's Spark jars")
    tmp = jars.with_name(jars.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    cmd = ["mvn", "-q", "-B", "-f", str(pom), "dependency:copy-dependencies", f"-DoutputDirectory={tmp}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
        raise LocalBrokerError(f"'{' '.join(cmd)}' failed:\n{tail}")
    shutil.rmtree(jars, ignore_errors=True)
    tmp.rename(jars)
    marker.touch()
    return jars


def jars_arg(folder: Path) -> str:
    """spark-submit's ``--jars``: every jar of ``folder``, comma-separated, in a stable order."""
    return ",".join(str(p) for p in sorted(folder.glob("*.jar")))
