"""The type check that make test runs holds the ModelRunner protocol: a wrapper must declare it all."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

WRAPPER = '''
from streamer.model.contract import Contract
from streamer.model.runner import ModelRunner
from streamer.model.signature import Columns, Signature


class Timed:
    """Wraps a runner{gap}."""

    def __init__(self, inner: ModelRunner) -> None:
        self._inner = inner
{signature}
    @property
    def contract(self) -> Contract:
        return self._inner.contract

    @property
    def provider(self) -> str:
        return self._inner.provider

    def warm_up(self, rows: int) -> None:
        self._inner.warm_up(rows)

    def run(self, features: Columns) -> Columns:
        return self._inner.run(features)


def serve(runner: ModelRunner) -> ModelRunner:
    return Timed(runner)
'''
SIGNATURE = '''
    @property
    def signature(self) -> Signature:
        return self._inner.signature
'''


def mypy(tmp_path: Path, source: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "wrapper.py"
    path.write_text(textwrap.dedent(source))
    return subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                           "--cache-dir", str(tmp_path / ".mypy_cache"), "--follow-imports=silent", str(path)],
                          capture_output=True, text=True, cwd=ROOT, timeout=200, check=False)


@pytest.mark.timeout(420)
def test_a_wrapper_that_forgets_to_forward_signature_fails_the_type_check(tmp_path: Path) -> None:
    forgot = mypy(tmp_path, WRAPPER.format(gap=", and forgets the signature", signature=""))
    assert forgot.returncode == 1, forgot.stdout + forgot.stderr
    assert 'Incompatible return value type (got "Timed", expected "ModelRunner")' in forgot.stdout
    notes = [line.split("note:", 1)[1].strip() for line in forgot.stdout.splitlines() if "note:" in line]
    assert notes[-1] == "signature", forgot.stdout  # the missing protocol member, named
    forwarded = mypy(tmp_path, WRAPPER.format(gap="", signature=SIGNATURE))
    assert forwarded.returncode == 0, forwarded.stdout + forwarded.stderr
