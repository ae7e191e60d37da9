"""Debian's prometheus (installed by `make test`) scraping given targets every second, for the dashboard and alert tests."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import yaml

from tests.conftest import free_port


@contextlib.contextmanager
def running(folder: Path, jobs: Mapping[str, Sequence[str]], rules: Sequence[Path] = ()) -> Iterator[str]:
    """A Prometheus scraping each job's ``host:port`` targets (``rules``: its rule files, evaluated
    every second), its data and log in ``folder``; its URL. Stopped on leaving."""
    binary = shutil.which("prometheus")
    assert binary, "no prometheus binary: `make test` installs Debian's prometheus package"
    port = free_port()
    config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
              "rule_files": [str(r) for r in rules],
              "scrape_configs": [{"job_name": job, "static_configs": [{"targets": list(targets)}]}
                                 for job, targets in jobs.items()]}
    (folder / "prometheus.yml").write_text(yaml.safe_dump(config))
    with (folder / "prometheus.log").open("wb") as log:
        proc = subprocess.Popen([binary, f"--config.file={folder / 'prometheus.yml'}",
                                 f"--storage.tsdb.path={folder / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=log, stderr=subprocess.STDOUT)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(30)
