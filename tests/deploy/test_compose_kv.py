"""The Compose stack's key-value store: a `redis` service whose password is KV_PASSWORD from the
environment (required, in no file), wired into the processors' and the online server's config
(deploy/config/stack.yaml: deploy.yaml and the kv: section), checked by `docker-compose config`
(no engine) and by running the service's own command and health check with Debian's redis-server.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import yaml

from streamer.config_file import load_config
from streamer.dev.redis import redis_binary
from tests.conftest import free_port
from tests.deploy.test_deploy import COMPOSE, KV_PASSWORD, compose_config

ROOT = Path(__file__).resolve().parents[2]
STACK = ROOT / "deploy" / "config" / "stack.yaml"
DEPLOY = ROOT / "deploy" / "config" / "deploy.yaml"
READERS = ("scorer-1", "scorer-2", "online")  # the services whose config has the kv: section


def shell(command: list[str]) -> str:
    """The ``sh -c`` script of a service's command or health check as the container's shell runs
    it (`config` prints a literal ``$`` escaped as ``$$``)."""
    assert command[0] in ("sh", "CMD-SHELL"), command
    return command[-1].replace("$$", "$")


def test_the_stack_refuses_to_start_without_a_password_and_writes_none_down() -> None:
    env = {k: v for k, v in os.environ.items() if k != "KV_PASSWORD"} | {"GRAFANA_ADMIN_PASSWORD": "x"}
    refused = subprocess.run(["docker-compose", "-f", str(COMPOSE), "config"], capture_output=True, text=True,
                             env=env, check=False)
    assert refused.returncode != 0 and "set KV_PASSWORD" in refused.stderr
    services = compose_config()["services"]
    redis = services["redis"]
    assert redis["image"].startswith("redis:7.")
    assert redis["environment"]["KV_PASSWORD"] == KV_PASSWORD
    assert KV_PASSWORD not in " ".join(redis["command"])  # the shell reads it from the environment
    assert redis["ports"] == ["127.0.0.1:6379:6379/tcp"]  # published on the host's loopback only
    assert "redis-data:/data:rw" in redis["volumes"]
    for name in READERS:
        service = services[name]
        assert service["environment"]["KV_PASSWORD"] == KV_PASSWORD, name
        assert service["command"][1:3] == ["--config", "/app/deploy/config/stack.yaml"], name
        assert service["depends_on"]["redis"] == {"condition": "service_healthy"}, name


def test_the_services_command_and_health_check_run_redis_with_the_password(tmp_path: Path) -> None:
    """The redis service's shell lines, run here with Debian's redis-server on a free port: the
    server takes the password from the environment, and the health check passes only with it."""
    redis = compose_config()["services"]["redis"]
    port, password = free_port(), "s3cret with spaces"
    env = {**os.environ, "KV_PASSWORD": password, "PATH": f"{Path(redis_binary()).parent}:{os.environ['PATH']}"}
    server = subprocess.Popen(["sh", "-c", f"{shell(redis['command'])} --port {port} --dir {tmp_path} --save ''"],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        check = shell(redis["healthcheck"]["test"]).replace("redis-cli", f"redis-cli -p {port}")
        for _ in range(100):  # until it listens: the health check's own retries
            if subprocess.run(["sh", "-c", check], env=env, timeout=10, check=False).returncode == 0:
                break
            server.poll()
            assert server.returncode is None, "redis-server exited"
            subprocess.run(["sleep", "0.1"], check=True)
        else:
            raise AssertionError("the health check never passed")
        wrong = subprocess.run(["sh", "-c", check], env={**env, "KV_PASSWORD": "wrong"}, timeout=10, check=False)
        assert wrong.returncode != 0  # the server refuses another password: requirepass took this one
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)


def test_the_stack_config_is_deploy_yaml_with_the_store_and_loads(tmp_path: Path) -> None:
    stack, deploy = yaml.safe_load(STACK.read_text()), yaml.safe_load(DEPLOY.read_text())
    kv = stack.pop("kv")
    for key in ("cache", "features"):
        stack["online"].pop(key)
    assert stack == deploy  # the same config otherwise: one cannot drift from the other
    services = compose_config()["services"]
    host, _, port = str(yaml.safe_load(kv["address"].removeprefix("${KV_ADDRESS:-").removesuffix("}"))).rpartition(":")
    assert host == "redis" and services["redis"]["ports"][0].split(":")[2] == f"{port}/tcp"
    cfg = load_config(STACK, env={"KV_PASSWORD": KV_PASSWORD})
    assert cfg.kv.address == "redis:6379" and cfg.kv.password is not None and cfg.kv.password.value == KV_PASSWORD
    assert cfg.online.features.kind == "none" and cfg.online.cache.mode == "fresh"
    feast = load_config(STACK, env={"KV_PASSWORD": KV_PASSWORD, "FEATURES_KIND": "feast", "CACHE_MODE": "auto"})
    features: Any = feast.online.features
    assert (features.kind, features.url, feast.online.cache.mode) == ("feast", "http://feast:6566", "auto")
    view, _, name = features.features[0].partition(":")
    assert f'name="{view}"' in (ROOT / "deploy" / "compose" / "feast" / "features.py").read_text()
    assert name == "features"  # the event field the example model reads
    assert [int(p["target"]) for p in services["feast"]["ports"]] == [int(features.url.rpartition(":")[2])]
