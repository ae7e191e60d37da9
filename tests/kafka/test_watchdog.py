"""The watchdog ends a process stuck in a call, and leaves a prompt one alone."""

from __future__ import annotations

import subprocess
import sys

from streamer.kafka.watchdog import EXIT_CODE, deadline

STUCK = """
import time
from streamer.kafka.watchdog import deadline
with deadline(0.3, "a stuck commit"):
    time.sleep(30)
"""


def test_a_stuck_call_ends_the_process_with_the_restart_code() -> None:
    proc = subprocess.run([sys.executable, "-c", STUCK], capture_output=True, text=True, timeout=20)
    assert proc.returncode == EXIT_CODE
    assert "a stuck commit blocked" in proc.stderr


def test_a_prompt_call_is_left_alone() -> None:
    with deadline(5, "a prompt call"):
        value = sum(range(10))
    assert value == 45
