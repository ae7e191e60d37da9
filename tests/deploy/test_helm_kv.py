"""The chart's key-value store (kv.address): the kv: section in the config of every pod that
scores (processors, online server, jobs workers, CronJobs, watchers, a backfill), its password
from an existing Secret into KV_PASSWORD and never in a ConfigMap, the online server's cache: and
features: sections, and the refusals. Lint and the strict decoder run on it in test_helm.py (its
KV variant); here, what the chart promises.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from streamer.config_file import load_config
from tests.deploy.test_helm import CHART, KV, ROOT, helm, objects, render

LOCAL = ["--set", f"input.schema={ROOT / 'streamer' / 'schemas' / 'feature_event.avsc'}",
         "--set", f"output.schema={ROOT / 'streamer' / 'schemas' / 'prediction.avsc'}",
         "--set", f"model.path={ROOT / 'models' / 'fraud_mlp.onnx'}"]
SECRET_REF = {"name": "redis", "key": "redis-password"}
# Every workload whose pods load a config with the kv: section, and the ConfigMap it mounts.
WORKLOADS = {"StatefulSet/scorer": "ConfigMap/scorer-config",
             "Deployment/scorer-online": "ConfigMap/scorer-online-config",
             "Deployment/scorer-worker": "ConfigMap/scorer-jobs-config",
             "CronJob/scorer-job-precompute": "ConfigMap/scorer-jobs-config",
             "CronJob/scorer-job-nightly-scores": "ConfigMap/scorer-jobs-config",
             "Deployment/scorer-watch-new-transactions": "ConfigMap/scorer-jobs-config",
             "Job/scorer-backfill-churn-2026-12": "ConfigMap/scorer-backfill-churn-2026-12-config"}


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    spec = doc["spec"]["jobTemplate"]["spec"] if doc["kind"] == "CronJob" else doc["spec"]
    pod: dict[str, Any] = spec["template"]["spec"]
    return pod


def env_of(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    (container,) = pod_spec(doc)["containers"]
    return {e["name"]: e for e in container.get("env", [])}


def config_of(docs: dict[str, dict[str, Any]], name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(docs[name]["data"]["config.yaml"])
    return loaded


def test_every_workload_gets_the_address_and_the_secret_reference() -> None:
    docs = objects(render(*KV))
    for workload, configmap in WORKLOADS.items():
        (volume,) = [v for v in pod_spec(docs[workload])["volumes"] if v["name"] == "config"]
        assert volume["configMap"]["name"] == configmap.split("/")[1], workload
        kv = config_of(docs, configmap)["kv"]
        assert kv["address"] == "redis-master.data:6379" and kv["password"] == "${KV_PASSWORD}", workload
        assert (kv["prefix"], kv["ttl_s"], kv["kind"]) == ("fraud", 172800, "node"), workload
        assert env_of(docs[workload])["KV_PASSWORD"]["valueFrom"]["secretKeyRef"] == SECRET_REF, workload
    # The lag exporter reads only kafka, the group and its topics: the password is not its business.
    assert "KV_PASSWORD" not in env_of(docs["Deployment/scorer-lag-exporter"])
    online = config_of(docs, "ConfigMap/scorer-online-config")["online"]
    assert online["cache"] == {"mode": "auto", "max_age_s": 86400}
    assert online["features"] == {"kind": "redis", "prefix": "streamer:features", "timeout_ms": 30}


def test_no_password_text_lands_in_a_configmap_and_a_literal_one_is_refused() -> None:
    docs = objects(render(*KV))
    for name, doc in docs.items():
        if doc["kind"] == "ConfigMap":
            for key, text in doc["data"].items():
                for line in text.splitlines():
                    if "password" in line and "kafka" not in name:
                        assert line.split(":", 1)[1].strip() in ("${KV_PASSWORD}",), (name, key, line)
    literal = helm("template", "s", str(CHART), "--set", "kv.address=redis:6379", "--set", "kv.password=hunter2",
                   check=False)
    assert literal.returncode != 0 and "kv.password: a password never goes in values" in literal.stderr
    assert "hunter2" not in literal.stdout


def test_without_an_address_no_pod_gets_a_kv_section_or_the_password() -> None:
    docs = objects(render(*KV[:KV.index("kv.address=redis-master.data:6379") - 1], "--set",
                          "kv.passwordSecret.name=redis", "--set-json", 'jobs.scheduled=[]'))
    for workload, configmap in WORKLOADS.items():
        if workload in docs:
            assert "kv" not in config_of(docs, configmap), workload
            assert "KV_PASSWORD" not in env_of(docs[workload]), workload


@pytest.mark.parametrize("workload", WORKLOADS)
def test_each_pods_config_loads_with_the_password_from_its_own_env(workload: str, tmp_path: Path) -> None:
    """The real loader reads each ConfigMap with only the variables its pod sets: the password
    arrives from the Secret, and prints as ***."""
    docs = objects(render(*KV, *LOCAL))
    path = tmp_path / "config.yaml"
    path.write_text(docs[WORKLOADS[workload]]["data"]["config.yaml"])
    env = {name: "v3ry-s3cret" if name == "KV_PASSWORD" else "x" for name in env_of(docs[workload])}
    cfg = load_config(path, env=env)
    assert cfg.kv.address == "redis-master.data:6379" and cfg.kv.password is not None
    assert cfg.kv.password.value == "v3ry-s3cret" and "v3ry-s3cret" not in repr(cfg.kv)
    assert (cfg.kv.prefix, cfg.kv.ttl_s, cfg.kv.timeout_ms) == ("fraud", 172800, 1000)
    if workload == "Deployment/scorer-online":
        assert (cfg.online.cache.mode, cfg.online.features.kind, cfg.online.features.timeout_ms) == ("auto", "redis", 30)


def test_a_feast_feature_server_and_a_sentinel_render_as_the_config_reads_them(tmp_path: Path) -> None:
    docs = objects(render(*LOCAL, "--set", "online.enabled=true", "--set", "kv.address=s1:26379\\,s2:26379",
                          "--set", "kv.kind=sentinel", "--set", "kv.master=scores", "--set", "kv.tls=true",
                          "--set", "online.features.kind=feast",
                          "--set", "online.features.url=http://feast-feature-server:6566",
                          "--set", "online.features.features={customer:spend_7d,customer:country}",
                          "--set", "online.features.entityKey=customer_id",
                          "--set-json", 'online.features.defaults={"country": "unknown"}'))
    path = tmp_path / "config.yaml"
    path.write_text(docs["ConfigMap/scorer-online-config"]["data"]["config.yaml"])
    cfg = load_config(path, env={"POD_NAME": "scorer-online-0"})
    assert (cfg.kv.kind, cfg.kv.master, cfg.kv.tls, cfg.kv.password) == ("sentinel", "scores", True, None)
    assert cfg.kv.address == "s1:26379,s2:26379"
    features = cfg.online.features
    assert (features.kind, features.url, features.entity_key) == ("feast", "http://feast-feature-server:6566",
                                                                  "customer_id")
    assert features.features == ("customer:spend_7d", "customer:country")
    assert features.defaults == {"country": "unknown"}
    assert "KV_PASSWORD" not in env_of(docs["Deployment/scorer-online"])  # no Secret named: no password


@pytest.mark.parametrize(("values", "message"), [
    (["--set", "kv.address=a:1\\,b:2"], 'kv.address "a:1,b:2" names several servers'),
    (["--set", "kv.address=a:1", "--set", "kv.kind=replica"], 'kv.kind "replica": node, cluster or sentinel'),
    (["--set", "kv.address=a:1", "--set", "kv.passwordSecret.name=r", "--set", "kv.passwordSecret.key="],
     "kv.passwordSecret.key is required"),
    (["--set", "online.enabled=true", "--set", "online.cache.mode=cached"],
     "online.cache.mode cached answers from the precomputed predictions: set kv.address"),
    (["--set", "online.enabled=true", "--set", "online.features.kind=redis"],
     "online.features.kind redis reads each entity's hash from the kv: store: set kv.address"),
    (["--set", "online.enabled=true", "--set", "online.features.kind=feast"], "online.features.url is required"),
    (["--set", "online.enabled=true", "--set", "online.features.kind=feast", "--set", "online.features.url=http://f"],
     "kind feast needs features (view:feature references) or featureService"),
    (["--set", "online.cache.mode=sometimes"], 'online.cache.mode "sometimes": fresh, cached or auto'),
    (["--set", "jobs.enabled=true", "--set", "jobs.lake.warehouse=s3://l/w", "--set", "jobs.lake.catalogUri=http://c",
      "--set-json", 'jobs.scheduled=[{"name": "p", "schedule": "0 3 * * *", "spec": {"target": {"kv": ""}}}]'],
     "jobs.scheduled[0].spec.target.kv writes into the kv: store: set kv.address"),
], ids=["several servers on node", "unknown kind", "secret without key", "cached without a store",
        "redis features without a store", "feast without url", "feast without features", "unknown cache mode",
        "a kv job without a store"])
def test_the_chart_refuses_a_store_the_pods_could_not_use(values: list[str], message: str) -> None:
    result = helm("template", "s", str(CHART), *values, check=False)
    assert result.returncode != 0 and message in result.stderr, result.stderr
