"""A program a test starts, found beside this Python (a wheel's console script or binary) or on PATH."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def beside_python(name: str) -> Path | None:
    """``name`` next to this Python (the venv's), else the one on PATH; None when neither has it."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return beside
    found = shutil.which(name)
    return None if found is None else Path(found)
