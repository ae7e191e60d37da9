"""docs/engines.md, executed: a table of the lake scored on the engine tests' Spark and Ray clusters and read with DuckDB, as written.

Every fenced block whose info string carries an ``engines-<step>`` marker is taken from the page:
the config block is saved as ``engines.yaml``, the shell and Python blocks run verbatim, in order,
in a folder laid out like the repository root (``models``, ``streamer`` and ``.cache``, where
``make spark-jars`` puts the jars, linked in), with the venv's ``streamer`` and ``spark-submit``
first on the PATH. Three substitutions, each named here: the page's master URL
(``spark://127.0.0.1:7077``) and Ray address (``127.0.0.1:6379``) become the engine tests' clusters';
and DuckDB's ``INSTALL iceberg; LOAD iceberg;`` becomes a LOAD of the installed
``duckdb-extension-*`` wheels' files (tests/lake/test_lake_page_kafka.py, as the lake page's note
tells a host without the extension repository to do). Each ``text`` block is an excerpt: its
lines appear, in order, among what the step before it printed, ``#`` standing for a number
(seconds) and ``…`` for any text. The rows the engines wrote are checked beside the page's
query: the same scores as ONNX Runtime's for the same rows.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from streamer.dev.spark_jars import ensure_jars
from tests.conftest import ROOT
from tests.lake.test_lake_page_kafka import INSTALL, LOCAL_LOAD
from tests.lake.test_replay_lake_kafka import iceberg
from tests.online.test_head_tail_page import assert_printed
from tests.support.pages import marked_blocks, run_block
from tests.support.ray_cluster import RayCluster
from tests.support.spark_cluster import SparkCluster

pytestmark = [pytest.mark.timeout(600)]

DOC = ROOT / "docs" / "engines.md"
BIN = Path(sys.executable).parent  # the venv's bin: python, streamer, spark-submit
STEPS = {"engines-config": "yaml", "engines-data": "python", "engines-spark": "sh", "engines-spark-output": "text",
         "engines-ray": "sh", "engines-ray-output": "text", "engines-refused": "sh", "engines-refused-output": "text",
         "engines-query": "python", "engines-query-output": "text"}
MASTER, ADDRESS = "spark://127.0.0.1:7077", "127.0.0.1:6379"


def test_the_engines_page_runs_as_written(spark_cluster: SparkCluster, ray_cluster: RayCluster,
                                          tmp_path: Path) -> None:
    blocks = marked_blocks(DOC, "engines", STEPS, ordered=True)
    assert MASTER in blocks["engines-spark"] and ADDRESS in blocks["engines-ray"] and INSTALL in blocks["engines-query"]
    ensure_jars()
    root = tmp_path / "repo"
    root.mkdir()
    for name in ("models", "streamer", ".cache"):
        (root / name).symlink_to(ROOT / name)
    env = {**spark_cluster.env(), "RAY_USAGE_STATS_ENABLED": "0",
           "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("RAY_ADDRESS", None)  # the page names its address

    def shell(step: str) -> str:
        code = blocks[step].replace(MASTER, spark_cluster.master_url).replace(ADDRESS, ray_cluster.address)
        return run_block("sh", code, root, env, timeout_s=300)

    (root / "engines.yaml").write_text(blocks["engines-config"])
    assert "streamer.events: 10000 rows" in run_block("python", blocks["engines-data"], root, env)
    for step in ("engines-spark", "engines-ray", "engines-refused"):
        assert_printed(blocks[f"{step}-output"], shell(step))
    printed = run_block("python", blocks["engines-query"].replace(INSTALL, LOCAL_LOAD), root, env, timeout_s=120)
    assert_printed(blocks["engines-query-output"], printed)
    assert "evt-10 ValidationError" in printed and "evt-20 ValidationError" in printed

    # Beside the page: each engine's scores are ONNX Runtime's for the same rows.
    session = ort.InferenceSession(str(ROOT / "models" / "fraud_mlp.onnx"), providers=["CPUExecutionProvider"])
    catalog = SqlCatalog("streamer", uri=f"sqlite:///{root}/lake/catalog.db", warehouse=(root / "lake").as_uri())
    events = catalog.load_table("streamer.events").scan().to_arrow()
    feats = {e: f for e, f in zip(events.column("event_id").to_pylist(), events.column("features").to_pylist(),
                                  strict=True) if e not in ("evt-10", "evt-20")}
    for name in ("scores_spark", "scores_ray"):
        got = iceberg(catalog.load_table(f"streamer.{name}").metadata_location,
                      "SELECT event_id, scores[1] FROM {T} ORDER BY event_id")
        assert [e for e, _ in got] == sorted(feats), name
        want = session.run(None, {"features": np.array([feats[e] for e, _ in got], np.float32)})[0][:, 0]
        np.testing.assert_array_equal(np.array([s for _, s in got], np.float32), want, err_msg=name)
