"""The chart's online server (online.enabled): `streamer serve` as a Deployment with its own
ConfigMap, a Service for HTTP and gRPC, probes on the protocol's health routes, an autoscaler on
the queued rows (KEDA's prometheus scaler or an HPA), and the ServiceMonitor scraping it. Lint and
the strict decoder run on it in test_helm.py (its ONLINE variant); here, what the chart promises.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from streamer.config_file import load_config
from tests.deploy.test_helm import CHART, FULL, ONLINE, ROOT, helm, objects, render, strict

LOCAL = ["--set", f"input.schema={ROOT / 'streamer' / 'schemas' / 'feature_event.avsc'}",
         "--set", f"output.schema={ROOT / 'streamer' / 'schemas' / 'prediction.avsc'}",
         "--set", f"model.path={ROOT / 'models' / 'fraud_mlp.onnx'}"]
HPA = ["--set", "online.enabled=true", "--set", "online.autoscaling.enabled=true",
       "--set", "online.autoscaling.keda=false"]


def online_pod(docs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = docs["Deployment/scorer-online"]["spec"]["template"]["spec"]
    return spec


def test_online_is_off_by_default_and_adds_only_its_own_objects() -> None:
    off = objects(render())
    assert not [name for name in off if "online" in name]
    on = objects(render("--set", "online.enabled=true"))
    added = sorted(set(on) - set(off))
    assert added == ["ConfigMap/scorer-online-config", "Deployment/scorer-online", "Service/scorer-online"]
    assert on["Deployment/scorer-online"]["spec"]["replicas"] == 2
    # The processors are untouched: their config and pod template are the same with or without it.
    assert on["StatefulSet/scorer"] == off["StatefulSet/scorer"]
    assert on["ConfigMap/scorer-config"] == off["ConfigMap/scorer-config"]


def test_the_deployment_serves_with_ports_probes_and_a_grace_period_above_the_drain() -> None:
    docs = objects(render(*ONLINE))
    pod = online_pod(docs)
    (container,) = pod["containers"]
    assert container["args"] == ["serve", "--config", "/etc/streamer/config.yaml"]
    assert container["image"] == "streamer:0.1.0-gpu-online"  # online.imageTag: an image with the extra
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"http": 8000, "grpc": 8001}
    assert container["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": "http"}
    assert container["startupProbe"]["httpGet"] == {"path": "/v2/health/live", "port": "http"}
    sleep_s = int(container["lifecycle"]["preStop"]["exec"]["command"][1])
    config = yaml.safe_load(docs["ConfigMap/scorer-online-config"]["data"]["config.yaml"])
    assert pod["terminationGracePeriodSeconds"] > sleep_s + config["online"]["timeout_ms"] / 1000
    assert "replicas" not in docs["Deployment/scorer-online"]["spec"]  # the autoscaler owns the count
    # Like the processors: the secrets, the GPU, the model volume, non-root, its own ConfigMap.
    env = {e["name"]: e for e in container["env"]}
    assert env["KAFKA_SASL_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "kafka", "key": "password"}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["config"]["configMap"]["name"] == "scorer-online-config"
    assert volumes["models"]["configMap"] == {"name": "fraud-model"}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True


def test_the_service_exposes_http_and_grpc_to_the_online_pods_only() -> None:
    docs = objects(render(*ONLINE))
    service = docs["Service/scorer-online"]["spec"]
    assert service["type"] == "ClusterIP"
    assert service["selector"]["app.kubernetes.io/component"] == "online"
    pod_labels = docs["Deployment/scorer-online"]["spec"]["template"]["metadata"]["labels"]
    assert all(pod_labels[k] == v for k, v in service["selector"].items())
    ports = {p["name"]: p for p in service["ports"]}
    assert ports["http"]["port"] == 8000 and ports["http"]["targetPort"] == "http"
    assert ports["grpc"] == {"name": "grpc", "port": 8001, "targetPort": "grpc", "appProtocol": "grpc"}


def test_the_rendered_online_config_loads_with_streamers_own_loader(tmp_path: Path) -> None:
    docs = objects(render(*ONLINE, "--set", "online.maxSize=32", "--set", "online.maxWaitMs=2",
                          "--set", "online.timeoutMs=250", *LOCAL))
    path = tmp_path / "config.yaml"
    path.write_text(docs["ConfigMap/scorer-online-config"]["data"]["config.yaml"])
    cfg = load_config(path, env={"POD_NAME": "scorer-online-7d9f-x2k", "SCHEMA_REGISTRY_AUTH": "u:p",
                                 "KAFKA_SASL_PASSWORD": "pw"})
    online = cfg.online
    assert (online.host, online.http_port, online.grpc_port) == ("0.0.0.0", 8000, 8001)
    assert (online.max_size, online.max_wait_ms, online.timeout_ms) == (32, 2, 250)
    assert (online.max_queue_rows, online.max_body_bytes) == (4096, 8_388_608)
    assert cfg.model.name == "fraud_mlp" and cfg.batching.max_size == 256
    # null maxSize and maxWaitMs: the batching section's, as the loader's default says.
    plain = objects(render("--set", "online.enabled=true", *LOCAL))["ConfigMap/scorer-online-config"]
    path.write_text(plain["data"]["config.yaml"])
    default = load_config(path, env={"POD_NAME": "p"}).online
    assert (default.max_size, default.max_wait_ms, default.timeout_ms) == (None, None, 1000)


def test_changing_an_online_setting_rolls_only_the_online_pods() -> None:
    before = objects(render(*ONLINE))
    after = objects(render(*ONLINE, "--set", "online.maxQueueRows=512"))
    assert after["StatefulSet/scorer"] == before["StatefulSet/scorer"]
    assert after["Deployment/scorer-lag-exporter"] == before["Deployment/scorer-lag-exporter"]

    def checksum(docs: dict[str, dict[str, Any]]) -> str:
        return str(docs["Deployment/scorer-online"]["spec"]["template"]["metadata"]["annotations"]["checksum/config"])
    assert checksum(after) != checksum(before)
    # ... and a processor setting (in both configs) rolls the online pods too.
    processor = objects(render(*ONLINE, "--set", "batching.maxWaitMs=5"))
    assert checksum(processor) != checksum(before)


def test_keda_scales_the_deployment_on_the_queued_rows_from_prometheus() -> None:
    docs = objects(render(*ONLINE))
    so = docs["ScaledObject/scorer-online"]["spec"]
    assert so["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "scorer-online"}
    assert (so["minReplicaCount"], so["maxReplicaCount"]) == (2, 10)
    (trigger,) = so["triggers"]
    assert trigger["type"] == "prometheus" and trigger["metricType"] == "AverageValue"
    meta = trigger["metadata"]
    assert meta["serverAddress"] == "http://prometheus-operated.monitoring.svc:9090"
    # The series as the ServiceMonitor labels them: the release's namespace and online Service.
    assert meta["query"] == 'sum(streamer_online_queued_rows{namespace="ml", service="scorer-online"})'
    assert meta["threshold"] == "128"
    assert "HorizontalPodAutoscaler/scorer-online" not in docs
    # The processors' own KEDA object still scales the StatefulSet on lag.
    assert docs["ScaledObject/scorer"]["spec"]["triggers"][0]["type"] == "kafka"
    own = objects(render(*ONLINE, "--set", "online.autoscaling.query=max(streamer_online_queued_rows)"))
    assert own["ScaledObject/scorer-online"]["spec"]["triggers"][0]["metadata"]["query"] == \
        "max(streamer_online_queued_rows)"


def test_without_keda_an_hpa_scales_on_the_pods_custom_metric() -> None:
    text = render(*HPA, "--set", "online.autoscaling.targetQueuedRows=64")
    result = strict(text)
    assert result.returncode == 0, result.stdout + result.stderr
    helm("lint", "--strict", str(CHART), *HPA)
    docs = objects(text)
    hpa = docs["HorizontalPodAutoscaler/scorer-online"]
    assert hpa["apiVersion"] == "autoscaling/v2"
    spec = hpa["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "scorer-online"}
    (metric,) = spec["metrics"]
    assert metric["type"] == "Pods" and metric["pods"]["metric"] == {"name": "streamer_online_queued_rows"}
    assert metric["pods"]["target"] == {"type": "AverageValue", "averageValue": "64"}
    assert "ScaledObject/scorer-online" not in docs and "replicas" not in docs["Deployment/scorer-online"]["spec"]


def test_the_servicemonitor_scrapes_the_online_metrics_on_the_http_port() -> None:
    docs = objects(render(*ONLINE))
    monitor = docs["ServiceMonitor/scorer"]["spec"]
    (expression,) = monitor["selector"]["matchExpressions"]
    assert "online" in expression["values"]
    assert {"port": "http", "path": "/metrics", "interval": "15s"} in monitor["endpoints"]
    assert {"port": "metrics", "interval": "15s"} in monitor["endpoints"]
    # The processors' endpoint finds no port named metrics on the online Service, the online one
    # none named http on the others: each Service is scraped once.
    ports = {d["metadata"]["name"]: {p["name"] for p in d["spec"]["ports"]}
             for d in docs.values() if d["kind"] == "Service"}
    assert ports["scorer-online"] == {"http", "grpc"} and not any("http" in ports[n] for n in ports if n != "scorer-online")
    off = objects(render(*FULL))["ServiceMonitor/scorer"]["spec"]
    assert [e["port"] for e in off["endpoints"]] == ["metrics"]


def test_grpc_port_0_serves_http_only() -> None:
    docs = objects(render("--set", "online.enabled=true", "--set", "online.grpcPort=0"))
    (container,) = online_pod(docs)["containers"]
    assert [p["name"] for p in container["ports"]] == ["http"]
    assert [p["name"] for p in docs["Service/scorer-online"]["spec"]["ports"]] == ["http"]
    assert yaml.safe_load(docs["ConfigMap/scorer-online-config"]["data"]["config.yaml"])["online"]["grpc_port"] == 0


@pytest.mark.parametrize(("values", "message"), [
    (["--set", "online.grpcPort=8000"], "online.grpcPort (8000) equals online.httpPort"),
    (["--set", "online.httpPort=0"], "online.httpPort (0) must be a port between 1 and 65535"),
    (["--set", "online.grpcPort=70000"], "online.grpcPort (70000) must be a port between 1 and 65535, or 0"),
    (["--set", "online.terminationGracePeriodSeconds=12"],
     "online.terminationGracePeriodSeconds (12) must exceed online.preStopSleepSeconds + online.timeoutMs"),
    (["--set", "online.timeoutMs=30000"], "online.terminationGracePeriodSeconds (30) must exceed"),
    (["--set", "online.autoscaling.enabled=true"], "online.autoscaling.prometheusAddress is required"),
    (["--set", "online.autoscaling.enabled=true", "--set", "online.autoscaling.keda=false",
      "--set", "online.autoscaling.minReplicas=4", "--set", "online.autoscaling.maxReplicas=3"],
     "online.autoscaling.minReplicas (4) exceeds online.autoscaling.maxReplicas (3)"),
], ids=["one port for both", "no http port", "not a port", "grace below the drain", "a deadline past the grace",
        "keda without prometheus", "min above max"])
def test_the_chart_refuses_an_online_server_it_cannot_run(values: list[str], message: str) -> None:
    result = helm("template", "s", str(CHART), "--set", "online.enabled=true", *values, check=False)
    assert result.returncode != 0 and message in result.stderr, result.stderr
