"""The container images and the Compose stack, checked without a Docker engine: each Dockerfile read by a real parser
(dockerfile-parse), its instructions checked against the repository they build from.

What an engine would catch first is checked here: every COPY source exists in the build context
and is not excluded by .dockerignore; the final stage runs as a non-root user, with the console
script as its entrypoint and a health check on the metrics port's /healthz; base images are
pinned; the ONNX Runtime version matches pyproject.toml; and the GPU base carries the CUDA major
version that the installed onnxruntime-gpu wheel links against. `make images` builds both where
an engine runs.
"""

from __future__ import annotations

import fnmatch
import io
import json
import os
import platform
import re
import shutil
import struct
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from dockerfile_parse import DockerfileParser

from streamer.dev.broker import docker_reachable, kafka_version

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILES = {"cpu": ROOT / "deploy" / "docker" / "Dockerfile", "gpu": ROOT / "deploy" / "docker" / "Dockerfile.gpu"}
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def parse(path: Path) -> DockerfileParser:
    """The parsed file (dockerfile-parse reads lazily from the file object: it stays in memory)."""
    return DockerfileParser(fileobj=io.BytesIO(path.read_bytes()))


def instructions(path: Path) -> list[dict[str, Any]]:
    return [i for i in parse(path).structure if i["instruction"] != "COMMENT"]


def final_stage(path: Path) -> list[dict[str, Any]]:
    steps = instructions(path)
    last_from = max(n for n, i in enumerate(steps) if i["instruction"] == "FROM")
    return steps[last_from:]


def ignored(relative: str) -> bool:
    """Is ``relative`` (a path in the build context) excluded by .dockerignore?"""
    patterns = [p.strip() for p in (ROOT / ".dockerignore").read_text().splitlines()
                if p.strip() and not p.startswith("#")]
    parts = Path(relative).parts
    prefixes = ["/".join(parts[: k + 1]) for k in range(len(parts))]
    for pattern in patterns:
        bare = pattern.removeprefix("**/")
        if any(fnmatch.fnmatch(p, pattern) or (bare != pattern and fnmatch.fnmatch(Path(p).name, bare))
               for p in prefixes):
            return True
    return False


def elf_needed(path: Path) -> list[str]:
    """The DT_NEEDED entries of a 64-bit little-endian ELF shared library (what ``readelf -d``
    lists as NEEDED): the libraries the dynamic linker must find."""
    data = path.read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1, "not a 64-bit little-endian ELF"
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + k * shentsize) for k in range(shnum)]
    dynamic = next(sec for sec in sections if sec[1] == 6)  # SHT_DYNAMIC
    strtab = sections[dynamic[6]]  # sh_link: its string table
    needed = []
    for off in range(dynamic[4], dynamic[4] + dynamic[5], 16):
        tag, value = struct.unpack_from("<qQ", data, off)
        if tag == 0:  # DT_NULL
            break
        if tag == 1:  # DT_NEEDED
            start = strtab[4] + value
            needed.append(data[start:data.index(b"\0", start)].decode())
    return needed


def ort_pin(name: str) -> str:
    pins = [d for d in PYPROJECT["project"]["dependencies"] if d.startswith(f"{name}==")]
    assert len(pins) == 1, pins
    return pins[0].split("==")[1].split(";")[0].strip()


@pytest.mark.parametrize("kind", DOCKERFILES)
def test_every_copy_source_exists_in_the_build_context(kind: str) -> None:
    copies = [i["value"].split() for i in instructions(DOCKERFILES[kind]) if i["instruction"] == "COPY"]
    assert copies
    for args in copies:
        if any(a.startswith("--from=") for a in args):
            continue  # from an earlier stage, not the context
        for source in [a for a in args if not a.startswith("--")][:-1]:
            assert (ROOT / source).exists(), f"{kind}: COPY {source}: not in the repository"
            assert not ignored(source), f"{kind}: COPY {source}: excluded by .dockerignore"


@pytest.mark.parametrize("kind", DOCKERFILES)
def test_the_final_stage_runs_the_console_script_as_a_non_root_user(kind: str) -> None:
    final = final_stage(DOCKERFILES[kind])
    users = [i["value"].split(":")[0] for i in final if i["instruction"] == "USER"]
    assert users and users[-1] not in ("root", "0"), f"{kind}: the final stage must set a non-root USER"
    entrypoint = [json.loads(i["value"]) for i in final if i["instruction"] == "ENTRYPOINT"]
    assert entrypoint == [["streamer"]] and "streamer" in PYPROJECT["project"]["scripts"]
    # Only runtime in the final stage: no build step, no source tree (they stay in the builder).
    assert not any("pip install" in i["value"] for i in final if i["instruction"] == "RUN"), kind
    assert not any(i["value"].split()[0] == "streamer" for i in final if i["instruction"] == "COPY"), kind
    assert sum(i["instruction"] == "FROM" for i in instructions(DOCKERFILES[kind])) >= 2, "multi-stage"


@pytest.mark.parametrize("kind", DOCKERFILES)
def test_the_health_check_asks_healthz_on_the_configured_metrics_port(kind: str) -> None:
    config = yaml.safe_load((ROOT / "deploy" / "config" / "deploy.yaml").read_text())
    port = config["metrics"]["port"]
    final = final_stage(DOCKERFILES[kind])
    checks = [i["value"] for i in final if i["instruction"] == "HEALTHCHECK"]
    assert len(checks) == 1 and f"127.0.0.1:{port}/healthz" in checks[0]
    assert [i["value"] for i in final if i["instruction"] == "EXPOSE"] == [str(port)]
    cmd = [json.loads(i["value"]) for i in final if i["instruction"] == "CMD"][-1]
    config_in_image = Path(cmd[cmd.index("--config") + 1])
    assert config_in_image == Path("/app/deploy/config/deploy.yaml")
    # The config's relative paths resolve inside the image as in the repository.
    for section in ("model", "output"):
        key = "path" if section == "model" else "schema"
        assert (ROOT / "deploy" / "config" / config[section][key]).resolve().relative_to(ROOT)


@pytest.mark.parametrize("kind", DOCKERFILES)
def test_base_images_are_pinned(kind: str) -> None:
    for image in parse(DOCKERFILES[kind]).parent_images:
        name, _, tag = image.partition(":")
        assert tag and tag != "latest" and re.match(r"\d+\.\d+\.\d+", tag), f"{kind}: {image} is not pinned"


def test_the_cpu_image_installs_the_onnxruntime_that_pyproject_pins() -> None:
    args = [i["value"] for i in instructions(DOCKERFILES["cpu"]) if i["instruction"] == "ARG"]
    assert f"ORT_VERSION={ort_pin('onnxruntime-gpu')}" in args
    assert ort_pin("onnxruntime") == ort_pin("onnxruntime-gpu")


@pytest.mark.skipif(platform.system() != "Linux" or platform.machine() != "x86_64",
                    reason="onnxruntime-gpu is installed only on Linux x86_64")
def test_the_gpu_base_carries_the_cuda_major_the_installed_wheel_links() -> None:
    import onnxruntime

    provider = Path(onnxruntime.__file__).parent / "capi" / "libonnxruntime_providers_cuda.so"
    needed = {int(m.group(1)) for lib in elf_needed(provider) if (m := re.fullmatch(r"libcudart\.so\.(\d+)", lib))}
    assert len(needed) == 1, elf_needed(provider)
    (image,) = set(parse(DOCKERFILES["gpu"]).parent_images)
    assert image.startswith("nvidia/cuda:") and "cudnn" in image and "runtime" in image, image
    assert int(image.split(":")[1].split(".")[0]) == needed.pop(), image


@pytest.mark.parametrize("kind", DOCKERFILES)
def test_the_streaming_images_hold_neither_spark_nor_ray(kind: str) -> None:
    """Spark (Java, pyspark, Iceberg's jars) and Ray live in Dockerfile.engines; the streaming
    images install the runtime and the EXTRAS they are built with, whose default is none."""
    steps = instructions(DOCKERFILES[kind])
    text = " ".join(i["value"] for i in steps if i["instruction"] in ("RUN", "ARG", "ENV", "COPY")).lower()
    for word in ("spark", "ray", "java", "jdk", "jre", "mvn", "iceberg"):
        assert not re.search(rf"\b{word}\b", text), f"{kind}: {word}"
    extras = [i["value"] for i in steps if i["instruction"] == "ARG" and i["value"].startswith("EXTRAS=")]
    assert extras in ([], ['EXTRAS=""']), extras
    runtime = " ".join(PYPROJECT["project"]["dependencies"]).lower()
    assert "pyspark" not in runtime and not re.search(r"\bray\b", runtime)


def test_dockerignore_keeps_local_state_out_of_the_context() -> None:
    for path in (".git", ".venv", ".cache/kafka", "streamer/__pycache__", "tests/deploy/test_deploy.py"):
        assert ignored(path), path
    for path in ("streamer/cli.py", "streamer/schemas/feature_event.avsc", "models/fraud_mlp.onnx", "pyproject.toml"):
        assert not ignored(path), path


COMPOSE = ROOT / "deploy" / "compose" / "compose.yaml"
KV_PASSWORD = "compose-kv-password"  # what `config` interpolates for KV_PASSWORD


def compose_config() -> dict[str, Any]:
    """The stack as a real Compose implementation resolves it (Debian's docker-compose: `config`
    validates the file against the Compose schema and needs no engine)."""
    proc = subprocess.run(["docker-compose", "-f", str(COMPOSE), "config"], capture_output=True, text=True,
                          check=False, env={**os.environ, "GRAFANA_ADMIN_PASSWORD": "x", "KV_PASSWORD": KV_PASSWORD})
    assert proc.returncode == 0, proc.stderr
    return yaml.safe_load(proc.stdout)


def test_the_compose_stack_is_valid_and_wires_what_the_repository_ships() -> None:
    services = compose_config()["services"]
    assert set(services) >= {"kafka", "topics", "scorer-1", "scorer-2", "lag-exporter", "online", "prometheus",
                             "grafana"}
    # Apache Kafka's own image, at the version the local broker runs.
    assert services["kafka"]["image"] == f"apache/kafka:{kafka_version()}"
    # The processors build the shipped Dockerfile and share one group.
    for name in ("scorer-1", "scorer-2"):
        build = services[name]["build"]
        assert (Path(build["context"]) / build["dockerfile"]).resolve() == DOCKERFILES["cpu"]
        assert services[name]["environment"]["GROUP_ID"] == services["lag-exporter"]["environment"]["GROUP_ID"]
    # Prometheus scrapes exactly the services that exist, on the ports they serve.
    scrape = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    config = yaml.safe_load((ROOT / "deploy" / "config" / "deploy.yaml").read_text())
    port = config["metrics"]["port"]
    targets = {t for job in scrape["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]}
    online = config["online"]
    assert targets == {f"scorer-1:{port}", f"scorer-2:{port}", f"lag-exporter:{port + 1}",
                       f"online:{online['http_port']}"}
    # Every bind mount is a file or folder of the repository.
    for name, service in services.items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0] if isinstance(volume, str) else volume["source"]
            if source.startswith("/"):
                assert Path(source).exists(), f"{name}: {source}"
    # One online server: `streamer serve` of the scorers' config, from an image with the online
    # extra, its ports published, healthy once ready (after the model's warm-up).
    server = services["online"]
    assert server["command"][:3] == ["serve", "--config", "/app/deploy/config/stack.yaml"]
    assert server["build"]["args"] == {"EXTRAS": "online"} and server["image"] != services["scorer-1"]["image"]
    assert (Path(server["build"]["context"]) / server["build"]["dockerfile"]).resolve() == DOCKERFILES["cpu"]
    assert "optional-dependencies" in PYPROJECT["project"] and "online" in PYPROJECT["project"]["optional-dependencies"]
    assert online["host"] == "0.0.0.0"
    published = {(int(p["target"]), int(p["published"])) for p in server["ports"]}
    assert published == {(online["http_port"], online["http_port"]), (online["grpc_port"], online["grpc_port"])}
    assert f"127.0.0.1:{online['http_port']}/v2/health/ready" in " ".join(server["healthcheck"]["test"])
    assert server["environment"]["GROUP_ID"] == services["scorer-1"]["environment"]["GROUP_ID"]
    mounted = {v.split(":")[0] for v in services["grafana"]["volumes"]}
    assert {str(ROOT / "deploy" / "grafana" / "provisioning"), str(ROOT / "deploy" / "grafana" / "dashboards")} <= mounted


@pytest.mark.skipif(not docker_reachable(), reason="no Docker engine answers here: the parser checks above stand in")
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("kind", DOCKERFILES)
def test_the_image_builds_where_an_engine_runs(kind: str) -> None:
    proc = subprocess.run(["docker", "build", "-f", str(DOCKERFILES[kind]), "-t", f"streamer:{kind}-test", str(ROOT)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]


def test_the_gpu_bundle_unpacker_checks_every_part_and_reassembles(tmp_path: Path) -> None:
    """deploy/bundle/unpack.sh on a tiny stand-in bundle (the real one is 277 MB of wheels: `make
    bundle`, checked by hand under `unshare -n`): parts reassemble, a corrupt part is refused."""
    for script in ("build.sh", "unpack.sh", "install-and-run.sh"):
        assert subprocess.run(["bash", "-n", str(ROOT / "deploy" / "bundle" / script)]).returncode == 0, script
    stage = tmp_path / "stage" / "streamer-gpu-bundle"
    stage.mkdir(parents=True)
    (stage / "install-and-run.sh").write_text('echo "ran with $*" > "$(dirname "$0")/ran"\n')
    (stage / "payload").write_bytes(os.urandom(300_000))  # several parts at a small part size
    out = tmp_path / "parts"
    out.mkdir()
    pack = (f"tar -C {tmp_path / 'stage'} -cf - streamer-gpu-bundle | split -b 100K -d -a 3 - "
            f"{out}/streamer-gpu-bundle.tar.part- && cd {out} && sha256sum streamer-gpu-bundle.tar.part-* > SHA256SUMS")
    subprocess.run(["bash", "-c", pack], check=True)
    shutil.copy(ROOT / "deploy" / "bundle" / "unpack.sh", out)
    assert len(list(out.glob("*.part-*"))) >= 3
    done = subprocess.run(["bash", str(out / "unpack.sh"), str(tmp_path / "fresh"), "--", "--events", "5"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    unpacked = tmp_path / "fresh" / "streamer-gpu-bundle"
    assert (unpacked / "ran").read_text().strip() == "ran with --events 5"
    assert (unpacked / "payload").read_bytes() == (stage / "payload").read_bytes()
    part = sorted(out.glob("*.part-*"))[1]
    part.write_bytes(b"x" + part.read_bytes()[1:])
    refused = subprocess.run(["bash", str(out / "unpack.sh"), str(tmp_path / "again")], capture_output=True, text=True)
    assert refused.returncode != 0 and not (tmp_path / "again").exists()
