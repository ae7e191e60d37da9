"""The Helm chart (deploy/helm/streamer), checked by real tools: Helm built from its Go module at
a pinned version (`make helm-tools`), and deploy/helm/strict, which decodes every rendered object
strictly against the Kubernetes API types, KEDA's CRD types and the Prometheus Operator's
(unknown field, wrong type or unknown kind: failure). Then what the chart promises, read off the rendered objects.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from streamer.config_file import load_config
from streamer.observe.drift import write_profile

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "streamer"
BIN = ROOT / ".cache" / "bin"
HELM = Path(os.environ.get("HELM", BIN / "helm-v3.22.0-k8s1.37" / "helm"))
STRICT = Path(os.environ.get("K8S_STRICT", BIN / "k8s-strict"))
FULL = ["--set", "keda.enabled=true", "--set", "gpu.enabled=true", "--set", "serviceMonitor.enabled=true",
        "--set", "processing.guarantee=exactly_once", "--set", "input.format=avro-confluent",
        "--set", "input.registry.url=http://registry:8081",
        "--set", "input.registry.basicAuthUserInfo=${SCHEMA_REGISTRY_AUTH}",
        "--set", "secretEnv[0].name=SCHEMA_REGISTRY_AUTH", "--set", "secretEnv[0].secret=registry",
        "--set", "secretEnv[0].key=user-info",
        "--set", "kafka.properties.security\\.protocol=SASL_SSL",
        "--set", "kafka.properties.sasl\\.mechanism=PLAIN",
        "--set", "kafka.properties.sasl\\.username=scorer",
        "--set", "kafka.properties.sasl\\.password=${KAFKA_SASL_PASSWORD}",
        "--set", "secretEnv[1].name=KAFKA_SASL_PASSWORD", "--set", "secretEnv[1].secret=kafka",
        "--set", "secretEnv[1].key=password",
        "--set", "keda.auth[0].parameter=sasl", "--set", "keda.auth[0].secret=kafka",
        "--set", "keda.auth[0].key=mechanism", "--set", "keda.auth[1].parameter=password",
        "--set", "keda.auth[1].secret=kafka", "--set", "keda.auth[1].key=password",
        "--set", "imagePullSecrets[0]=registry-pull",
        "--set", "files.models.configMap=fraud-model",
        "--set", "files.schemas.download.image=curlimages/curl:8.11.0",
        "--set", "files.schemas.download.command={sh,-c,curl -fsSo $TARGET_DIR/feature_event.avsc $SCHEMA_URL}"]
# A backfill into an Iceberg table on S3 through a REST catalog, the S3 keys from a Secret.
BACKFILL = ["--set", "backfill.enabled=true", "--set", "backfill.runId=churn-2026-12",
            "--set", "backfill.from=2026-11-01T00:00:00Z", "--set", "backfill.table=churn_scores",
            "--set", "backfill.lake.warehouse=s3://lake/warehouse", "--set", "backfill.lake.catalog=rest",
            "--set", "backfill.lake.catalogUri=http://iceberg-rest:8181",
            "--set", "backfill.lake.s3.endpoint=http://seaweedfs-s3:8333",
            "--set", "secretEnv[0].name=KAFKA_SASL_PASSWORD", "--set", "secretEnv[0].secret=kafka",
            "--set", "secretEnv[0].key=password",
            "--set", "backfill.secretEnv[0].name=LAKE_S3_ACCESS_KEY_ID",
            "--set", "backfill.secretEnv[0].secret=lake-s3", "--set", "backfill.secretEnv[0].key=access-key-id",
            "--set", "backfill.secretEnv[1].name=LAKE_S3_SECRET_ACCESS_KEY",
            "--set", "backfill.secretEnv[1].secret=lake-s3", "--set", "backfill.secretEnv[1].key=secret-access-key"]
# A backfill into a Parquet dataset on a shared claim, three shards one at a time, GPU.
PARQUET = ["--set", "backfill.enabled=true", "--set", "backfill.runId=r7", "--set", "backfill.shards=3",
           "--set", "backfill.parallelism=1", "--set", "backfill.parquet=/lake/scores",
           "--set", "backfill.volume.claimName=lake", "--set", "gpu.enabled=true",
           "--set", "files.models.configMap=fraud-model"]
# The online server (an image with the online extra) scaled by KEDA's prometheus scaler, beside FULL.
ONLINE = ["--set", "online.enabled=true", "--set", "online.imageTag=0.1.0-gpu-online",
          "--set", "online.autoscaling.enabled=true",
          "--set", "online.autoscaling.prometheusAddress=http://prometheus-operated.monitoring.svc:9090", *FULL]
# Batch jobs: workers, a scheduled and a triggered job into Iceberg on S3, and the jobs API on the
# online server with its token from a Secret (tests/deploy/test_helm_jobs.py).
JOBS = ["--set", "jobs.enabled=true", "--set", "jobs.imageTag=0.1.0-lake",
        "--set", "jobs.lake.warehouse=s3://lake/warehouse", "--set", "jobs.lake.catalog=rest",
        "--set", "jobs.lake.catalogUri=http://iceberg-rest:8181",
        "--set", "jobs.lake.s3.endpoint=http://seaweedfs-s3:8333",
        "--set", "jobs.secretEnv[0].name=LAKE_S3_ACCESS_KEY_ID", "--set", "jobs.secretEnv[0].secret=lake-s3",
        "--set", "jobs.secretEnv[0].key=access-key-id",
        "--set", "jobs.secretEnv[1].name=LAKE_S3_SECRET_ACCESS_KEY", "--set", "jobs.secretEnv[1].secret=lake-s3",
        "--set", "jobs.secretEnv[1].key=secret-access-key",
        "--set-json", 'jobs.scheduled=[{"name": "nightly-scores", "schedule": "0 2 * * *", "timezone": "Europe/Berlin",'
        ' "spec": {"source": {"table": "transactions"}, "target": {"table": "transaction_scores"},'
        ' "within": "6h", "priority": 5, "labels": {"team": "fraud"}}},'
        ' {"name": "hourly", "schedule": "15 * * * *", "spec": {"source": {"parquet": "s3://lake/in/hourly"},'
        ' "target": {"parquet": "s3://lake/out/hourly"}}}]',
        "--set-json", 'jobs.triggered=[{"name": "new-transactions", "spec": {"trigger": {"table": "transactions"},'
        ' "target": {"table": "transaction_scores"}}}]',
        "--set", "online.enabled=true", "--set", "jobs.apiToken.secret=jobs-api", "--set", "serviceMonitor.enabled=true"]
# The key-value store for every workload that scores: the processors, the online server (answers
# from the store, features from its hashes), the jobs (one writing into the store) and a backfill,
# the password from a Secret (tests/deploy/test_helm_kv.py).
KV = [*JOBS, *BACKFILL, "--set", "kv.address=redis-master.data:6379", "--set", "kv.passwordSecret.name=redis",
      "--set", "kv.passwordSecret.key=redis-password", "--set", "kv.ttlSeconds=172800", "--set", "kv.prefix=fraud",
      "--set", "online.cache.mode=auto", "--set", "online.features.kind=redis", "--set", "online.features.timeoutMs=30",
      "--set-json", 'jobs.scheduled[2]={"name": "precompute", "schedule": "0 3 * * *",'
      ' "spec": {"source": {"table": "customers"}, "target": {"kv": "fraud"}}}']
VARIANTS = {"default": [], "keda with auth, gpu, servicemonitor, exactly-once, registry, secrets, "
            "pull secrets, model and schema volumes": FULL,
            "backfill into an iceberg table on s3": BACKFILL,
            "backfill into parquet on a claim, gpu": PARQUET,
            "online server scaled by keda's prometheus scaler, beside the full variant": ONLINE,
            "jobs: workers, schedules, a trigger and the jobs api": JOBS,
            "the key-value store for every workload, its password from a secret": KV}


def tool(path: Path) -> str:
    assert path.exists(), f"{path} is missing: `make helm-tools` builds it (make test does)"
    return str(path)


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([tool(HELM), *args], capture_output=True, text=True, check=False)
    assert not check or proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def render(*values: str) -> str:
    return helm("template", "scorer", str(CHART), "--namespace", "ml", *values).stdout


def objects(text: str) -> dict[str, dict[str, Any]]:
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in yaml.safe_load_all(text) if d}


def strict(text: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool(STRICT)], input=text, capture_output=True, text=True, check=False)


@pytest.mark.parametrize("values", VARIANTS.values(), ids=VARIANTS.keys())
def test_helm_lint_passes_strictly(values: list[str]) -> None:
    helm("lint", "--strict", str(CHART), *values)


@pytest.mark.parametrize("values", VARIANTS.values(), ids=VARIANTS.keys())
def test_every_rendered_object_decodes_strictly(values: list[str]) -> None:
    text = render(*values)
    result = strict(text)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("\nok ") + result.stdout.startswith("ok ") == len(objects(text))


def test_the_strict_decoder_refuses_unknown_fields_wrong_types_and_unknown_kinds() -> None:
    docs = objects(render(*FULL))
    sts = docs["StatefulSet/scorer"]
    bad_field = {**sts, "spec": {**sts["spec"], "replica": 2}}
    bad_type = {**sts, "spec": {**sts["spec"], "replicas": "two"}}
    so = docs["ScaledObject/scorer"]
    bad_keda = {**so, "spec": {**so["spec"], "maxReplicas": 3}}
    unknown = {"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "x"}}
    for doc in (bad_field, bad_type, bad_keda, unknown):
        assert strict(yaml.safe_dump(doc)).returncode == 1, doc.get("kind")
    assert strict(yaml.safe_dump(so)).returncode == 0


def test_the_statefulset_names_members_probes_health_and_outlasts_the_drain() -> None:
    docs = objects(render())
    pod = docs["StatefulSet/scorer"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    config = yaml.safe_load(docs["ConfigMap/scorer-config"]["data"]["config.yaml"])
    assert config["kafka"]["group.instance.id"] == "${POD_NAME}"  # stable pod name: static member
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    drain_s = (config["output"]["ack_timeout_ms"] + config["processing"]["commit_interval_ms"]) / 1000
    assert pod["terminationGracePeriodSeconds"] > drain_s
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert docs["PodDisruptionBudget/scorer"]["spec"]["maxUnavailable"] == 1
    assert docs["Service/scorer-metrics"]["spec"]["ports"][0]["port"] == config["metrics"]["port"]
    assert "Deployment/scorer-lag-exporter" in docs and "ScaledObject/scorer" not in docs


def test_gpu_keda_and_secrets_render_as_documented() -> None:
    docs = objects(render(*FULL))
    pod = docs["StatefulSet/scorer"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert container["image"].endswith("-gpu") and pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    secret = next(e for e in container["env"] if e["name"] == "SCHEMA_REGISTRY_AUTH")
    assert secret["valueFrom"]["secretKeyRef"] == {"name": "registry", "key": "user-info"}
    config_text = docs["ConfigMap/scorer-config"]["data"]["config.yaml"]
    assert "${SCHEMA_REGISTRY_AUTH}" in config_text  # a reference, read from the env at load
    assert "replicas" not in docs["StatefulSet/scorer"]["spec"]  # KEDA owns the count
    so = docs["ScaledObject/scorer"]["spec"]
    (trigger,) = so["triggers"]
    assert trigger["type"] == "kafka" and trigger["metadata"]["consumerGroup"] == "streamer-fraud"
    assert so["maxReplicaCount"] <= 6 and so["scaleTargetRef"]["kind"] == "StatefulSet"
    assert so["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] >= 60
    # The ServiceMonitor scrapes the metrics Services, not the headless one (the same pods twice).
    selector = docs["ServiceMonitor/scorer"]["spec"]["selector"]
    services = [d for d in docs.values() if d["kind"] == "Service"]
    scraped = [d["metadata"]["name"] for d in services
               if all(d["metadata"]["labels"].get(k) == v for k, v in selector["matchLabels"].items())
               and all(d["metadata"]["labels"].get(e["key"]) in e["values"] for e in selector["matchExpressions"])]
    assert sorted(scraped) == ["scorer-lag-exporter", "scorer-metrics"]


def test_helm_is_built_as_its_release_is_and_needs_no_kube_version(tmp_path: Path) -> None:
    """`go install` alone leaves Helm at version "main" assuming Kubernetes 1.20 (lint and
    template then wanted --kube-version); make helm-tools passes the release's -X flags."""
    assert helm("version", "--template", "{{.Version}}").stdout == "v3.22.0"
    chart = tmp_path / "probe"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: probe\nversion: 0.1.0\n")
    (chart / "templates" / "kube.yaml").write_text("kube: {{ .Capabilities.KubeVersion.Version }}\n")
    assert helm("template", str(chart)).stdout.strip().endswith("kube: v1.37.0")


def test_pull_secrets_volumes_and_keda_auth_render_as_documented() -> None:
    docs = objects(render(*FULL))
    pod = docs["StatefulSet/scorer"]["spec"]["template"]["spec"]
    assert pod["imagePullSecrets"] == [{"name": "registry-pull"}]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["models"]["configMap"] == {"name": "fraud-model"} and volumes["schemas"] == \
        {"name": "schemas", "emptyDir": {}}
    mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["models"] == {"name": "models", "mountPath": "/models", "readOnly": True}
    assert mounts["schemas"]["mountPath"] == "/schemas" and mounts["schemas"]["readOnly"]
    (download,) = pod["initContainers"]
    assert download["image"] == "curlimages/curl:8.11.0" and download["command"][0] == "sh"
    assert {"name": "TARGET_DIR", "value": "/schemas"} in download["env"]
    assert {m["name"]: m["mountPath"] for m in download["volumeMounts"]}["schemas"] == "/schemas"
    # The lag exporter reads only the cluster and the group of the config: no model, no schemas.
    lag = docs["Deployment/scorer-lag-exporter"]["spec"]["template"]["spec"]
    assert lag["imagePullSecrets"] == [{"name": "registry-pull"}] and "initContainers" not in lag
    assert [v["name"] for v in lag["volumes"]] == ["config"]
    assert [m["mountPath"] for m in lag["containers"][0]["volumeMounts"]] == ["/etc/streamer"]
    (trigger,) = docs["ScaledObject/scorer"]["spec"]["triggers"]
    assert trigger["authenticationRef"] == {"name": "scorer-kafka"}
    refs = docs["TriggerAuthentication/scorer-kafka"]["spec"]["secretTargetRef"]
    assert refs == [{"parameter": "sasl", "name": "kafka", "key": "mechanism"},
                    {"parameter": "password", "name": "kafka", "key": "password"}]
    claim = objects(render("--set", "files.models.claimName=models"))["StatefulSet/scorer"]
    (volume,) = [v for v in claim["spec"]["template"]["spec"]["volumes"] if v["name"] == "models"]
    assert volume["persistentVolumeClaim"] == {"claimName": "models", "readOnly": True}


def test_the_chart_refuses_keda_without_auth_on_sasl_and_two_sources_for_one_volume() -> None:
    no_auth = helm("template", "s", str(CHART), "--set", "keda.enabled=true",
                   "--set", "kafka.properties.security\\.protocol=SASL_SSL", check=False)
    assert no_auth.returncode != 0 and "security.protocol SASL_SSL and no keda.auth" in no_auth.stderr
    two = helm("template", "s", str(CHART), "--set", "files.models.configMap=m",
               "--set", "files.models.claimName=c", check=False)
    assert two.returncode != 0 and "files.models: set one of configMap, claimName and download, not 2" in two.stderr
    no_image = helm("template", "s", str(CHART), "--set", "files.models.download.command={true}", check=False)
    assert no_image.returncode != 0 and "files.models.download needs an image" in no_image.stderr


def test_the_chart_refuses_idle_replicas_and_a_grace_period_shorter_than_the_drain() -> None:
    too_many = helm("template", "s", str(CHART), "--set", "keda.enabled=true", "--set",
                    "keda.maxReplicaCount=12", check=False)
    assert too_many.returncode != 0 and "exceeds input.partitions" in too_many.stderr
    short = helm("template", "s", str(CHART), "--set", "terminationGracePeriodSeconds=20", check=False)
    assert short.returncode != 0 and "must exceed the drain time" in short.stderr


@pytest.mark.parametrize("values", VARIANTS.values(), ids=VARIANTS.keys())
def test_the_rendered_config_loads_with_streamers_own_loader(values: list[str], tmp_path: Path) -> None:
    """The ConfigMap is a streamer config: the real loader accepts it (every kafka: key checked
    by librdkafka), with the image's paths mapped onto the repository's files."""
    profile = tmp_path / "profile.json"
    write_profile(np.random.default_rng(0).normal(size=(1_000, 32)), profile)
    local = ["--set", f"model.driftProfile={profile}", "--set", "model.driftWindowRows=5000",
             "--set", "model.fallbackScores={0.25}", "--set", "model.timeoutMs=250",
             "--set", f"shadow.challengers[0].path={ROOT / 'models' / 'fraud_mlp.onnx'}",
             "--set", "shadow.challengers[0].name=next", "--set", "shadow.challengers[0].version=2",
             "--set", f"input.schema={ROOT / 'streamer' / 'schemas' / 'feature_event.avsc'}",
             "--set", f"output.schema={ROOT / 'streamer' / 'schemas' / 'prediction.avsc'}",
             "--set", f"model.path={ROOT / 'models' / 'fraud_mlp.onnx'}"]
    docs = objects(render(*values, *local))
    path = tmp_path / "config.yaml"
    path.write_text(docs["ConfigMap/scorer-config"]["data"]["config.yaml"])
    cfg = load_config(path, env={"POD_NAME": "scorer-0", "SCHEMA_REGISTRY_AUTH": "u:p", "KAFKA_SASL_PASSWORD": "pw",
                                         "KV_PASSWORD": "kv-pw"})
    assert cfg.input.group_id == "streamer-fraud"
    assert cfg.model.drift_profile == profile and cfg.model.drift_window_rows == 5000
    assert [(c.name, c.version) for c in cfg.shadow.challengers] == [("next", "2")]
    assert cfg.model.fallback_scores == (0.25,) and cfg.model.timeout_ms == 250 and cfg.model.reload_check_ms == 2000


@pytest.mark.parametrize("values", VARIANTS.values(), ids=VARIANTS.keys())
def test_the_lag_exporter_reads_the_rendered_config_with_its_pods_env_and_no_model(values: list[str],
                                                                                   tmp_path: Path) -> None:
    """The lag exporter's pod mounts no model: the part of the ConfigMap it reads loads with only
    the variables its pod sets, where the image's model and schema paths do not exist."""
    from streamer.config_file import load_part
    from streamer.errors import ConfigError
    from streamer.observe.lag import LagConfig

    docs = objects(render(*values))
    path = tmp_path / "config.yaml"
    path.write_text(docs["ConfigMap/scorer-config"]["data"]["config.yaml"])
    (container,) = docs["Deployment/scorer-lag-exporter"]["spec"]["template"]["spec"]["containers"]
    assert container["args"][:3] == ["lag-exporter", "--config", "/etc/streamer/config.yaml"]
    env = {e["name"]: "user:secret" for e in container["env"]}
    cfg = load_part(path, LagConfig, env=env)
    assert cfg.input.group_id == "streamer-fraud" and cfg.input.topics == ("features",)
    # The processors' loader needs the model, the schemas (and the store's password, not the exporter's).
    with pytest.raises(ConfigError, match=r"no (schema|model) file at /app/|KV_PASSWORD is not set"):
        load_config(path, env=env)


def test_the_backfill_job_gives_each_indexed_pod_its_shard_of_one_run() -> None:
    docs = objects(render(*BACKFILL))
    job = docs["Job/scorer-backfill-churn-2026-12"]["spec"]
    assert (job["completionMode"], job["completions"], job["parallelism"], job["backoffLimitPerIndex"]) == \
        ("Indexed", 2, 2, 2)
    pod = job["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    (container,) = pod["containers"]
    assert container["args"] == ["replay", "--config", "/etc/streamer/config.yaml",
                                 "--from", "2026-11-01T00:00:00Z", "--to", "latest", "--run-id", "churn-2026-12",
                                 "--to-table", "churn_scores", "--shard", "$(JOB_COMPLETION_INDEX)/2"]
    env = {e["name"]: e for e in container["env"]}
    assert env["JOB_COMPLETION_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"] == \
        "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    assert env["LAKE_S3_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"] == \
        {"name": "lake-s3", "key": "secret-access-key"}
    assert env["KAFKA_SASL_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "kafka", "key": "password"}
    (processor,) = docs["StatefulSet/scorer"]["spec"]["template"]["spec"]["containers"]
    assert "LAKE_S3_SECRET_ACCESS_KEY" not in {e["name"] for e in processor["env"]}  # the backfill's only
    # A config error (exit 2) fails its index at once; an eviction is not counted as a failure.
    rules = job["podFailurePolicy"]["rules"]
    assert rules[0]["action"] == "FailIndex" and rules[0]["onExitCodes"]["values"] == [2]
    assert rules[1] == {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}
    (config_volume,) = [v for v in pod["volumes"] if v["name"] == "config"]
    assert config_volume["configMap"]["name"] == "scorer-backfill-churn-2026-12-config"
    config = yaml.safe_load(docs["ConfigMap/scorer-backfill-churn-2026-12-config"]["data"]["config.yaml"])
    assert config["lake"] == {"warehouse": "s3://lake/warehouse", "catalog": "rest",
                              "catalog_uri": "http://iceberg-rest:8181", "namespace": "streamer",
                              "target_file_mb": 128,
                              "s3": {"endpoint": "http://seaweedfs-s3:8333", "region": "us-east-1",
                                     "access_key_id": "${LAKE_S3_ACCESS_KEY_ID}",
                                     "secret_access_key": "${LAKE_S3_SECRET_ACCESS_KEY}"}}
    # The processors' config and pods are untouched: a backfill never rolls the StatefulSet.
    assert "lake" not in yaml.safe_load(docs["ConfigMap/scorer-config"]["data"]["config.yaml"])
    live = objects(render(*BACKFILL[2:]))["StatefulSet/scorer"]["spec"]["template"]
    assert docs["StatefulSet/scorer"]["spec"]["template"] == live


def test_a_parquet_backfill_on_a_claim_runs_its_shards_as_configured() -> None:
    docs = objects(render(*PARQUET))
    job = docs["Job/scorer-backfill-r7"]["spec"]
    assert (job["completions"], job["parallelism"]) == (3, 1)
    (container,) = job["template"]["spec"]["containers"]
    args = container["args"]
    assert args[args.index("--to-parquet") + 1] == "/lake/scores" and "--to-table" not in args
    assert args[args.index("--shard") + 1] == "$(JOB_COMPLETION_INDEX)/3"
    assert {"name": "lake", "mountPath": "/lake"} in container["volumeMounts"]
    assert {"name": "lake", "persistentVolumeClaim": {"claimName": "lake"}} in job["template"]["spec"]["volumes"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1 and container["image"].endswith("-gpu")
    config = yaml.safe_load(docs["ConfigMap/scorer-backfill-r7-config"]["data"]["config.yaml"])
    assert "s3" not in config["lake"] and "warehouse" not in config["lake"]


@pytest.mark.parametrize(("values", "message"), [
    (["--set", "backfill.table=t"], "backfill.runId is required with backfill.enabled"),
    (["--set", "backfill.runId=r", "--set", "backfill.table=t", "--set", "backfill.parquet=s3://b/p"],
     "set exactly one of backfill.table (an Iceberg table) and backfill.parquet"),
    (["--set", "backfill.runId=r"], "set exactly one of backfill.table (an Iceberg table) and backfill.parquet"),
    (["--set", "backfill.runId=Run_1", "--set", "backfill.parquet=s3://b/p"], 'backfill.runId "Run_1"'),
    (["--set", "backfill.runId=r", "--set", "backfill.parquet=s3://b/p", "--set", "backfill.from=2h"],
     'backfill.from "2h": a duration is measured from each pod\'s start'),
    (["--set", "backfill.runId=r", "--set", "backfill.parquet=s3://b/p", "--set", "backfill.shards=7"],
     "backfill.shards (7) must be between 1 and input.partitions (6)"),
    (["--set", "backfill.runId=r", "--set", "backfill.parquet=/data/scores"],
     'backfill.parquet "/data/scores": the Job\'s pods share no disk'),
    (["--set", "backfill.runId=r", "--set", "backfill.table=t", "--set", "backfill.lake.warehouse=s3://b/w"],
     "backfill.lake.catalogUri is required with backfill.table and catalog sql"),
    (["--set", "backfill.runId=r", "--set", "backfill.table=t"], "backfill.lake.warehouse is required"),
], ids=["no run id", "table and parquet", "no target", "run id not a name", "a duration",
        "idle shards", "a folder no pod shares", "a catalog per pod", "no warehouse"])
def test_the_chart_refuses_a_backfill_it_cannot_run_once(values: list[str], message: str) -> None:
    result = helm("template", "s", str(CHART), "--set", "backfill.enabled=true", *values, check=False)
    assert result.returncode != 0 and message in result.stderr, result.stderr


def test_the_backfill_config_loads_with_streamers_own_loader(tmp_path: Path) -> None:
    local = ["--set", f"input.schema={ROOT / 'streamer' / 'schemas' / 'feature_event.avsc'}",
             "--set", f"output.schema={ROOT / 'streamer' / 'schemas' / 'prediction.avsc'}",
             "--set", f"model.path={ROOT / 'models' / 'fraud_mlp.onnx'}"]
    docs = objects(render(*BACKFILL, *local))
    path = tmp_path / "config.yaml"
    path.write_text(docs["ConfigMap/scorer-backfill-churn-2026-12-config"]["data"]["config.yaml"])
    cfg = load_config(path, env={"POD_NAME": "scorer-backfill-churn-2026-12-0-x7k2p",
                                 "LAKE_S3_ACCESS_KEY_ID": "key", "LAKE_S3_SECRET_ACCESS_KEY": "v3ry-s3cret-value"})
    lake = cfg.lake
    assert (str(lake.warehouse), lake.catalog, lake.namespace, lake.target_file_mb) == \
        ("s3://lake/warehouse", "rest", "streamer", 128)
    assert "v3ry-s3cret-value" not in repr(lake) and "***" in repr(lake)  # the S3 keys print as ***
