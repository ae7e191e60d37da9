"""The schemas shipped with the package: the prediction layout and the example events, read with importlib.resources."""

from __future__ import annotations

from importlib.resources import as_file, files
from pathlib import Path


def bundled(name: str) -> Path:
    """The path of a shipped schema (``prediction.avsc``); the package is installed as files."""
    with as_file(files(__name__) / name) as path:
        return Path(path)
