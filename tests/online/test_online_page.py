"""docs/online.md, executed: the walk-through runs as written against `streamer serve`.

Every fenced block whose info string carries an ``online-<step>`` marker is taken from the page:
the config block is saved as ``online.yaml``; ``online-serve`` starts in the background (its
readiness awaited through ``/v2/health/ready`` with a deadline); the shell and Python blocks run
verbatim, in order, in a folder laid out like the repository root (``models`` and ``streamer``
linked in), with the venv's ``streamer`` first on the PATH. One substitution, named here: the
page's ports 8000 and 8001 become free ports of this machine, in the config and in the commands.
Each ``text`` block must equal what the step before it printed, line for line; a ``#`` in it
stands for a number that differs run to run (``scored_at``). The server is stopped with SIGTERM
at the end and must exit 0.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT
from tests.online.doubler import free_port
from tests.support.pages import await_ready, http_ready, marked_blocks, run_block

DOC = ROOT / "docs" / "online.md"
BIN = Path(sys.executable).parent
STEPS = {"online-config": "yaml", "online-serve": "sh", "online-ready": "sh", "online-ready-output": "text",
         "online-infer": "sh", "online-infer-output": "text", "online-score": "sh", "online-score-output": "text",
         "online-shed": "sh", "online-shed-output": "text", "online-tritonclient": "python",
         "online-tritonclient-output": "text"}


def assert_printed(excerpt: str, printed: str) -> None:
    """The excerpt's lines are the printed lines, ``#`` standing for a number."""
    want = [line.rstrip() for line in excerpt.strip().splitlines()]
    got = [line.rstrip() for line in printed.strip().splitlines()]
    assert len(want) == len(got), f"printed:\n{printed}"
    for w, g in zip(want, got, strict=True):
        pattern = "^" + re.escape(w).replace("\\#", "#").replace("#", r"-?\d+(\.\d+)?") + "$"
        assert re.match(pattern, g), f"{g!r} is not {w!r}"


def test_the_online_page_runs_as_written(tmp_path: Path) -> None:
    blocks = marked_blocks(DOC, "online", STEPS, ordered=True)
    http, grpc = free_port(), free_port()

    def ported(text: str) -> str:
        return text.replace("8000", str(http)).replace("8001", str(grpc))

    root = tmp_path / "repo"
    root.mkdir()
    for name in ("models", "streamer"):
        (root / name).symlink_to(ROOT / name)
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": str(ROOT)}
    (root / "online.yaml").write_text(ported(blocks["online-config"]))
    log = (tmp_path / "serve.log").open("w")
    server = subprocess.Popen(["bash", "-c", blocks["online-serve"]], cwd=root, env=env, stdout=log,
                              stderr=subprocess.STDOUT, start_new_session=True)
    try:  # readiness is the condition: polled with a deadline, as a probe does
        await_ready(lambda: http_ready(f"http://127.0.0.1:{http}/v2/health/ready"), server, tmp_path / "serve.log",
                    "streamer serve")
        for step in ("online-ready", "online-infer", "online-score", "online-shed"):
            assert_printed(blocks[f"{step}-output"], run_block("sh", ported(blocks[step]), root, env))
        printed = run_block("python", ported(blocks["online-tritonclient"]), root, env)
        assert_printed(blocks["online-tritonclient-output"], printed)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        code = server.wait(30)
        log.close()
    assert code == 0, (tmp_path / "serve.log").read_text()
