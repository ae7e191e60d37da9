"""Ending the process when a blocking librdkafka call outlives its deadline.

Some calls can block far past their timeout when a broker dies and comes back (a synchronous
offset commit, ``commit_transaction``; see librdkafka issues 3013, 3041, 4420). Python cannot
interrupt a C call, and a signal handler does not run until it returns, so a watchdog thread
exits the process instead: nothing past the last commit is lost, and the supervisor's restart
(with the same transactional.id, in exactly-once) aborts whatever was left open.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator

from streamer.errors import EXIT_WATCHDOG

log = logging.getLogger(__name__)
EXIT_CODE = EXIT_WATCHDOG  # 70, EX_SOFTWARE: the supervisor should restart us


@contextlib.contextmanager
def deadline(seconds: float, what: str) -> Iterator[None]:
    """Run the block; if it has not finished after ``seconds``, log and exit the process."""

    timer = threading.Timer(seconds, give_up, (what, seconds))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def give_up(what: str, seconds: float) -> None:
    """Log and exit the process (code 70): a librdkafka request or call got no answer in time."""
    log.critical("%s blocked for %.0f s: exiting (code %d) so that a restart recovers",
                 what, seconds, EXIT_CODE)
    logging.shutdown()
    os._exit(EXIT_CODE)
