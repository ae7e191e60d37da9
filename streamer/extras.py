"""The optional extras (lake, eval, online, optimize, kv, spark, ray): whether one is installed, checked before a
command that needs it does anything, and the one line that says how to install it where streamer runs.

From a source checkout (a clone, installed with ``pip install -e .``) the line is
``pip install -e '.[lake]'``; from an installed wheel it is ``pip install 'streamer[lake]'`` (in a
clone, that would fetch another package of the name from the index).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from streamer.errors import MissingExtra

# Each extra's modules, as pyproject.toml's [project.optional-dependencies] installs them.
EXTRAS: dict[str, tuple[str, ...]] = {
    "lake": ("pyiceberg", "pyarrow"),
    "eval": ("sklearn", "matplotlib", "pyarrow"),
    "online": ("starlette", "uvicorn", "grpc"),
    "optimize": ("onnx", "sympy", "pyarrow"),
    "kv": ("redis", "aiohttp"),
    "spark": ("pyspark", "pyiceberg", "pyarrow"),
    "ray": ("ray", "pyiceberg", "pyarrow"),
}
SOURCE = Path(__file__).resolve().parent.parent  # the checkout's root, when streamer runs from one


def need(extra: str, what: str) -> None:
    """Raise :class:`MissingExtra` when a module of ``extra`` is not installed; ``what`` is the
    command or flag that needs it (``streamer serve``, ``--to-table``)."""
    missing = [m for m in EXTRAS[extra] if importlib.util.find_spec(m) is None]
    if missing:
        raise MissingExtra(what, extra, missing, install_line(extra))


def from_source(root: Path = SOURCE) -> bool:
    """Whether streamer runs from a source checkout: its package sits beside the project's own
    pyproject.toml (an editable install or a clone on the path), not in site-packages."""
    project = root / "pyproject.toml"
    return project.is_file() and 'name = "streamer"' in project.read_text(errors="replace")


def install_line(extra: str, root: Path = SOURCE) -> str:
    """``pip install -e '.[lake]'`` (with the folder to run it in, when that is not the current
    one) from a source checkout, else ``pip install 'streamer[lake]'``."""
    if not from_source(root):
        return f"pip install 'streamer[{extra}]'"
    line = f"pip install -e '.[{extra}]'"
    return line if Path.cwd().resolve() == root else f"{line} in {root}"
