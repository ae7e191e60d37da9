"""`streamer replay` or `score` into the lake or the key-value store, SIGKILLed as a commit begins, for the exactly-once tests only.

    python -m tests.support.lake_kill N replay --config CONFIG ... --to-table NAME

The process kills itself with SIGKILL when its sink is asked for commit N+1: N commits are made,
and the files of the next are written (row groups flushed, files closed) but never made visible
(a key-value run's rows are written, its progress never recorded).
A fixed point, not a race with a timer: the run is as far along whatever the machine's speed.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from streamer import cli
from streamer.lake.iceberg import IcebergSink
from streamer.lake.parquet import ParquetSink
from streamer.stores.sink import KvSink


def plant(after: int) -> None:
    made = [0]
    for cls in (IcebergSink, ParquetSink, KvSink):
        def commit(self: Any, covered: Any, _original: Any = cls.commit) -> None:
            if made[0] == after:
                if isinstance(self, IcebergSink | ParquetSink):
                    self._files.close()  # the next commit's files, whole on disk, named by no commit
                os.kill(os.getpid(), signal.SIGKILL)
            made[0] += 1
            _original(self, covered)

        cls.commit = commit  # type: ignore[method-assign]


if __name__ == "__main__":
    plant(int(sys.argv[1]))
    sys.exit(cli.main(sys.argv[2:]))
