"""The engine tests' Ray cluster: two nodes of one cluster, reached at its address."""

from __future__ import annotations

import subprocess
import sys

from tests.support.ray_cluster import RayCluster

DRIVER = """
import ray
ray.init(logging_level="ERROR", log_to_driver=False)
alive = [n for n in ray.nodes() if n["Alive"]]
print(len(alive), int(ray.cluster_resources()["CPU"]))
"""


def test_the_cluster_is_a_head_and_one_more_node_at_its_address(ray_cluster: RayCluster) -> None:
    done = subprocess.run([sys.executable, "-c", DRIVER], env=ray_cluster.env(), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["2", "4"]
