"""`streamer worker` with a fault planted at a lake commit, for the jobs' tests only.

    python -m tests.support.worker_faults kill N TOKEN worker --config CONFIG ...
    python -m tests.support.worker_faults gate N FILE worker --config CONFIG ...

``kill``: the first worker process to claim TOKEN (a file created exclusively) kills itself with
SIGKILL when its sink is asked for commit N+1 of a run: N commits are made and the files of the
next are written but never made visible; the other workers commit as usual. ``gate``: every
commit after the first N waits until FILE exists. Fixed points, not races with a timer.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from streamer import cli
from streamer.lake.iceberg import IcebergSink
from streamer.lake.parquet import ParquetSink


def plant(mode: str, after: int, path: Path) -> None:
    made = [0]
    for cls in (IcebergSink, ParquetSink):
        def commit(self: Any, covered: Any, _original: Any = cls.commit) -> None:
            if made[0] >= after:
                if mode == "kill" and made[0] == after and _claim(path):
                    self._files.close()
                    os.kill(os.getpid(), signal.SIGKILL)
                while mode == "gate" and not path.exists():
                    time.sleep(0.05)  # a fault: the commit is held until the test opens the gate
            made[0] += 1
            _original(self, covered)

        cls.commit = commit  # type: ignore[method-assign]


def _claim(token: Path) -> bool:
    try:
        os.close(os.open(token, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False


if __name__ == "__main__":
    plant(sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]))
    sys.exit(cli.main(sys.argv[4:]))
