"""docs/lake.md, executed: the "Backfill into the lake" walk-through runs as written, on a real broker.

Every fenced block whose info string carries a ``lake-<step>`` marker is taken from the page: the
config block is saved as ``lake.yaml``, the shell and Python blocks run verbatim, in order, in a
folder laid out like the repository root (``deploy``, ``models`` and ``streamer`` linked in), with
the venv's ``streamer`` first on the PATH and the config's ``${KAFKA_BOOTSTRAP}``,
``${INPUT_TOPIC}``, ``${OUTPUT_TOPIC}`` and ``${GROUP_ID}`` pointing at the session broker and at
topics no other test uses, which the page's ``streamer topics create`` makes. Two substitutions,
both named here: DuckDB cannot download its iceberg extension on a host without its extension
repository, so the query block's ``INSTALL iceberg; LOAD iceberg;`` becomes a LOAD of the files of
the installed ``duckdb-extension-*`` wheels (as the page's note tells such a host to do); and
the topic name ``features`` in the printed offsets is this test's topic. Each ``text`` block is
an excerpt that must appear, line for line and in order, in what the step before it printed.
The files the page says it writes are checked too: the table's snapshot, the Parquet layout and
its ``_SUCCESS``.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.support.pages import marked_blocks, run_block

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

DOC = ROOT / "docs" / "lake.md"
BIN = Path(sys.executable).parent  # the venv's bin: python and the streamer script
STEPS = {"lake-config": "yaml", "lake-produce": "sh", "lake-replay": "sh", "lake-replay-output": "text",
         "lake-labels": "sh", "lake-query": "python", "lake-query-output": "text", "lake-export": "python",
         "lake-score": "sh", "lake-score-output": "text", "lake-read": "python", "lake-read-output": "text"}
INSTALL = 'con.sql("INSTALL iceberg; LOAD iceberg;")'
LOCAL_LOAD = """import duckdb_extension_avro, duckdb_extension_iceberg
for module in (duckdb_extension_avro, duckdb_extension_iceberg):
    path = next(Path(module.__file__).parent.glob("extensions/*/*.duckdb_extension"))
    con.execute(f"LOAD '{path}'")"""


def doc_blocks() -> dict[str, str]:
    return marked_blocks(DOC, "lake", STEPS, ordered=True)


def assert_printed(excerpt: str, printed: str) -> None:
    """Each line of the excerpt is a whole line of ``printed``, in the order shown."""
    lines = iter(line.rstrip() for line in printed.splitlines())
    for line in excerpt.splitlines():
        if line.strip():
            assert any(have == line.rstrip() for have in lines), f"{line!r} is not printed (in this order):\n{printed}"


def test_the_page_shows_install_and_the_offline_load_it_substitutes() -> None:
    text = DOC.read_text()
    assert INSTALL in doc_blocks()["lake-query"]
    assert "\n".join("    " + line for line in LOCAL_LOAD.splitlines()) in text  # the note shows the same LOAD


def test_the_lake_page_runs_as_written(bootstrap: str, tmp_path: Path) -> None:
    blocks = doc_blocks()
    assert (BIN / "streamer").exists(), f"no streamer script beside {sys.executable}"
    root = tmp_path / "repo"
    root.mkdir()
    for name in ("deploy", "models", "streamer"):
        (root / name).symlink_to(ROOT / name)
    run = uuid.uuid4().hex[:8]
    topic = f"features-{run}"
    env = {**os.environ, "KAFKA_BOOTSTRAP": bootstrap, "INPUT_TOPIC": topic, "OUTPUT_TOPIC": f"predictions-{run}",
           "GROUP_ID": f"group-{run}", "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    (root / "lake.yaml").write_text(blocks["lake-config"])

    created = run_block("sh", blocks["lake-produce"], root, env)
    assert f"created  {topic} (input.topics[0])" in created
    assert f"produced 7 events to {topic}" in created

    assert_printed(blocks["lake-replay-output"], run_block("sh", blocks["lake-replay"], root, env))
    run_block("sh", blocks["lake-labels"], root, env)
    assert INSTALL in blocks["lake-query"]
    printed = run_block("python", blocks["lake-query"].replace(INSTALL, LOCAL_LOAD), root, env)
    assert_printed(blocks["lake-query-output"].replace('"features:', f'"{topic}:'), printed)

    # The table the page describes: day partitions, one snapshot of the run, its reject beside it.
    data = sorted(p.relative_to(root / "lake") for p in (root / "lake").rglob("*.parquet"))
    layout = [(p.parts[1], p.parts[3].split("=")[0]) for p in data]
    assert layout == [("scores", "event_time_day"), ("scores_rejects", "rejected_at_day")], data
    assert data[0].parts[3] == "event_time_day=2026-01-01", data
    assert all(p.name.startswith("backfill-1-0-of-1-000000-") for p in data), data

    run_block("python", blocks["lake-export"], root, env)
    assert_printed(blocks["lake-score-output"], run_block("sh", blocks["lake-score"], root, env))
    success = json.loads((root / "scored" / "_SUCCESS").read_text())
    assert [f.split("/")[0] for f in success["files"]] == ["event_date=2026-01-01"], success
    assert all((root / "scored" / f).is_file() for f in success["files"]), success
    assert len(list((root / "scored_rejects").rglob("*.parquet"))) == 1
    assert_printed(blocks["lake-read-output"], run_block("python", blocks["lake-read"], root, env))
