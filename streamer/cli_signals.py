"""The command line's signals: the first SIGTERM or SIGINT asks for a graceful stop, a second exits at once."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from types import FrameType


def stop_event() -> threading.Event:
    """A long command's stop: set by the first SIGTERM or SIGINT (see :func:`on_signals`)."""
    stop = threading.Event()
    on_signals(stop.set)
    return stop


def on_signals(stop: Callable[[], None]) -> None:
    """First SIGTERM/SIGINT: graceful stop (flush, ack, commit). A second: exit at once.

    The second is left to the kernel's default action, not to a Python handler: Python runs
    handlers only between bytecodes, and a process stuck in a blocking librdkafka call (a commit
    to a coordinator that went away) must still die when told twice.
    """

    def first(signum: int, _frame: FrameType | None) -> None:
        logging.getLogger("streamer").info("signal %d: finishing the open batch, then exiting "
                                           "(send it again to exit at once)", signum)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        stop()

    signal.signal(signal.SIGTERM, first)
    signal.signal(signal.SIGINT, first)
