"""The engines images and their Kubernetes manifests, checked without a Docker engine or a cluster:
deploy/docker/Dockerfile.engines read by dockerfile-parse (its spark and ray targets), its Spark
entrypoint run with stand-ins for java and spark-submit, and deploy/engines/ (spark-submit in
cluster mode, a KubeRay RayJob) decoded strictly against the Kubernetes and KubeRay types by
deploy/helm/strict, then read for what the docs promise: one image, one config, its secrets set.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

from streamer.cli_parser import parser
from streamer.config_file import load_config
from tests.deploy.test_deploy import PYPROJECT, ROOT, ignored, instructions, ort_pin, parse
from tests.deploy.test_helm import STRICT, tool

ENGINES = ROOT / "deploy" / "docker" / "Dockerfile.engines"
ENTRYPOINT = ROOT / "deploy" / "docker" / "spark-entrypoint.sh"
POM = ROOT / "deploy" / "spark" / "pom.xml"
SPARK_JOB = ROOT / "deploy" / "engines" / "spark-job.yaml"
RAY_JOB = ROOT / "deploy" / "engines" / "ray-job.yaml"
SECRET_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def stages() -> dict[str, list[dict[str, Any]]]:
    """Each named stage's instructions after its FROM."""
    out: dict[str, list[dict[str, Any]]] = {}
    name = ""
    for step in instructions(ENGINES):
        if step["instruction"] == "FROM":
            name = step["value"].split()[-1]
            out[name] = []
        elif name:
            out[name].append(step)
    return out


def values(stage: list[dict[str, Any]], instruction: str) -> list[str]:
    return [i["value"] for i in stage if i["instruction"] == instruction]


def global_args() -> dict[str, str]:
    return dict(i["value"].split("=", 1) for i in parse(ENGINES).structure
                if i["instruction"] == "ARG" and "=" in i["value"] and i["startline"] < first_from())


def first_from() -> int:
    return min(i["startline"] for i in parse(ENGINES).structure if i["instruction"] == "FROM")


def docs(path: Path) -> dict[str, dict[str, Any]]:
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in yaml.safe_load_all(path.read_text()) if d}


def strict(text: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool(STRICT)], input=text, capture_output=True, text=True, check=False)


def spark_home() -> str:
    (env,) = [v for v in values(stages()["spark"], "ENV") if "SPARK_HOME=" in v]
    return re.search(r"SPARK_HOME=(\S+)", env).group(1)  # type: ignore[union-attr]


def test_every_copy_source_of_the_engines_image_exists_in_the_build_context() -> None:
    copies = [i["value"].split() for i in instructions(ENGINES) if i["instruction"] == "COPY"]
    local = [a for args in copies if not any(a.startswith("--from=") for a in args)
             for a in [a for a in args if not a.startswith("--")][:-1]]
    assert {"deploy/spark/pom.xml", "deploy/docker/spark-entrypoint.sh", "streamer"} <= set(local)
    for source in local:
        assert (ROOT / source).exists(), f"COPY {source}: not in the repository"
        assert not ignored(source), f"COPY {source}: excluded by .dockerignore"


def test_each_target_holds_its_engine_and_runs_as_a_non_root_user() -> None:
    st = stages()
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert {"spark", "ray"} <= set(extras)
    assert any('".[spark]"' in run for run in values(st["venv-spark"], "RUN"))
    assert any('".[ray]" "ray[default]"' in run for run in values(st["venv-ray"], "RUN"))  # the job server
    spark, ray = st["spark"], st["ray"]
    assert any("openjdk-17-jre-headless" in run and "tini" in run for run in values(spark, "RUN"))
    assert not any("openjdk" in run for run in values(ray, "RUN"))
    assert any("wget" in run for run in values(ray, "RUN"))  # KubeRay's exec probes call it
    copies = values(spark, "COPY")
    assert "--from=venv-spark /opt/venv /opt/venv" in copies
    assert "--from=jars /jars/ ${SPARK_HOME}/jars/" in copies
    assert values(ray, "COPY") == ["--from=venv-ray /opt/venv /opt/venv"]
    for stage, entry in ((spark, ["/opt/streamer/spark-entrypoint.sh"]), (ray, ["streamer"])):
        users = [u.split(":")[0] for u in values(stage, "USER")]
        assert users and users[-1] not in ("root", "0")
        assert [yaml.safe_load(e) for e in values(stage, "ENTRYPOINT")] == [entry]
    assert list(st)[-1] == "spark"  # a build without --target


def test_the_pins_of_the_engines_image_are_the_repositorys() -> None:
    args = global_args()
    assert args["ORT_VERSION"] == ort_pin("onnxruntime-gpu")
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    assert args["ICEBERG_VERSION"] == ET.parse(POM).getroot().findtext("m:properties/m:iceberg.version", namespaces=ns)
    jars = " ".join(values(stages()["jars"], "RUN") + values(stages()["jars"], "COPY"))
    assert "pom.xml" in jars and "dependency:copy-dependencies" in jars and "iceberg-aws-bundle" in jars
    for image in parse(ENGINES).parent_images:
        if image.split(":")[0] in ("python", "maven"):
            assert re.match(r"\d+\.\d+\.\d+", image.split(":")[1]), f"{image} is not pinned"
    # SPARK_HOME and the Job's local:// path name the site-packages of the base image's Python.
    major_minor = ".".join(args["PYTHON_IMAGE"].split(":")[1].split(".")[:2])
    site = f"/opt/venv/lib/python{major_minor}/site-packages"
    assert spark_home() == f"{site}/pyspark"
    assert f"local://{site}/streamer/engines/spark_main.py" in spark_submit()["args"]


def fake(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/bash\n{body}\n")
    path.chmod(0o755)


def entrypoint(tmp_path: Path, *args: str, **env: str) -> list[str]:
    """The entrypoint's command, as the stand-ins for tini, java and spark-submit receive it."""
    fake(tmp_path / "bin" / "tini", '[ "$1 $2" = "-s --" ] || exit 9\nshift 2\nexec "$@"')
    fake(tmp_path / "jdk" / "bin" / "java", 'printf "%s\\n" java "$@"')
    fake(tmp_path / "spark" / "bin" / "spark-submit", 'printf "%s\\n" spark-submit "$@"')
    full = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "SPARK_HOME": str(tmp_path / "spark"),
            "JAVA_HOME": str(tmp_path / "jdk"), **env}
    done = subprocess.run(["bash", str(ENTRYPOINT), *args], capture_output=True, text=True, env=full, cwd=tmp_path,
                          timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_the_spark_entrypoint_starts_a_driver_an_executor_or_the_command_given(tmp_path: Path) -> None:
    driver = entrypoint(tmp_path, "driver", "--properties-file", "/opt/spark/conf/spark.properties",
                        "local:///x.py", SPARK_DRIVER_BIND_ADDRESS="10.0.0.7")
    assert driver == ["spark-submit", "--conf", "spark.driver.bindAddress=10.0.0.7",
                      "--conf", "spark.executorEnv.SPARK_DRIVER_POD_IP=10.0.0.7", "--deploy-mode", "client",
                      "--properties-file", "/opt/spark/conf/spark.properties", "local:///x.py"]
    executor = entrypoint(tmp_path, "executor", SPARK_EXECUTOR_MEMORY="2g", SPARK_DRIVER_URL="spark://d:7078",
                          SPARK_EXECUTOR_ID="3", SPARK_EXECUTOR_CORES="2", SPARK_APPLICATION_ID="app-1",
                          SPARK_EXECUTOR_POD_IP="10.0.0.9", SPARK_RESOURCE_PROFILE_ID="0",
                          SPARK_EXECUTOR_POD_NAME="exec-3", SPARK_CONF_DIR="/opt/spark/conf",
                          SPARK_JAVA_OPT_0="-Da=0", SPARK_JAVA_OPT_2="-Db=2", SPARK_JAVA_OPT_10="-Dc=10")
    assert executor[:4] == ["java", "-Da=0", "-Db=2", "-Dc=10"]  # Spark's order, numerically
    assert executor[4:8] == ["-Xms2g", "-Xmx2g", "-cp", f"/opt/spark/conf::{tmp_path}/spark/jars/*:{tmp_path}"]
    flags = dict(zip(executor[9::2], executor[10::2], strict=True))
    assert executor[8] == "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend"
    assert flags == {"--driver-url": "spark://d:7078", "--executor-id": "3", "--cores": "2", "--app-id": "app-1",
                     "--hostname": "10.0.0.9", "--resourceProfileId": "0", "--podName": "exec-3"}
    assert entrypoint(tmp_path, "echo", "as", "given") == ["as given"]


@pytest.mark.parametrize("path", [SPARK_JOB, RAY_JOB], ids=["spark", "ray"])
def test_every_engine_manifest_decodes_strictly(path: Path) -> None:
    result = strict(path.read_text())
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("ok ") == len(docs(path)) >= 2


def pod_templates() -> dict[str, str]:
    return docs(SPARK_JOB)["ConfigMap/streamer-spark-pod-templates"]["data"]


def test_sparks_pod_templates_decode_strictly_as_pods() -> None:
    templates = pod_templates()
    assert set(templates) == {"driver.yaml", "executor.yaml"}
    for name, text in templates.items():
        result = strict(text)
        assert result.returncode == 0 and "ok   v1/Pod" in result.stdout, (name, result.stdout + result.stderr)


def test_a_misspelt_field_in_an_engine_manifest_is_refused() -> None:
    job = docs(RAY_JOB)["RayJob/streamer-ray-score-transactions-2026-12-01"]
    cluster = job["spec"]["rayClusterSpec"]
    (group,) = cluster["workerGroupSpecs"]
    misspelt = [{**job, "spec": {**job["spec"], "entrypont": "streamer"}},
                {**job, "spec": {**job["spec"], "rayClusterSpec": {**cluster, "workerGroupSpecs": [
                    {**group, "replica": 3}]}}},
                {**job, "spec": {**job["spec"], "shutdownAfterJobFinishes": "yes"}}]
    for doc in misspelt:
        assert strict(yaml.safe_dump(doc)).returncode == 1, doc["spec"]
    assert strict(yaml.safe_dump(job)).returncode == 0
    driver = yaml.safe_load(pod_templates()["driver.yaml"])
    driver["spec"]["containers"][0]["volumeMount"] = driver["spec"]["containers"][0].pop("volumeMounts")
    assert strict(yaml.safe_dump(driver)).returncode == 1


def loads_with_its_secrets(config_map: dict[str, Any], env: list[dict[str, Any]], tmp_path: Path) -> None:
    """The ConfigMap's config loads as streamer loads it (the image's /app read as this checkout),
    every ${VAR} it names set from a Secret in the pod."""
    text = config_map["data"]["config.yaml"]
    from_secrets = {e["name"] for e in env if "secretKeyRef" in e.get("valueFrom", {})}
    assert set(SECRET_REF.findall(text)) == from_secrets and from_secrets
    (tmp_path / "config.yaml").write_text(text.replace(" /app/", f" {ROOT}/"))
    cfg = load_config(tmp_path / "config.yaml", env={name: "x" for name in from_secrets})
    assert cfg.lake is not None and cfg.lake.warehouse.remote


def spark_submit() -> dict[str, Any]:
    job = docs(SPARK_JOB)["Job/streamer-spark-score-transactions-2026-12-01"]
    (container,) = job["spec"]["template"]["spec"]["containers"]
    return {**container, "pod": job["spec"]["template"]["spec"]}


def test_the_spark_job_submits_in_cluster_mode_with_the_image_config_and_secrets(tmp_path: Path) -> None:
    objects, submit = docs(SPARK_JOB), spark_submit()
    args: list[str] = submit["args"]
    confs = dict(args[i + 1].split("=", 1) for i, a in enumerate(args) if a == "--conf")
    assert submit["command"] == ["spark-submit"]
    assert args[args.index("--master") + 1] == "k8s://https://kubernetes.default.svc"
    assert args[args.index("--deploy-mode") + 1] == "cluster"
    assert confs["spark.kubernetes.container.image"] == submit["image"]
    assert confs["spark.kubernetes.namespace"] == "$(POD_NAMESPACE)"
    # One service account: the submitter's, the driver's, the RoleBinding's; it may make pods.
    account = objects["ServiceAccount/streamer-spark"]["metadata"]["name"]
    assert submit["pod"]["serviceAccountName"] == confs["spark.kubernetes.authenticate.driver.serviceAccountName"]
    assert submit["pod"]["serviceAccountName"] == account
    binding = objects["RoleBinding/streamer-spark"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account}]
    (rule,) = objects[f"Role/{binding['roleRef']['name']}"]["rules"]
    assert {"pods", "services", "configmaps"} <= set(rule["resources"])
    assert {"create", "delete", "watch"} <= set(rule["verbs"])
    # The pod templates are the files spark-submit reads, from the ConfigMap the Job mounts.
    (mount,) = submit["volumeMounts"]
    (volume,) = [v for v in submit["pod"]["volumes"] if v["name"] == mount["name"]]
    assert volume["configMap"]["name"] == "streamer-spark-pod-templates"
    for role in ("driver", "executor"):
        assert confs[f"spark.kubernetes.{role}.podTemplateFile"] == f"{mount['mountPath']}/{role}.yaml"
    # The entry point's flags; its --config is where the templates mount the config.
    main = args.index(next(a for a in args if a.startswith("local://")))
    flags = dict(zip(args[main + 1::2], args[main + 2::2], strict=True))
    assert set(flags) == {"--config", "--from", "--to-table", "--run-id"}
    for name, text in pod_templates().items():
        pod = yaml.safe_load(text)["spec"]
        (container,) = pod["containers"]
        (config_mount,) = container["volumeMounts"]
        (config_volume,) = [v for v in pod["volumes"] if v["name"] == config_mount["name"]]
        assert flags["--config"] == f"{config_mount['mountPath']}/config.yaml", name
        assert pod["securityContext"]["runAsUser"] == 10001, name
        config_map = objects[f"ConfigMap/{config_volume['configMap']['name']}"]
        loads_with_its_secrets(config_map, container["env"], tmp_path)


def ray_job() -> dict[str, Any]:
    return docs(RAY_JOB)["RayJob/streamer-ray-score-transactions-2026-12-01"]["spec"]


def test_the_ray_job_runs_streamer_score_on_ray_with_the_image_config_and_secrets(tmp_path: Path) -> None:
    spec = ray_job()
    cluster = spec["rayClusterSpec"]
    ray_pin = next(d for d in PYPROJECT["project"]["optional-dependencies"]["ray"] if d.startswith("ray["))
    assert cluster["rayVersion"] == ray_pin.split("==")[1]
    assert spec["shutdownAfterJobFinishes"] is True
    argv = shlex.split(spec["entrypoint"])
    assert argv[:4] == ["streamer", "score", "--engine", "ray"]
    flags = dict(zip(argv[2::2], argv[3::2], strict=True))
    assert flags["--address"] == "auto" and {"--config", "--from", "--to-table", "--run-id"} <= set(flags)
    pods = [cluster["headGroupSpec"]["template"]["spec"]] + [g["template"]["spec"] for g in cluster["workerGroupSpecs"]]
    assert len({c["image"] for pod in pods for c in pod["containers"]}) == 1
    assert cluster["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"  # scorers run on the workers
    for pod in pods:
        (container,) = pod["containers"]
        (mount,) = container["volumeMounts"]
        (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
        assert flags["--config"] == f"{mount['mountPath']}/config.yaml"
        assert pod["securityContext"]["runAsNonRoot"] is True
        loads_with_its_secrets(docs(RAY_JOB)[f"ConfigMap/{volume['configMap']['name']}"], container["env"], tmp_path)


def test_the_engines_take_the_flags_the_manifests_give() -> None:
    """The RayJob's entrypoint parses with streamer's own parser; the Spark Job's entry point is
    the engine's module, at the path the image installs it."""
    if "--engine" not in (ROOT / "streamer" / "cli_parser.py").read_text():
        pytest.skip("streamer score has no --engine in this tree")
    argv = shlex.split(ray_job()["entrypoint"])
    parsed = parser().parse_args(argv[1:])
    flags = dict(zip(argv[2::2], argv[3::2], strict=True))
    assert (parsed.config, parsed.from_, parsed.to_table, parsed.run_id) == tuple(
        flags[f] for f in ("--config", "--from", "--to-table", "--run-id"))
    assert (ROOT / "streamer" / "engines" / "spark_main.py").exists()
