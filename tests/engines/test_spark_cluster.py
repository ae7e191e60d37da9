"""The tests' Spark standalone cluster: two workers that run a submitted job's tasks."""

from __future__ import annotations

from pathlib import Path

from tests.support.spark_cluster import SparkCluster

JOB = """
import os
from pyspark.sql import SparkSession
spark = SparkSession.builder.appName("cluster-check").getOrCreate()
rdd = spark.sparkContext.parallelize(range(1000), 4)
pids = rdd.map(lambda x: os.getppid()).distinct().count()
print("sum", rdd.map(lambda x: 2 * x).sum(), "executors", pids)
spark.stop()
"""


def test_a_submitted_job_runs_its_tasks_on_both_workers(spark_cluster: SparkCluster, tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(JOB)
    done = spark_cluster.submit([str(script)], timeout_s=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "sum 999000 executors 2" in done.stdout
    workers = spark_cluster.status()["workers"]
    assert [w["cores"] for w in workers] == [1, 1]
    assert [a["name"] for a in spark_cluster.status()["completedapps"]][-1] == "cluster-check"
