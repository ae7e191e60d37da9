"""The chart's batch jobs (jobs.enabled): a Deployment of `streamer worker` pods with its metrics
Service and PodDisruptionBudget, a CronJob per scheduled job submitting each slot once, a
Deployment per triggered job, the jobs' own ConfigMap (the config with lake: and jobs:, and each
job's spec), and the jobs API's token on the online server. Lint and the strict decoder run on it
in test_helm.py (its JOBS variant); here, what the chart promises.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from streamer.config_file import load_config, load_unscored
from streamer.jobs.board import Board, ensure_topics
from streamer.jobs.spec import latest_slot, parse_spec, slot_id
from tests.deploy.test_helm import CHART, JOBS, ROOT, helm, objects, render

LOCAL = ["--set", f"input.schema={ROOT / 'streamer' / 'schemas' / 'feature_event.avsc'}",
         "--set", f"output.schema={ROOT / 'streamer' / 'schemas' / 'prediction.avsc'}",
         "--set", f"model.path={ROOT / 'models' / 'fraud_mlp.onnx'}"]
ENV = {"POD_NAME": "scorer-worker-6c9f-x2k", "LAKE_S3_ACCESS_KEY_ID": "key", "LAKE_S3_SECRET_ACCESS_KEY": "s3cret"}
# The least a jobs install needs: a shared warehouse and a catalog every pod reaches.
MINIMAL = ["--set", "jobs.enabled=true", "--set", "jobs.lake.warehouse=s3://lake/w",
           "--set", "jobs.lake.catalog=rest", "--set", "jobs.lake.catalogUri=http://rest:8181"]


def pod(docs: dict[str, dict[str, Any]], name: str) -> dict[str, Any]:
    spec: dict[str, Any] = docs[name]["spec"]
    if docs[name]["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    return dict(spec["template"]["spec"])


def config_of(docs: dict[str, dict[str, Any]], name: str = "ConfigMap/scorer-jobs-config") -> dict[str, Any]:
    return dict(yaml.safe_load(docs[name]["data"]["config.yaml"]))


def test_jobs_are_off_by_default_and_add_only_their_own_objects() -> None:
    off = objects(render())
    assert not [name for name in off if "job" in name or "worker" in name or "watch" in name]
    on = objects(render(*JOBS))
    online = objects(render("--set", "online.enabled=true", "--set", "serviceMonitor.enabled=true"))
    added = sorted(set(on) - set(online))
    assert added == ["ConfigMap/scorer-jobs-config", "CronJob/scorer-job-hourly", "CronJob/scorer-job-nightly-scores",
                     "Deployment/scorer-watch-new-transactions", "Deployment/scorer-worker",
                     "PodDisruptionBudget/scorer-worker", "Service/scorer-worker"]
    # The processors are untouched: their config and pod template are the same with or without jobs.
    assert on["StatefulSet/scorer"] == off["StatefulSet/scorer"]
    assert on["ConfigMap/scorer-config"] == off["ConfigMap/scorer-config"]


def test_the_workers_run_in_one_group_with_metrics_probes_and_a_grace_period_above_a_stop() -> None:
    docs = objects(render(*JOBS))
    deployment = docs["Deployment/scorer-worker"]["spec"]
    assert deployment["replicas"] == 2
    spec = pod(docs, "Deployment/scorer-worker")
    (container,) = spec["containers"]
    assert container["args"] == ["worker", "--config", "/etc/streamer/config.yaml", "--name", "$(POD_NAME)"]
    assert container["image"] == "streamer:0.1.0-lake"  # jobs.imageTag: an image with the lake extra
    config = config_of(docs)
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"metrics": config["metrics"]["port"]}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    # A stopping worker scores, writes and commits the chunk in hand (a topic target's outputs acknowledged).
    assert spec["terminationGracePeriodSeconds"] > config["output"]["ack_timeout_ms"] / 1000 + 30
    assert container["resources"] == {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "4Gi"}}
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"  # group.instance.id, --name
    assert env["LAKE_S3_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "lake-s3", "key": "secret-access-key"}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["config"]["configMap"]["name"] == "scorer-jobs-config"
    assert spec["securityContext"]["runAsNonRoot"] is True and container["securityContext"]["readOnlyRootFilesystem"]
    labels = docs["Deployment/scorer-worker"]["spec"]["template"]["metadata"]["labels"]
    pdb = docs["PodDisruptionBudget/scorer-worker"]["spec"]
    assert pdb["maxUnavailable"] == 1 and all(labels[k] == v for k, v in pdb["selector"]["matchLabels"].items())
    # The processors' budget counts none of the workers, and theirs none of the processors.
    assert docs["PodDisruptionBudget/scorer"]["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == \
        "processor"
    service = docs["Service/scorer-worker"]["spec"]
    assert service["ports"] == [{"name": "metrics", "port": config["metrics"]["port"], "targetPort": "metrics"}]
    assert all(labels[k] == v for k, v in service["selector"].items())
    (expression,) = docs["ServiceMonitor/scorer"]["spec"]["selector"]["matchExpressions"]
    assert "worker" in expression["values"]


def test_the_jobs_config_holds_the_lake_and_jobs_sections_and_each_jobs_spec() -> None:
    docs = objects(render(*JOBS))
    config = config_of(docs)
    assert config["jobs"] == {"topic": "streamer.jobs", "status_topic": "streamer.jobs.status",
                              "group_id": "streamer-jobs", "partitions": 12, "progress_ms": 2000,
                              "max_upload_bytes": 1073741824}  # no api_token: the workers serve no API
    assert config["lake"]["warehouse"] == "s3://lake/warehouse" and config["lake"]["catalog_uri"] == \
        "http://iceberg-rest:8181"
    assert config["lake"]["s3"]["secret_access_key"] == "${LAKE_S3_SECRET_ACCESS_KEY}"
    data = docs["ConfigMap/scorer-jobs-config"]["data"]
    assert sorted(data) == ["config.yaml", "job-hourly.yaml", "job-new-transactions.yaml", "job-nightly-scores.yaml"]
    assert yaml.safe_load(data["job-nightly-scores.yaml"]) == {
        "name": "nightly-scores", "schedule": "0 2 * * *", "timezone": "Europe/Berlin",
        "source": {"table": "transactions"}, "target": {"table": "transaction_scores"}, "within": "6h",
        "priority": 5, "labels": {"team": "fraud"}}
    assert yaml.safe_load(data["job-hourly.yaml"])["timezone"] == "UTC"  # a schedule's default zone
    assert yaml.safe_load(data["job-new-transactions.yaml"]) == {
        "name": "new-transactions", "trigger": {"table": "transactions"}, "target": {"table": "transaction_scores"}}


def test_each_scheduled_job_is_a_cronjob_that_submits_its_slot_once() -> None:
    docs = objects(render(*JOBS))
    data = docs["ConfigMap/scorer-jobs-config"]["data"]
    cronjobs = {n: d["spec"] for n, d in docs.items() if d["kind"] == "CronJob"}
    assert sorted(cronjobs) == ["CronJob/scorer-job-hourly", "CronJob/scorer-job-nightly-scores"]
    for name, cron in cronjobs.items():
        job = name.removeprefix("CronJob/scorer-job-")
        spec = yaml.safe_load(data[f"job-{job}.yaml"])
        # The zone the spec names is the CronJob's: the slot `--slot latest` finds is the one that fired.
        assert (cron["schedule"], cron["timeZone"]) == (spec["schedule"], spec["timezone"])
        assert cron["concurrencyPolicy"] == "Forbid" and cron["startingDeadlineSeconds"] == 600
        template = cron["jobTemplate"]["spec"]
        assert template["backoffLimit"] == 4
        rules = template["podFailurePolicy"]["rules"]
        assert rules[0] == {"action": "FailJob", "onExitCodes": {"containerName": "streamer", "operator": "In",
                                                                  "values": [2]}}
        (container,) = pod(docs, name)["containers"]
        assert container["args"] == ["jobs", "submit", "--config", "/etc/streamer/config.yaml",
                                     f"/etc/streamer/job-{job}.yaml", "--slot", "latest"]
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        volumes = {v["name"]: v for v in pod(docs, name)["volumes"]}
        assert mounts["config"] == "/etc/streamer" and volumes["config"]["configMap"]["name"] == "scorer-jobs-config"
        assert pod(docs, name)["restartPolicy"] == "Never"
        assert {e["name"] for e in container["env"]} >= {"POD_NAME", "LAKE_S3_ACCESS_KEY_ID"}
    assert cronjobs["CronJob/scorer-job-nightly-scores"]["timeZone"] == "Europe/Berlin"
    assert cronjobs["CronJob/scorer-job-hourly"]["timeZone"] == "UTC"


def test_each_triggered_job_is_one_watcher_that_is_never_two() -> None:
    docs = objects(render(*JOBS))
    deployment = docs["Deployment/scorer-watch-new-transactions"]["spec"]
    assert deployment["replicas"] == 1 and deployment["strategy"] == {"type": "Recreate"}
    labels = deployment["template"]["metadata"]["labels"]
    assert all(labels[k] == v for k, v in deployment["selector"]["matchLabels"].items())
    assert deployment["selector"]["matchLabels"]["streamer.io/job"] == "new-transactions"
    (container,) = pod(docs, "Deployment/scorer-watch-new-transactions")["containers"]
    assert container["args"] == ["jobs", "watch", "--config", "/etc/streamer/config.yaml",
                                 "/etc/streamer/job-new-transactions.yaml"]
    # Two triggered jobs: two watchers whose selectors never take each other's pods.
    two = objects(render(*JOBS, "--set-json", 'jobs.triggered=[{"name": "a", "spec": {"trigger": {"table": "t"}}},'
                                              ' {"name": "b", "spec": {"trigger": {"folder": "s3://lake/in"}}}]'))
    selectors = [two[f"Deployment/scorer-watch-{n}"]["spec"]["selector"]["matchLabels"] for n in "ab"]
    assert selectors[0] != selectors[1]


def test_a_job_change_rolls_its_own_pods_and_never_the_workers() -> None:
    before = objects(render(*JOBS))
    after = objects(render(*JOBS, "--set-json", 'jobs.triggered=[{"name": "new-transactions", "spec": '
                                                '{"trigger": {"table": "transactions"}, "target": {"table": "t2"}}}]'))

    def template(docs: dict[str, dict[str, Any]], name: str) -> Any:
        return docs[name]["spec"]["template"]

    assert template(after, "Deployment/scorer-worker") == template(before, "Deployment/scorer-worker")
    watcher = "Deployment/scorer-watch-new-transactions"
    assert template(after, watcher)["metadata"]["annotations"] != template(before, watcher)["metadata"]["annotations"]
    # A jobs setting is the workers' config: it rolls them.
    progress = objects(render(*JOBS, "--set", "jobs.progressMs=500"))
    assert template(progress, "Deployment/scorer-worker") != template(before, "Deployment/scorer-worker")


def test_the_online_pods_get_the_jobs_api_token_only_when_configured() -> None:
    docs = objects(render(*JOBS))
    (container,) = pod(docs, "Deployment/scorer-online")["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["JOBS_API_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "jobs-api", "key": "token"}
    assert "LAKE_S3_ACCESS_KEY_ID" in env  # files submitted over HTTP go where the workers read them
    online = config_of(docs, "ConfigMap/scorer-online-config")
    assert online["jobs"]["api_token"] == "${JOBS_API_TOKEN}"
    assert online["jobs"]["topic"] == config_of(docs)["jobs"]["topic"] and online["lake"] == config_of(docs)["lake"]
    # Jobs without the token: the online server's config and pods are as without jobs.
    no_api = objects(render(*JOBS, "--set", "jobs.apiToken.secret="))
    plain = objects(render("--set", "online.enabled=true", "--set", "serviceMonitor.enabled=true"))
    assert no_api["ConfigMap/scorer-online-config"] == plain["ConfigMap/scorer-online-config"]
    assert no_api["Deployment/scorer-online"] == plain["Deployment/scorer-online"]


def test_the_rendered_jobs_configs_load_with_streamers_own_loader(tmp_path: Path) -> None:
    docs = objects(render(*JOBS, *LOCAL))
    path = tmp_path / "config.yaml"
    path.write_text(docs["ConfigMap/scorer-jobs-config"]["data"]["config.yaml"])
    jobs = load_config(path, env=ENV).jobs
    assert (jobs.topic, jobs.status_topic, jobs.group_id, jobs.partitions, jobs.progress_ms) == \
        ("streamer.jobs", "streamer.jobs.status", "streamer-jobs", 12, 2000)
    assert jobs.api_token is None and jobs.files is None
    path.write_text(docs["ConfigMap/scorer-online-config"]["data"]["config.yaml"])
    online = load_config(path, env={**ENV, "JOBS_API_TOKEN": "t0ken-value"})
    assert online.jobs.api_token is not None and online.jobs.api_token.value == "t0ken-value"
    assert "t0ken-value" not in repr(online.jobs)
    files = objects(render(*MINIMAL, *LOCAL, "--set", "jobs.files=s3://lake/uploads"))
    path.write_text(files["ConfigMap/scorer-jobs-config"]["data"]["config.yaml"])
    assert str(load_config(path, env=ENV).jobs.files) == "s3://lake/uploads"


def test_each_rendered_spec_parses_as_a_job_spec() -> None:
    data = objects(render(*JOBS))["ConfigMap/scorer-jobs-config"]["data"]
    specs = {key: parse_spec(yaml.safe_load(text)) for key, text in data.items() if key.startswith("job-")}
    assert {key: spec.name for key, spec in specs.items()} == {
        "job-nightly-scores.yaml": "nightly-scores", "job-hourly.yaml": "hourly",
        "job-new-transactions.yaml": "new-transactions"}
    nightly = specs["job-nightly-scores.yaml"]
    assert (nightly.schedule, nightly.timezone) == ("0 2 * * *", "Europe/Berlin")
    assert specs["job-new-transactions.yaml"].trigger is not None


@pytest.mark.parametrize(("values", "message"), [
    (["--set-json", 'jobs.scheduled=[{"schedule": "0 2 * * *", "spec": {}}]'],
     "jobs.scheduled[0].name is required"),
    (["--set-json", 'jobs.scheduled=[{"name": "nightly", "spec": {"source": {"table": "t"}}}]'],
     "jobs.scheduled[0].schedule is required"),
    (["--set-json", 'jobs.scheduled=[{"name": "nightly", "schedule": "0 2 * *", "spec": {}}]'],
     'jobs.scheduled[0].schedule "0 2 * *": a cron schedule of 5 fields'),
    (["--set-json", 'jobs.scheduled=[{"name": "Nightly_Scores", "schedule": "0 2 * * *", "spec": {}}]'],
     'jobs.scheduled[0].name "Nightly_Scores": lowercase letters, digits and \'-\' only'),
    (["--set-json", 'jobs.scheduled=[{"name": "' + "n" * 50 + '", "schedule": "0 2 * * *", "spec": {}}]'],
     "is longer than 52 characters"),
    (["--set-json", 'jobs.scheduled=[{"name": "a", "schedule": "0 2 * * *", "spec": {}}]',
      "--set-json", 'jobs.triggered=[{"name": "a", "spec": {"trigger": {"table": "t"}}}]'],
     'jobs.triggered[0].name "a": jobs.scheduled[0] has it too'),
    (["--set-json", 'jobs.scheduled=[{"name": "a", "schedule": "0 2 * * *"}]'], "jobs.scheduled[0].spec is required"),
    (["--set-json", 'jobs.scheduled=[{"name": "a", "schedule": "0 2 * * *", "spec": {"schedule": "0 3 * * *"}}]'],
     "jobs.scheduled[0].spec.schedule: give it as jobs.scheduled[0].schedule"),
    (["--set-json", 'jobs.triggered=[{"name": "a", "spec": {"source": {"table": "t"}}}]'],
     "jobs.triggered[0].spec.trigger is required"),
    (["--set", "jobs.workers.terminationGracePeriodSeconds=45"],
     "jobs.workers.terminationGracePeriodSeconds (45) must exceed output.ackTimeoutMs + 30 s (60 s)"),
    (["--set", "jobs.workers.replicas=13"], "jobs.workers.replicas (13) exceeds jobs.partitions (12)"),
    (["--set", "jobs.lake.warehouse="], "jobs.lake.warehouse is required with jobs.enabled"),
    (["--set", "jobs.lake.catalog=sql", "--set", "jobs.lake.catalogUri="], "jobs.lake.catalogUri is required"),
    (["--set", "jobs.lake.warehouse=/data/lake"], 'jobs.lake.warehouse "/data/lake": the jobs\' pods share no disk'),
    (["--set", "jobs.files=/lake/uploads"], 'jobs.files "/lake/uploads": the jobs\' pods share no disk'),
    (["--set", "jobs.apiToken.secret=jobs-api"], "jobs.apiToken.secret: the jobs API is served by the online server"),
], ids=["scheduled without a name", "scheduled without a schedule", "four fields", "a name no object takes",
        "a name too long", "one name twice", "no spec", "a schedule in the spec", "triggered without a trigger",
        "grace below a stop", "idle workers", "no warehouse", "no catalog", "a warehouse no pod shares", "files no pod shares",
        "an api without the online server"])
def test_the_chart_refuses_jobs_it_cannot_run(values: list[str], message: str) -> None:
    result = helm("template", "s", str(CHART), *MINIMAL, *values, check=False)
    assert result.returncode != 0 and message in result.stderr, result.stderr


def test_a_warehouse_and_files_on_the_shared_claim_are_mounted_in_every_jobs_pod() -> None:
    docs = objects(render(*MINIMAL, "--set", "jobs.volume.claimName=lake", "--set", "jobs.lake.warehouse=/lake/w",
                          "--set", "jobs.lake.catalog=sql", "--set", "jobs.lake.catalogUri=sqlite:////lake/catalog.db",
                          "--set", "jobs.files=/lake/uploads", "--set", "online.enabled=true",
                          "--set", "jobs.apiToken.secret=jobs-api",
                          "--set-json", 'jobs.scheduled=[{"name": "n", "schedule": "0 2 * * *", "spec": {}}]',
                          "--set-json", 'jobs.triggered=[{"name": "t", "spec": {"trigger": {"folder": "/lake/in"}}}]'))
    for name in ("Deployment/scorer-worker", "CronJob/scorer-job-n", "Deployment/scorer-watch-t", "Deployment/scorer-online"):
        spec = pod(docs, name)
        assert {"name": "lake", "persistentVolumeClaim": {"claimName": "lake"}} in spec["volumes"], name
        assert {"name": "lake", "mountPath": "/lake"} in spec["containers"][0]["volumeMounts"], name
    config = config_of(docs)
    assert "s3" not in config["lake"] and config["jobs"]["files"] == "/lake/uploads"


@pytest.mark.kafka
def test_the_cronjobs_command_run_twice_in_a_slot_queues_its_slot_once(bootstrap: str, tmp_path: Path) -> None:
    """The CronJob's pod, as Kubernetes runs it (its args, its ConfigMap's files, its env) on the
    real broker: a pod retried within the slot submits the slot's id again, and nothing more."""
    run = uuid.uuid4().hex[:8]
    docs = objects(render(*JOBS, *LOCAL, "--set", f"kafka.bootstrapServers={bootstrap}",
                          "--set", f"jobs.topic=jobs-{run}", "--set", f"jobs.statusTopic=jobs-{run}.status"))
    for key, text in docs["ConfigMap/scorer-jobs-config"]["data"].items():
        (tmp_path / key).write_text(text)  # the ConfigMap as its volume at /etc/streamer holds it
    (container,) = pod(docs, "CronJob/scorer-job-nightly-scores")["containers"]
    args = [str(tmp_path / Path(a).name) if a.startswith("/etc/streamer/") else a for a in container["args"]]
    cfg = load_unscored(tmp_path / "config.yaml", env=ENV)
    ensure_topics(cfg)  # as the workers do when they start
    env = {**os.environ, **ENV, "PYTHONPATH": str(ROOT)}
    lines = []
    for _ in range(2):
        before = dt.datetime.now(dt.UTC)
        proc = subprocess.run([sys.executable, "-m", "streamer", *args], capture_output=True, text=True, env=env,
                              cwd=ROOT, timeout=120, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        lines.append(proc.stdout.strip())
    spec = parse_spec(yaml.safe_load((tmp_path / "job-nightly-scores.yaml").read_text()))
    job_id = slot_id("nightly-scores", latest_slot(spec, before))  # 02:00 in Berlin: the id's time is 01:00 UTC
    assert job_id.endswith("T0100") and lines[0] == f"job {job_id} queued"
    assert lines[1].startswith(f"job {job_id} ") and "not queued again" in lines[1]
    board = Board(cfg)
    try:
        assert [s.id for s in board.load().all()] == [job_id]
    finally:
        board.close()
