"""A clean stop for every long command: SIGTERM and Ctrl+C (SIGINT) sent to `python -m streamer ...`
once it has made progress end it with exit 6, a summary that says `stopped`, the line to resume
where it has a run, and no traceback; a resumed run ends with exactly the rows of the whole input.

One table: each row is a command, its input, the sign of its progress (a commit of the lake's log,
records in the topic it writes) and what its finished work must hold. The inputs are shared by
the rows that read the same one (the input topic, a Parquet file) and sized so that a command is
still reading when the signal lands: the signal is sent as soon as the first sign shows.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
import yaml
from confluent_kafka import Producer

from streamer.config import Config
from streamer.errors import BrokerError
from streamer.kafka.topics import create_topics
from tests.conftest import Topics, end_offsets, make_config
from tests.integration.test_replay_kafka import produce_stamped, scored
from tests.lake.test_replay_lake_kafka import recent
from tests.lake.test_score import many
from tests.support.faults import write_config

pytestmark = pytest.mark.kafka
EVENTS = 200_000  # the input topic: the topic replay, the lake replay and evaluate read it
ROWS = 200_000  # the Parquet file `score` reads
LETTERS = 20_000  # dead letters, per signal (each redrive sends its own)
LINES = 20_000  # the JSON Lines file `produce` sends, per signal
STOPPED = 6  # errors.EXIT_STOPPED
SIGNALS = {"SIGTERM": signal.SIGTERM, "SIGINT": signal.SIGINT}


@dataclass
class Place:
    """What a row's runs share: the broker, the config, the inputs, a folder for what they write."""

    bootstrap: str
    cfg: Config
    config: Path
    input: str
    parquet: Path
    jsonl: Path
    tmp: Path


@dataclass(frozen=True)
class Case:
    """A command of the table: ``argv(place, key)`` its arguments (``key`` names this signal's
    outputs, and its run), ``progressed`` the sign that it has done some work, ``rows`` what its
    finished work holds (None: a command that cannot be resumed), ``resume`` the arguments that
    finish it, given the stopped run's stdout."""

    name: str
    argv: Callable[[Place, str], list[str]]
    progressed: Callable[[Place, str], bool]
    expected: int
    rows: Callable[[Place, str], int] | None = None
    run_id: bool = True  # the summary names a run to resume
    resume: Callable[[Place, str, str], list[str]] | None = None


def _config_for(place: Place, key: str, **input_: str) -> Path:
    """The shared config with another input topic (a row that writes into its input topic)."""
    doc = yaml.safe_load(place.config.read_text())
    doc["input"].update(input_)
    path = place.tmp / f"{key}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _committed(folder: Path) -> bool:
    """A Parquet dataset's commit log holds a commit (lake/parquet.py: one JSON file each)."""
    return any(p.name != "plan.json" for p in folder.glob("_streamer/*/*/*.json"))


def _parquet_rows(folder: Path, finished: bool = True) -> int:
    """The rows a reader of the dataset sees (its committed files), each source position once."""
    rows = duckdb.sql(f"SELECT count(*), count(DISTINCT (source_partition, source_offset)) "
                      f"FROM read_parquet('{folder}/**/*.parquet', hive_partitioning = true)").fetchall()
    assert rows[0][0] == rows[0][1], f"a source position written twice: {rows}"
    assert (folder / "_SUCCESS").exists() == finished, "_SUCCESS is written when, and only when, the run finished"
    return int(rows[0][0])


def _written(place: Place, topic: str) -> bool:
    """Records in ``topic`` (False while it does not exist, or has no leader yet)."""
    try:
        return sum(end_offsets(place.bootstrap, topic, committed_only=False).values()) > 0
    except BrokerError:
        return False


def _backfill(place: Place, key: str) -> int:
    events = [row["event_id"] for row in scored(place.bootstrap, place.cfg, f"backfill-{key}")]
    assert len(events) == len(set(events)), f"{len(events) - len(set(events))} predictions written twice"
    return len(events)


def _skip(place: Place, key: str, stdout: str) -> list[str]:
    found = re.search(r"produce the rest with --skip (\d+)", stdout)
    assert found, stdout
    return ["produce", "--config", str(place.tmp / f"{key}.yaml"), str(place.jsonl), "--skip", found.group(1)]


def _letters(place: Place, key: str) -> None:
    """``LETTERS`` dead letters of the validate stage in ``<key>.dlq``, from topic ``key``."""
    create_topics(place.bootstrap, {key: 3, f"{key}.dlq": 1})
    producer = Producer({"bootstrap.servers": place.bootstrap, "linger.ms": 20})
    for i in range(LETTERS):
        producer.produce(f"{key}.dlq", b'{"event_id": "evt-%d"}' % i, b"k", headers=[
            ("streamer.dlq.original.topic", key.encode()), ("streamer.dlq.original.partition", b"0"),
            ("streamer.dlq.original.offset", str(i).encode()), ("streamer.dlq.stage", b"validate")])
        producer.poll(0)
    assert producer.flush(60) == 0


def _redrive(place: Place, key: str) -> list[str]:
    _letters(place, key)
    return ["dlq", "redrive", "--config", str(_config_for(place, key, topics=[key], group_id=key))]


def _produce(place: Place, key: str) -> list[str]:
    create_topics(place.bootstrap, {key: 3})
    return ["produce", "--config", str(_config_for(place, key, topics=[key])), str(place.jsonl)]


CASES = [
    Case("topic replay",
         lambda pl, k: ["replay", "--config", str(pl.config), "--from", "earliest", "--run-id", k,
                        "--output-topic", f"backfill-{k}"],
         lambda pl, k: _written(pl, f"backfill-{k}"), EVENTS, _backfill),
    Case("lake replay",
         lambda pl, k: ["replay", "--config", str(pl.config), "--from", "earliest", "--run-id", k,
                        "--to-parquet", str(pl.tmp / k)],
         lambda pl, k: _committed(pl.tmp / k), EVENTS, lambda pl, k: _parquet_rows(pl.tmp / k)),
    Case("lake replay --workers 2",  # the supervisor forwards the signal; each worker stops and commits
         lambda pl, k: ["replay", "--config", str(pl.config), "--from", "earliest", "--run-id", k, "--workers", "2",
                        "--to-parquet", str(pl.tmp / k)],
         lambda pl, k: _committed(pl.tmp / k), EVENTS, lambda pl, k: _parquet_rows(pl.tmp / k)),
    Case("score",
         lambda pl, k: ["score", "--config", str(pl.config), "--from", str(pl.parquet), "--run-id", k,
                        "--to-parquet", str(pl.tmp / k), "--batch-size", "1024"],
         lambda pl, k: _committed(pl.tmp / k), ROWS, lambda pl, k: _parquet_rows(pl.tmp / k)),
    Case("evaluate",
         lambda pl, k: ["evaluate", "--config", str(pl.config), "--candidate",
                        yaml.safe_load(pl.config.read_text())["model"]["path"], "--candidate-version", "2",
                        "--from", "earliest", "--report", str(pl.tmp / k)],
         lambda pl, k: _committed(pl.tmp / k / "predictions"), EVENTS, run_id=False),
    Case("dlq redrive", _redrive, lambda pl, k: _written(pl, k), LETTERS,
         lambda pl, k: sum(end_offsets(pl.bootstrap, k).values()), run_id=False,
         resume=lambda pl, k, _out: ["dlq", "redrive", "--config", str(pl.tmp / f"{k}.yaml")]),
    Case("produce", _produce, lambda pl, k: _written(pl, k), LINES,
         lambda pl, k: sum(end_offsets(pl.bootstrap, k).values()), run_id=False, resume=_skip),
]


@pytest.fixture(scope="module")
def place(bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Place]:
    tmp = tmp_path_factory.mktemp("stops")
    run = uuid.uuid4().hex[:8]
    topic, output = f"features-{run}", f"predictions-{run}"
    create_topics(bootstrap, {topic: 3, output: 3})
    config = write_config(tmp / "config.yaml", bootstrap=bootstrap, input_topic=topic, output_topic=output,
                          group=f"group-{run}", guarantee="at_least_once")
    doc = yaml.safe_load(config.read_text())
    doc["lake"] = {"warehouse": str(tmp / "lake"), "target_file_mb": 1}
    config.write_text(yaml.safe_dump(doc))
    cfg = make_config(bootstrap, Topics(topic, output, f"{topic}.dlq", f"group-{run}"))
    produce_stamped(bootstrap, cfg, topic, 0, EVENTS, step_ms=100, base_ms=recent(EVENTS, 100))
    pq.write_table(many(ROWS), tmp / "events.parquet", row_group_size=4096)
    with (tmp / "events.jsonl").open("w") as out:
        for row in many(LINES).to_pylist():
            out.write(json.dumps({**row, "features": [round(x, 3) for x in row["features"]]}) + "\n")
    yield Place(bootstrap, cfg, config, topic, tmp / "events.parquet", tmp / "events.jsonl", tmp)


def _streamer(argv: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "streamer", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "STREAMER_LOG_LEVEL": "INFO"})


@pytest.mark.timeout(240)
@pytest.mark.parametrize("signame", SIGNALS)
@pytest.mark.parametrize("case", CASES, ids=[re.sub(r"[^a-z0-9]+", "-", c.name) for c in CASES])
def test_a_signal_stops_the_command_cleanly_and_the_same_run_resumes_it(
        case: Case, signame: str, place: Place) -> None:
    key = f"{re.sub(r'[^a-z0-9]+', '-', case.name)}-{signame.lower()}-{uuid.uuid4().hex[:6]}"
    proc = _streamer(case.argv(place, key))
    deadline = time.monotonic() + 120
    while not case.progressed(place, key):
        assert proc.poll() is None, f"{case.name} ended before the signal: {proc.communicate()}"
        assert time.monotonic() < deadline, f"{case.name} made no progress in 120 s"
        time.sleep(0.05)  # polling a condition, not waiting for one
    proc.send_signal(SIGNALS[signame])
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == STOPPED, f"exit {proc.returncode}\n{out}\n{err}"
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert "stopped" in out, out
    if case.run_id:  # a lake run: what it read is committed (each summary of its workers counts its own)
        assert out.rstrip().splitlines()[-1].startswith(f"resume with --run-id {key}"), out
        if (place.tmp / key).is_dir():
            read = sum(int(n) for n in re.findall(r"predictions (\d+) \+ rejects 0", out))
            assert _parquet_rows(place.tmp / key, finished=False) == read, out
    if case.rows is None:  # evaluate: its report covers what was read, and says it was stopped
        run = json.loads((place.tmp / key / "report.json").read_text())["run"]
        assert (run["stopped"] or "").startswith("stopped by SIGTERM or Ctrl+C"), run
        return
    again = case.resume(place, key, out) if case.resume else case.argv(place, key)
    done = subprocess.run([sys.executable, "-m", "streamer", *again], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert "stopped" not in done.stdout, done.stdout
    assert case.rows(place, key) == case.expected
