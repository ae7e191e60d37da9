"""Every deliberate bug of `make mutants` still applies to the code: a refactor that moves what a
patch touches must carry the patch along, or `make mutants` would have nothing left to prove."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PATCHES = sorted((ROOT / "tests" / "mutants").glob("*.patch"))


def test_there_are_mutants() -> None:
    assert len(PATCHES) >= 12


@pytest.mark.parametrize("patch", PATCHES, ids=[p.stem for p in PATCHES])
def test_the_mutant_applies_and_names_its_killers(patch: Path) -> None:
    text = patch.read_text()
    assert "\nKilled-by: tests/" in "\n" + text and "Mutant: " in text
    check = subprocess.run(["git", "apply", "--check", str(patch)], cwd=ROOT, capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
