"""README.md's "Your first hour", executed as written, in order, on a fresh broker.

Every ```bash block of the section runs verbatim with bash, in a folder laid out like a fresh
clone after ``make demo`` (``.venv/bin`` is this venv's, ``deploy``, ``models`` and ``streamer``
link to the repository's). The broker block, ``make kafka``, is the one exception: ``make kafka``
runs ``streamer dev kafka``, and the test runs that command itself, on a free port with a data
folder of its own, and points the example config at it through ``KAFKA_BOOTSTRAP`` (the
config's own ``${KAFKA_BOOTSTRAP:-127.0.0.1:9092}``). The ``streamer run`` block runs until the
predictions of the sample events are on the output topic, then gets Ctrl+C (SIGINT), as the
README tells the reader to do.

What the README says each command prints is checked against what it prints: the run's summary
(7 events, 6 predictions, 1 dead letter), the replay's counts adding up, the backfill's six
predictions, and the dead letter of the short event.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT, free_port

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(420)]

README = ROOT / "README.md"
BIN = Path(sys.executable).parent
BLOCK = re.compile(r"^```bash\n(.*?)^```", re.MULTILINE | re.DOTALL)
SAMPLE = ROOT / "deploy" / "config" / "example-events.jsonl"


def first_hour_blocks() -> list[str]:
    section = README.read_text().split("\n## Your first hour\n", 1)[1].split("\n## ", 1)[0]
    return [b.strip() for b in BLOCK.findall(section)]


def test_the_section_starts_a_broker_then_runs_the_commands_in_order() -> None:
    blocks = first_hour_blocks()
    assert blocks[0] == "make kafka"
    recipe = (ROOT / "Makefile").read_text().split("\nkafka:", 1)[1].split("\n\n", 1)[0]
    assert "streamer dev kafka" in recipe  # what the test runs in its place
    commands = [b.split()[1:3] for b in blocks[1:]]
    assert [c[0] for c in commands] == ["topics", "check", "produce", "run", "tail", "replay", "tail", "dlq"]


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """A folder laid out like the repository root after ``make demo``."""
    root = tmp_path / "clone"
    (root / ".venv").mkdir(parents=True)
    (root / ".venv" / "bin").symlink_to(BIN)
    for name in ("deploy", "models", "streamer"):
        (root / name).symlink_to(ROOT / name)
    return root


@pytest.fixture
def dev_broker(tmp_path: Path) -> Iterator[str]:
    """``streamer dev kafka`` (what ``make kafka`` runs) on a free port: a fresh broker."""
    port = free_port()
    proc = subprocess.Popen([str(BIN / "streamer"), "dev", "kafka", "--port", str(port),
                             "--data", str(tmp_path / "kafka-data")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # it prints the bootstrap address once the broker answers
            if f"127.0.0.1:{port}" in line:
                break
        else:
            pytest.fail(f"streamer dev kafka exited {proc.wait()} before it was ready")
        yield f"127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()


def sh(block: str, cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0, f"{block}\nexit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def test_the_first_hour_runs_as_written(clone: Path, dev_broker: str) -> None:
    blocks = first_hour_blocks()
    env = {**os.environ, "KAFKA_BOOTSTRAP": dev_broker, "PYTHONUNBUFFERED": "1"}
    for var in ("INPUT_TOPIC", "OUTPUT_TOPIC", "GROUP_ID"):
        env.pop(var, None)  # the example's own names, as the README states them
    sample = [json.loads(line) for line in SAMPLE.read_text().splitlines() if line.strip()]
    good = [e for e in sample if len(e["features"]) == 32]
    assert (len(sample), len(good)) == (7, 6)  # what the README says the file holds
    started = time.monotonic()

    topics, check, produce, run, tail, replay, tail_backfill, dlq = blocks[1:]
    assert "features" in sh(topics, clone, env)
    assert "ready to run" in sh(check, clone, env)
    assert "produced 7 events" in sh(produce, clone, env)

    runner = subprocess.Popen(["bash", "-c", f"exec {run}"], cwd=clone, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        lines: list[str] = []
        while time.monotonic() < deadline:  # the six predictions, read as the README's next step does
            lines = sh(f"{tail} --limit 6", clone, env).splitlines()
            if len([line for line in lines if line.startswith("{")]) >= 6:
                break
        runner.send_signal(signal.SIGINT)  # Ctrl+C, as the README says
        out, _ = runner.communicate(timeout=60)
    finally:
        if runner.poll() is None:
            runner.kill()
    assert runner.returncode == 0, out
    assert re.search(r"\b7 events\b", out) and re.search(r"\b6 predictions\b", out), out
    assert re.search(r"\b1 dead letter\b", out), out

    predictions = [json.loads(line) for line in sh(tail, clone, env).splitlines() if line.startswith("{")]
    assert sorted(p["event_id"] for p in predictions) == sorted(e["event_id"] for e in good)
    assert {p["model_version"] for p in predictions} == {"1"}  # verbatim, as configured

    summary = sh(replay, clone, env)
    assert re.search(r"\b7 events\b", summary) and re.search(r"\b6 predictions\b", summary), summary
    assert re.search(r"\b1 dead letter\b", summary), summary
    backfill = [json.loads(line) for line in sh(tail_backfill, clone, env).splitlines() if line.startswith("{")]
    assert sorted(p["event_id"] for p in backfill) == sorted(e["event_id"] for e in good)

    letters = sh(dlq, clone, env)
    short = [e for e in sample if len(e["features"]) != 32][0]
    assert short["event_id"] in letters and "validate" in letters, letters
    print(f"first hour, topics create to dlq inspect: {time.monotonic() - started:.1f} s")
