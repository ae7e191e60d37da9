"""observe/lag.py without a broker: the lag exporter reads only its part of the processors' config
(the cluster, the group, its topics, where to serve), so it starts where no model file is mounted.
Its lag figures on a real broker: tests/integration/test_observability_kafka.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from streamer.config import Secret, librdkafka_config
from streamer.config_file import load_config, load_part
from streamer.errors import ConfigError
from streamer.observe.lag import LagConfig
from tests.conftest import ROOT, free_port

# A processor's config as a pod of the chart holds it: model and schemas on volumes the lag
# exporter's pod does not mount, a secret and a model setting from the environment.
PROCESSOR_CONFIG = """
kafka:
  bootstrap.servers: {bootstrap}
  sasl.password: ${{KAFKA_SASL_PASSWORD}}
  group.instance.id: ${{POD_NAME}}
input:
  topics: [features, more-features]
  group_id: streamer-fraud
  format: avro
  schema: /schemas/feature_event.avsc
model:
  path: /models/fraud_mlp.onnx
  name: fraud_mlp
  version: ${{MODEL_VERSION}}
output:
  topic: predictions
  schema: /schemas/prediction.avsc
metrics:
  host: 127.0.0.1
  port: {port}
"""
ENV = {"KAFKA_SASL_PASSWORD": "pw-not-printed", "POD_NAME": "lag-0"}  # MODEL_VERSION: unset


def write(tmp_path: Path, bootstrap: str = "kafka:9092", port: int = 9400, text: str = PROCESSOR_CONFIG) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text.format(bootstrap=bootstrap, port=port))
    return path


def test_the_lag_exporters_part_loads_without_model_files_or_their_variables(tmp_path: Path) -> None:
    path = write(tmp_path)
    with pytest.raises(ConfigError):  # the processors' loader needs what the exporter does not
        load_config(path, env=ENV)
    cfg = load_part(path, LagConfig, env=ENV)
    assert cfg.input.group_id == "streamer-fraud" and cfg.input.topics == ("features", "more-features")
    assert (cfg.metrics.host, cfg.metrics.port) == ("127.0.0.1", 9400)
    assert isinstance(cfg.kafka["sasl.password"], Secret) and "pw-not-printed" not in repr(cfg)
    assert librdkafka_config(cfg) == {"bootstrap.servers": "kafka:9092", "sasl.password": "pw-not-printed",
                                      "group.instance.id": "lag-0"}


@pytest.mark.parametrize(("given", "broken", "key"), [
    ("group_id: streamer-fraud", "group_id: ''", "input.group_id"),
    ("topics: [features, more-features]", "topics: []", "input.topics"),
    ("bootstrap.servers: {bootstrap}", "client.id: lag", "kafka"),
    ("port: {port}", "port: 70000", "metrics.port"),
])
def test_what_the_lag_exporter_reads_is_checked_by_key(tmp_path: Path, given: str, broken: str, key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_part(write(tmp_path, text=PROCESSOR_CONFIG.replace(given, broken)), LagConfig, env=ENV)
    assert caught.value.key == key


def get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0  # not listening yet


@pytest.mark.timeout(90)
def test_the_lag_exporter_starts_and_stops_without_model_files(tmp_path: Path) -> None:
    """`streamer lag-exporter --config` on a processor's config whose model and schema files do not
    exist here serves /healthz, and exits 0 on SIGTERM (no broker: each collection fails and is
    counted, the exporter keeps serving)."""
    nobody = f"127.0.0.1:{free_port()}"  # a port taken and released: nothing listens there
    port = free_port()
    path = write(tmp_path, bootstrap=nobody, port=port + 1)  # the exporter's default: metrics.port - 1
    log = (tmp_path / "lag.log").open("wb")
    env = {**os.environ, **ENV, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "streamer", "lag-exporter", "--config", str(path)],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 60
        while get(f"http://127.0.0.1:{port}/healthz") != 200:
            assert proc.poll() is None, f"exited {proc.returncode}: {(tmp_path / 'lag.log').read_text()[-2000:]}"
            assert time.monotonic() < deadline, "no /healthz in 60 s"
            try:
                proc.wait(0.1)  # returns at once if it exits
            except subprocess.TimeoutExpired:
                pass
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(45) == 0, (tmp_path / "lag.log").read_text()[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
    said = (tmp_path / "lag.log").read_text()
    assert "fraud_mlp.onnx" not in said and "pw-not-printed" not in said, said[-2000:]

