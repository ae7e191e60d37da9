"""docs/head_and_tail.md, executed: precompute into Redis, load features, serve, ask, degrade, as written.

Every fenced block whose info string carries a ``tail-<step>`` marker is taken from the page: the
config block is saved as ``head-tail.yaml``; ``tail-redis`` (the page's first terminal) and
``tail-serve`` (its second) run in the background, each awaited by its own readiness (a PING with
the password; ``/v2/health/ready``) with a deadline; the other shell and Python blocks run
verbatim, in order, in a folder laid out like the repository root (``models`` and ``streamer``
linked in), with the venv's ``streamer`` first on the PATH and the page's ``REDIS_PASSWORD``
exported. One substitution, named here: the page's ports 8000 and 6379 become free ports of this
machine (in the excerpts too). Each ``text`` block is an excerpt: its lines appear, in order, among what the step
before it printed, a ``#`` standing for a number that differs run to run (a time, an age, a
hop's milliseconds) and ``…`` for text that does (a file's path). Both background processes are stopped with SIGTERM and must exit 0.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from streamer.dev.redis import LocalRedis
from tests.conftest import ROOT, free_port
from tests.support.pages import await_ready, http_ready, marked_blocks, run_block

DOC = ROOT / "docs" / "head_and_tail.md"
BIN = Path(sys.executable).parent
STEPS = {"tail-redis": "sh", "tail-config": "yaml", "tail-data": "python", "tail-precompute": "sh",
         "tail-precompute-output": "text", "tail-read": "sh", "tail-read-output": "text", "tail-features": "sh",
         "tail-features-output": "text", "tail-serve": "sh", "tail-ask": "sh", "tail-ask-output": "text",
         "tail-degrade": "sh", "tail-degrade-output": "text"}
PASSWORD = "change-me"


def assert_printed(excerpt: str, printed: str) -> None:
    """Each line of the excerpt is a whole line of ``printed``, in the order shown; ``#`` a number,
    ``…`` any text (a path)."""
    lines = iter(line.rstrip() for line in printed.splitlines())
    for line in excerpt.strip().splitlines():
        pattern = re.compile("^" + re.escape(line.rstrip()).replace("\\#", "#").replace("#", r"-?[\d,]+(\.\d+)?")
                             .replace("…", ".*?") + "$")
        assert any(pattern.match(have) for have in lines), f"{line!r} is not printed (in this order):\n{printed}"


def test_the_head_and_tail_page_runs_as_written(tmp_path: Path) -> None:
    blocks = marked_blocks(DOC, "tail", STEPS, ordered=True)
    assert f"export REDIS_PASSWORD={PASSWORD}" in blocks["tail-redis"]
    http, redis_port = free_port(), free_port()

    def ported(text: str) -> str:
        return text.replace("8000", str(http)).replace("6379", str(redis_port))

    root = tmp_path / "repo"
    root.mkdir()
    for name in ("models", "streamer"):
        (root / name).symlink_to(ROOT / name)
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "PYTHONPATH": str(ROOT),
           "REDIS_PASSWORD": PASSWORD}
    (root / "head-tail.yaml").write_text(ported(blocks["tail-config"]))
    started: list[tuple[str, subprocess.Popen[bytes], Path]] = []

    def background(step: str) -> subprocess.Popen[bytes]:
        log = tmp_path / f"{step}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(["bash", "-c", ported(blocks[step])], cwd=root, env=env, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        started.append((step, proc, log))
        return proc

    try:
        probe = LocalRedis(tmp_path / "unused", redis_port, PASSWORD)
        await_ready(probe.ping, background("tail-redis"), tmp_path / "tail-redis.log", "streamer dev redis")
        run_block("python", blocks["tail-data"], root, env)
        for step in ("tail-precompute", "tail-read", "tail-features"):
            assert_printed(ported(blocks[f"{step}-output"]),
                           run_block("sh", ported(blocks[step]), root, env, timeout_s=120))
        serve = background("tail-serve")
        await_ready(lambda: http_ready(f"http://127.0.0.1:{http}/v2/health/ready"), serve, tmp_path / "tail-serve.log",
               "streamer serve")
        for step in ("tail-ask", "tail-degrade"):
            assert_printed(ported(blocks[f"{step}-output"]), run_block("sh", ported(blocks[step]), root, env))
    finally:
        codes = {}
        for step, proc, _ in reversed(started):
            os.killpg(proc.pid, signal.SIGTERM)
            codes[step] = proc.wait(30)
    for step, _, log in started:
        assert codes[step] == 0, f"{step} exited {codes[step]}:\n{log.read_text()[-3000:]}"
