"""docs/many_models.md, executed: the repository, the routed stream and the load API run as written, on a real broker.

Every fenced block whose info string carries a ``many-<step>`` marker is taken from the page: the
config block is saved as ``many.yaml``; the shell and Python blocks run verbatim, in order, in a
folder laid out like the repository root (``models`` and ``streamer`` linked in), with the venv's
``streamer`` first on the PATH. The processor's block (``many-run``) runs as a process of its own
(the page's second terminal), awaited through ``/v2/health/ready``, and is stopped with SIGTERM at
the end, which it must answer with exit 0. Substitutions, named here: the page's ports 8000 and
8001 become free ports of this machine; its topics ``purchases`` and ``predictions`` and group
``scorers`` get this run's suffix (``OUTPUT_TOPIC`` tells the reading block); ``KAFKA_BOOTSTRAP`` is
the session broker; ``JOBS_TOKEN`` is what the first block exports, as a terminal keeps it. Each
``text`` block's lines must be whole lines of what the step before it printed, in order.
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
from tests.lake.test_lake_page_kafka import assert_printed
from tests.online.doubler import free_port
from tests.support.pages import await_ready, http_ready, marked_blocks, run_block

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

DOC = ROOT / "docs" / "many_models.md"
BIN = Path(sys.executable).parent
STEPS = {"many-repository": "sh", "many-config": "yaml", "many-check": "sh", "many-check-output": "text",
         "many-run": "sh", "many-events": "python", "many-produce": "sh", "many-read": "python",
         "many-read-output": "text", "many-online": "python", "many-online-output": "text"}


def test_the_many_models_page_runs_as_written(bootstrap: str, tmp_path: Path) -> None:
    blocks = marked_blocks(DOC, "many", STEPS, ordered=True)
    token = re.search(r"^export JOBS_TOKEN=(\S+)", blocks["many-repository"], re.MULTILINE)
    assert token is not None, "the first block exports the load API's token"
    http, grpc, run = free_port(), free_port(), uuid.uuid4().hex[:8]

    def ported(text: str) -> str:
        return text.replace("8000", str(http)).replace("8001", str(grpc))

    root = tmp_path / "repo"
    root.mkdir()
    for name in ("models", "streamer"):
        (root / name).symlink_to(ROOT / name)
    env = {**os.environ, "KAFKA_BOOTSTRAP": bootstrap, "JOBS_TOKEN": token.group(1),
           "OUTPUT_TOPIC": f"predictions-{run}", "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    config = (ported(blocks["many-config"]).replace("[purchases]", f"[purchases-{run}]")
              .replace("topic: predictions", f"topic: predictions-{run}").replace("group_id: scorers", f"group_id: scorers-{run}"))
    assert config.count(run) == 3, "the page's topics and group are the ones this test renames"
    (root / "many.yaml").write_text(config)
    run_block("sh", blocks["many-repository"], root, env)
    assert_printed(blocks["many-check-output"], run_block("sh", blocks["many-check"], root, env))

    log = tmp_path / "run.log"
    with log.open("wb") as out:  # the page's second terminal
        processor = subprocess.Popen(["bash", "-c", f"exec {blocks['many-run'].strip()}"], cwd=root, env=env,
                                     stdout=out, stderr=subprocess.STDOUT)
    try:
        await_ready(lambda: http_ready(f"http://127.0.0.1:{http}/v2/health/ready"), processor, log, "streamer run")
        run_block("python", blocks["many-events"], root, env)
        run_block("sh", blocks["many-produce"], root, env)
        assert_printed(blocks["many-read-output"], run_block("python", blocks["many-read"], root, env))
        assert_printed(blocks["many-online-output"], run_block("python", ported(blocks["many-online"]), root, env))
    finally:
        processor.send_signal(signal.SIGTERM)
        code = processor.wait(60)
    assert code == 0, log.read_text()[-3000:]
