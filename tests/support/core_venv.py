"""A real virtual environment holding streamer (editable, from this checkout) and its runtime
dependencies alone, none of the optional extras: what a user has after ``pip install -e .``.

Built without the network: the runtime's distributions are the ones ``make test`` installed in
the test interpreter's environment, linked into the new one (packages and their ``.dist-info``),
then pip installs streamer into it with ``--no-index``, so pip itself checks that the runtime
dependencies pyproject.toml declares are all there.
"""

from __future__ import annotations

import importlib.metadata as md
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
BUILD = ("setuptools",)  # pyproject.toml's build backend (in the dev extra), for pip's --no-build-isolation


def runtime_distributions() -> dict[str, md.Distribution]:
    """streamer's runtime requirements and theirs, by name, with the extras each was asked with;
    the optional extras' requirements (``extra == ...``) left out."""
    found: dict[str, md.Distribution] = {}

    def walk(text: str, extras: tuple[str, ...]) -> None:
        req = Requirement(text)
        if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in extras or ("",)):
            return
        dist = md.distribution(req.name)
        name = req.name.lower().replace("_", "-")
        if name in found and not req.extras:
            return
        found[name] = dist
        for sub in dist.requires or []:
            walk(sub, tuple(req.extras))

    for text in md.distribution("streamer").requires or []:
        walk(text, ())
    for name in BUILD:
        found[name] = md.distribution(name)
    return found


def top_levels(dist: md.Distribution) -> set[str]:
    """The names a distribution puts at the top of site-packages (packages, modules, .dist-info)."""
    return {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")} - {"__pycache__"}


def build(dest: Path) -> Path:
    """The environment at ``dest``; returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(dest)], check=True, timeout=120)
    python = dest / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True, timeout=60).stdout.strip())
    for dist in runtime_distributions().values():
        for top in top_levels(dist):
            link, target = site / top, Path(str(dist.locate_file(top)))
            if not link.exists() and target.exists():
                link.symlink_to(target)
    pip = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-index",
                          "--no-build-isolation", "-e", str(ROOT)], capture_output=True, text=True, timeout=300,
                         cwd=dest)
    assert pip.returncode == 0, f"pip could not install streamer into the core environment: {pip.stderr}"
    return python
