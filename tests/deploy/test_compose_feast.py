"""The Compose stack's feature repository (deploy/compose/feast), run by real Feast (.cache/feast,
`make feast`) against a real Redis: its feature_store.yaml takes the store's address and password
from the environment as the `feast` service gives them, the repository applies, materializes from
its Parquet file into Redis, and answers an entity's features online as the feature server would.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from streamer.dev.redis import local_redis
from tests.deploy.test_deploy import compose_config

ROOT = Path(__file__).resolve().parents[2]
REPO = ROOT / "deploy" / "compose" / "feast"
FEAST_PYTHON = ROOT / ".cache" / "feast" / "bin" / "python"

# Run in Feast's own environment: apply the repository's objects, materialize, read one entity back.
SCRIPT = """
import datetime, importlib.util, json, sys
from feast import FeatureStore
spec = importlib.util.spec_from_file_location("features", sys.argv[1] + "/features.py")
repo = importlib.util.module_from_spec(spec)
spec.loader.exec_module(repo)
store = FeatureStore(repo_path=sys.argv[1])
store.apply([repo.entity, repo.entity_features, repo.scoring])
store.materialize(datetime.datetime(2020, 1, 1), datetime.datetime(2100, 1, 1))
got = store.get_online_features(features=store.get_feature_service("scoring"),
                                entity_rows=[{"entity_id": "e7"}, {"entity_id": "nobody"}]).to_dict()
print(json.dumps(got))
"""


def test_the_feast_profile_serves_its_repository_from_the_stacks_redis(tmp_path: Path) -> None:
    assert FEAST_PYTHON.exists(), f"{FEAST_PYTHON} is missing: `make feast` builds Feast's environment"
    feast = compose_config()["services"]["feast"]
    assert feast["profiles"] == ["feast"] and feast["working_dir"] == "/feature_repo"
    assert any(str(v).startswith(f"{REPO}:/feature_repo") for v in feast["volumes"])
    assert set(feast["environment"]) == {"KV_ADDRESS", "KV_PASSWORD"}
    repo = tmp_path / "feature_repo"
    shutil.copytree(REPO, repo)
    rnd = random.Random(5)
    rows = [[rnd.uniform(-2, 2) for _ in range(32)] for _ in range(20)]
    pq.write_table(pa.table({
        "entity_id": [f"e{i}" for i in range(20)],
        "features": pa.array(rows, pa.list_(pa.float32())),
        "event_timestamp": pa.array([1_764_900_000_000_000 + i for i in range(20)], pa.timestamp("us", tz="UTC")),
    }), repo / "data" / "entity_features.parquet")
    with local_redis(tmp_path / "redis") as server:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env.update(KV_ADDRESS=server.address, KV_PASSWORD=server.password)
        done = subprocess.run([str(FEAST_PYTHON), "-c", SCRIPT, str(repo)], capture_output=True, text=True, env=env,
                              timeout=600, check=False)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
        got = json.loads(done.stdout.strip().splitlines()[-1])
        assert got["entity_id"] == ["e7", "nobody"]
        assert [round(v, 5) for v in got["features"][0]] == [round(float(pa.scalar(v, pa.float32()).as_py()), 5)
                                                            for v in rows[7]]
        assert got["features"][1] is None  # an entity Feast holds nothing for
    assert server.password not in (repo / "feature_store.yaml").read_text()  # expanded, never written
