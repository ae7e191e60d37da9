"""A missing extra is one line: each command or flag that needs an optional extra (lake, eval, online,
optimize, kv, ray, spark), run in a real environment without it (streamer installed from this checkout with its
runtime dependencies alone), exits 2 naming the extra and the install line for a clone."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from streamer.extras import EXTRAS, install_line
from tests.conftest import EXAMPLE, ROOT
from tests.support.core_venv import build

EXAMPLE_CONFIG = str(EXAMPLE)
MODEL = str(ROOT / "models" / "fraud_mlp.onnx")


@pytest.fixture(scope="session")
def core(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The python of an environment holding streamer and its runtime dependencies, no extra."""
    started = time.monotonic()
    python = build(tmp_path_factory.mktemp("core") / "venv")
    print(f"\ncore environment built in {time.monotonic() - started:.1f} s")  # its cost, with -s
    yield python


def online_config(tmp_path: Path) -> str:
    doc = yaml.safe_load(EXAMPLE.read_text())
    for section, key in (("input", "schema"), ("model", "path"), ("output", "schema")):
        doc[section][key] = str((EXAMPLE.parent / doc[section][key]).resolve())
    doc["online"] = {"enabled": True}
    path = tmp_path / "online.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


COMMANDS: dict[str, list[tuple[str, list[str]]]] = {  # extra -> (what the line names, the command)
    "lake": [("--to-table", ["replay", "--config", EXAMPLE_CONFIG, "--from", "earliest", "--to-table", "t"]),
             ("--to-parquet", ["replay", "--config", EXAMPLE_CONFIG, "--from", "earliest", "--to-parquet", "out"]),
             ("score", ["score", "--config", EXAMPLE_CONFIG, "--from", "in.parquet", "--to-parquet", "out"])],
    "eval": [("evaluate", ["evaluate", "--config", EXAMPLE_CONFIG, "--candidate", MODEL, "--from", "earliest"])],
    "online": [("serve", ["serve", "--config", EXAMPLE_CONFIG]),
               ("online.enabled", ["run", "--config", "ONLINE"])],
    "optimize": [("model optimize", ["model", "optimize", MODEL, "--out", "optimized.onnx"])],
    "kv": [("features load", ["features", "load", "--config", EXAMPLE_CONFIG, "--from", "rows.parquet"])],
    "ray": [("--engine ray", ["score", "--config", EXAMPLE_CONFIG, "--from", "in.parquet", "--to-parquet", "out",
                              "--engine", "ray"])],
    "spark": [("spark_main.py", ["SPARK_MAIN", "--config", EXAMPLE_CONFIG, "--from", "in.parquet",
                                 "--to-parquet", "out", "--run-id", "r1"])],
}


@pytest.mark.parametrize("extra", sorted(COMMANDS))
def test_a_command_without_its_extra_exits_2_in_one_line_with_the_clone_install_line(
        extra: str, core: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    for what, args in COMMANDS[extra]:
        args = [online_config(tmp_path) if a == "ONLINE" else a for a in args]
        # spark-submit's entry point is a script of its own; every other command is streamer's.
        command = [str(ROOT / "streamer" / "engines" / "spark_main.py"), *args[1:]] if args[0] == "SPARK_MAIN" \
            else ["-m", "streamer", *args]
        done = subprocess.run([str(core), *command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, (args, done.stderr)
        assert "Traceback" not in done.stderr, done.stderr
        assert done.stderr.count("\n") == 1, done.stderr
        assert done.stderr.startswith(f"streamer: {what} needs the {extra} extra ("), done.stderr
        assert done.stderr.endswith(f"not installed): pip install -e '.[{extra}]'\n"), done.stderr


def test_the_core_environment_lacks_every_extra_and_has_the_runtime(core: Path) -> None:
    modules = sorted({m for ms in EXTRAS.values() for m in ms})
    found = subprocess.run([str(core), "-c", "import importlib.util as u, sys; import streamer, onnxruntime, "
                            f"confluent_kafka; print([m for m in {modules!r} if u.find_spec(m)], streamer.__file__)"],
                           capture_output=True, text=True, timeout=60, cwd="/")
    assert found.returncode == 0, found.stderr
    assert found.stdout.split(" ", 1)[0] == "[]" and str(ROOT / "streamer") in found.stdout, found.stdout


def test_the_install_line_is_the_clones_in_a_checkout_and_the_wheels_elsewhere(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    assert install_line("lake") == "pip install -e '.[lake]'"
    monkeypatch.chdir(tmp_path)
    assert install_line("lake") == f"pip install -e '.[lake]' in {ROOT}"
    site = tmp_path / "site-packages"  # an installed wheel: no pyproject.toml beside the package
    (site / "streamer").mkdir(parents=True)
    assert install_line("eval", site) == "pip install 'streamer[eval]'"
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "pyproject.toml").write_text('[project]\nname = "other"\n')  # another project's
    assert install_line("eval", tmp_path / "other") == "pip install 'streamer[eval]'"


@pytest.mark.parametrize(("flags", "what"), [
    (["--to-table", "scores"], "--to-table"),
    (["--labels-from", "labels"], "--labels-from"),  # a table name, not a file
])
def test_evaluate_asks_for_the_lake_extra_only_for_a_table(flags: list[str], what: str, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    from streamer.cli import main

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pyiceberg" else real(name, *a))
    monkeypatch.chdir(ROOT)
    args = ["evaluate", "--config", EXAMPLE_CONFIG, "--candidate", MODEL, "--from", "earliest"]
    assert main([*args, *flags]) == 2
    assert capsys.readouterr().err == (f"streamer: {what} needs the lake extra (pyiceberg not installed): "
                                       "pip install -e '.[lake]'\n")
