"""docs/jobs.md, executed: the "Batch jobs" walk-through runs as written, on a real broker, with a worker process.

Every fenced block whose info string carries a ``jobs-<step>`` marker is taken from the page: the
config block is saved as ``jobs.yaml``, the shell and Python blocks run verbatim, in order, in a
folder laid out like the repository root (``deploy``, ``models`` and ``streamer`` linked in), with
the venv's ``streamer`` first on the PATH and the config's ``${KAFKA_BOOTSTRAP}``, ``${JOBS_TOPIC}``,
``${JOBS_STATUS_TOPIC}`` and ``${JOBS_GROUP}`` pointing at the session broker and at topics and a
group no other test uses. The worker's block is the one step not run to its end: it runs as a
process of its own from the job's submission on (as the page's second terminal), and is stopped
with SIGTERM at the end, which it must answer with exit 0. DuckDB's ``INSTALL iceberg`` is replaced
by the LOAD of the installed extension wheels, as in tests/lake/test_lake_page_kafka.py. Each
``text`` block is an excerpt that must appear, line for line and in order, in what the step before
it printed. The scheduled slot submitted twice is checked in its table too: scored once.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.lake.test_lake_page_kafka import INSTALL, LOCAL_LOAD, assert_printed
from tests.support.duck import connect
from tests.support.pages import marked_blocks, run_block

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

DOC = ROOT / "docs" / "jobs.md"
BIN = Path(sys.executable).parent  # the venv's bin: python and the streamer script
STEPS = {"jobs-config": "yaml", "jobs-data": "python", "jobs-spec": "sh", "jobs-submit": "sh",
         "jobs-submit-output": "text", "jobs-worker": "sh", "jobs-wait": "sh", "jobs-wait-output": "text",
         "jobs-read": "python", "jobs-read-output": "text", "jobs-schedule": "sh", "jobs-schedule-output": "text",
         "jobs-list": "sh"}
SLOT_JOB = "nightly-events-20261205T0100"


def test_the_jobs_page_runs_as_written(bootstrap: str, tmp_path: Path) -> None:
    blocks = marked_blocks(DOC, "jobs", STEPS, ordered=True)
    assert INSTALL in blocks["jobs-read"]
    root = tmp_path / "repo"
    root.mkdir()
    for name in ("deploy", "models", "streamer"):
        (root / name).symlink_to(ROOT / name)
    run = uuid.uuid4().hex[:8]
    env = {**os.environ, "KAFKA_BOOTSTRAP": bootstrap, "INPUT_TOPIC": f"features-{run}",
           "JOBS_TOPIC": f"jobs-{run}", "JOBS_STATUS_TOPIC": f"jobs-status-{run}", "JOBS_GROUP": f"workers-{run}",
           "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    (root / "jobs.yaml").write_text(blocks["jobs-config"])
    run_block("python", blocks["jobs-data"], root, env)
    run_block("sh", blocks["jobs-spec"], root, env)
    assert_printed(blocks["jobs-submit-output"], run_block("sh", blocks["jobs-submit"], root, env))

    log = tmp_path / "worker.log"
    with log.open("wb") as out:  # the page's second terminal
        worker = subprocess.Popen(["bash", "-c", f"exec {blocks['jobs-worker'].strip()}"], cwd=root, env=env,
                                  stdout=out, stderr=subprocess.STDOUT)
    try:
        assert_printed(blocks["jobs-wait-output"], run_block("sh", blocks["jobs-wait"], root, env, timeout_s=150))
        printed = run_block("python", blocks["jobs-read"].replace(INSTALL, LOCAL_LOAD), root, env)
        assert_printed(blocks["jobs-read-output"], printed)
        assert_printed(blocks["jobs-schedule-output"],
                       run_block("sh", blocks["jobs-schedule"], root, env, timeout_s=150))
        listed = run_block("sh", blocks["jobs-list"], root, env)
        for job in ("events-1", SLOT_JOB):
            assert re.search(rf"^{job} +completed +7 .* worker-1$", listed, re.MULTILINE), listed
    finally:
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(60)
    assert code == 0, log.read_text()[-3000:]

    # The slot submitted twice is one run: its table holds the six predictions once.
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("streamer", uri=f"sqlite:///{root}/lake/catalog.db", warehouse=(root / "lake").as_uri())
    table = catalog.load_table("streamer.nightly_scores")
    assert {s.summary["streamer.run-id"] for s in table.snapshots()} == {SLOT_JOB}
    rows = connect().sql(f"SELECT count(*), count(DISTINCT event_id) FROM iceberg_scan('{table.metadata_location}')")
    assert rows.fetchone() == (6, 6)
