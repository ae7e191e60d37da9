"""Docs pages executed by tests: a page's marked fenced blocks, and running one as a user would.

A block is marked by its info string: ```` ```sh walkthrough-run ```` is the step
``walkthrough-run`` of bring_your_own_model.md, shown as shell.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path


def marked_blocks(doc: Path, prefix: str, steps: dict[str, str], ordered: bool = False) -> dict[str, str]:
    """The page's blocks marked ``<prefix>-<step>``, by marker: each once, each in the language
    ``steps`` gives it, every step there (and in ``steps``' order when ``ordered``)."""
    block = re.compile(rf"^```(\w+) ({prefix}-[\w-]+)[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
    found: dict[str, str] = {}
    for language, marker, body in block.findall(doc.read_text()):
        assert marker not in found, f"{marker} appears twice in {doc.name}"
        assert steps.get(marker) == language, (marker, language)
        found[marker] = body
    if ordered:
        assert list(found) == list(steps), f"{doc.name}'s steps, in order: {list(found)}"
    else:
        assert set(found) == set(steps), f"missing from {doc.name}: {sorted(set(steps) - set(found))}"
    return found


def run_block(language: str, code: str, cwd: Path, env: dict[str, str], timeout_s: float = 60.0) -> str:
    """Run a Python or shell block as a user would, from ``cwd``; returns its stdout (fails on rc != 0)."""
    argv = [sys.executable, "-c", code] if language == "python" else ["bash", "-euo", "pipefail", "-c", code]
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
    assert done.returncode == 0, f"{language} block failed (rc {done.returncode}):\n{code}\n{done.stderr[-3000:]}"
    return done.stdout


def await_ready(ready: Callable[[], bool], proc: subprocess.Popen[bytes], log: Path, what: str,
                timeout_s: float = 60.0) -> None:
    """Wait until ``ready()`` (a page's background step: a server), polled with a deadline; fails
    with its log's tail when ``proc`` exits first or the deadline passes."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        assert proc.poll() is None, f"{what} exited:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"{what} is not ready:\n{log.read_text()[-3000:]}"
        time.sleep(0.05)


def http_ready(url: str) -> bool:
    """Whether ``url`` answers 200 (a readiness probe)."""
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            return bool(r.status == 200)
    except OSError:
        return False
