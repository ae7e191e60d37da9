"""Expected start-up retries of librdkafka, logged at INFO; anything else keeps its warning.

A cluster that is still starting (a development broker started beside the processor) and a
group coordinator that is loading or moving make librdkafka retry by itself: connections
refused, ``Coordinator load in progress``, ``Not coordinator``. Those are logged at INFO so that a
healthy start-up shows no warnings; a broker unreachable after :data:`STARTUP_GRACE_S`, and
every other error, still warns.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from confluent_kafka import KafkaError

# A broker that refuses connections this soon after start-up is most likely still starting.
STARTUP_GRACE_S = 60.0
_STARTED = time.monotonic()  # the process's start, as far as the grace is concerned

# What librdkafka retries by itself and is expected while a cluster starts or a group forms:
# the group coordinator loading its partitions or moving (at any time; librdkafka finds it
# again), and a broker not reachable yet (during STARTUP_GRACE_S only; later it is an outage).
COORDINATOR_RETRIES = frozenset({KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.NOT_COORDINATOR,
                                 KafkaError.COORDINATOR_NOT_AVAILABLE})
UNREACHABLE = frozenset({KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE})
# The same, as they appear in librdkafka's own log lines (which carry no error code).
_COORDINATOR_TEXT = ("coordinator load in progress", "not coordinator", "coordinator not available")
_UNREACHABLE_TEXT = ("connection refused", "brokers are down", "failed to resolve", "connect to ipv")


def retry_level(err: KafkaError | str, since_start_s: float | None = None) -> int:
    """The level to log a librdkafka error or log line at: INFO for an expected start-up retry
    (see COORDINATOR_RETRIES and UNREACHABLE), else WARNING. ``since_start_s``: seconds since
    the process started (default: measured).

    Example: ``Broker: Coordinator load in progress`` is INFO at any time; ``Connection refused``
    is INFO 5 s after start and WARNING 5 minutes after.
    """
    since = time.monotonic() - _STARTED if since_start_s is None else since_start_s
    if isinstance(err, KafkaError):
        coordinator, unreachable = err.code() in COORDINATOR_RETRIES, err.code() in UNREACHABLE
    else:
        text = err.lower()
        coordinator = any(t in text for t in _COORDINATOR_TEXT)
        unreachable = any(t in text for t in _UNREACHABLE_TEXT)
    expected = coordinator or (unreachable and since < STARTUP_GRACE_S)
    return logging.INFO if expected else logging.WARNING


class LibrdkafkaLog:
    """librdkafka's log lines (its ``logger`` setting) into the ``librdkafka`` Python logger, an
    expected start-up retry at INFO (:func:`retry_level`) rather than librdkafka's ERROR/WARNING."""

    def __init__(self, logger: logging.Logger, since_start: Callable[[], float] | None = None) -> None:
        self.logger = logger
        self._since_start = since_start or (lambda: time.monotonic() - _STARTED)

    def log(self, level: int, msg: str, *args: object) -> None:
        """Called by confluent-kafka as ``log(level, "%s [%s] %s", facility, client, text)``."""
        if logging.WARNING <= level < logging.CRITICAL and \
                retry_level(" ".join(map(str, args)), self._since_start()) == logging.INFO:
            level = logging.INFO
        self.logger.log(level, msg, *args)
