"""`streamer run --workers N`: N processes on one host, each its own member of the consumer group.

Threads do not help under the GIL; processes do, and scaling past one core is the same Kafka
consumer-group protocol as scaling past one machine. Each worker is a whole processor (consumer,
producer, model session) started as ``streamer run --config FILE --worker-index I``, and takes a
distinct ``group.instance.id``, ``transactional.id`` and metrics port (:func:`for_worker`).

The supervisor forwards SIGTERM and SIGINT to every worker and exits 0 once all stopped cleanly.
A worker that dies is started again after a back-off (1 s, doubling to 30 s); if workers die
``max_deaths`` times within ``window_s``, the supervisor stops the others and exits 4, so that its
own supervisor (systemd, Kubernetes) sees the failure. A worker that exits 2 (a config error)
is not restarted: that cannot heal.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from streamer.config import Config, transactional_id
from streamer.errors import EXIT_CONFIG, EXIT_WORKERS

log = logging.getLogger(__name__)


def for_worker(cfg: Config, index: int) -> Config:
    """Worker ``index``'s config: its own static member id, transactional id and metrics port."""
    kafka = dict(cfg.kafka)
    instance = kafka.get("group.instance.id")
    if isinstance(instance, str):
        kafka["group.instance.id"] = f"{instance}-{index}"
    port = cfg.metrics.port + index if cfg.metrics.port else 0
    return replace(cfg, kafka=kafka, metrics=replace(cfg.metrics, port=port),
                   processing=replace(cfg.processing, transactional_id=f"{transactional_id(cfg)}-w{index}"))


def spawn_worker(config_path: str, index: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "streamer", "run", "--config", config_path,
                             "--worker-index", str(index)])


class Supervisor:
    """Keeps ``n`` workers running until stopped; see the module docstring."""

    def __init__(self, n: int, spawn: Callable[[int], Any], *, max_deaths: int = 5, window_s: float = 60.0,
                 backoff_s: float = 1.0, backoff_max_s: float = 30.0, stop_timeout_s: float = 120.0,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        self.n, self._spawn = n, spawn
        self._max_deaths, self._window_s = max_deaths, window_s
        self._backoff_s, self._backoff_max_s, self._stop_timeout_s = backoff_s, backoff_max_s, stop_timeout_s
        self._clock, self._sleep = clock, sleep
        self._stopping = False
        self.workers: dict[int, Any] = {}
        self._deaths: list[float] = []
        self._restart_at: dict[int, float] = {}
        self._backoff: dict[int, float] = {}

    def stop(self) -> None:
        """Ask every worker to finish (signal-safe: only flips a flag)."""
        self._stopping = True

    def forward(self, signum: int) -> None:
        """Pass a signal on to every running worker (SIGHUP: reload the model)."""
        for p in self.workers.values():
            if p is not None and p.poll() is None:
                p.send_signal(signum)

    def run(self) -> int:
        self.workers = {i: self._spawn(i) for i in range(self.n)}
        log.info("started %d workers", self.n)
        while not self._stopping:
            failed = self._watch()
            if failed is not None:
                self._stop_all()
                return failed
            self._sleep(0.2)
        return self._stop_all()

    def _watch(self) -> int | None:
        """Restart dead workers when their back-off is over; an exit code when giving up."""
        now = self._clock()
        for i, proc in self.workers.items():
            code = proc.poll() if proc is not None else None
            if proc is None or code is None:
                continue
            self.workers[i] = None
            if code == EXIT_CONFIG:
                log.error("worker %d exited with a config error: not restarting", i)
                return EXIT_CONFIG
            self._deaths = [t for t in self._deaths if now - t < self._window_s] + [now]
            if len(self._deaths) >= self._max_deaths:
                log.error("workers died %d times within %.0f s: giving up", len(self._deaths), self._window_s)
                return EXIT_WORKERS
            backoff = min(self._backoff.get(i, self._backoff_s / 2) * 2, self._backoff_max_s)
            self._backoff[i], self._restart_at[i] = backoff, now + backoff
            log.warning("worker %d exited with %d: restarting in %.1f s", i, code, backoff)
        for i, at in list(self._restart_at.items()):
            if now >= at:
                del self._restart_at[i]
                self.workers[i] = self._spawn(i)
        return None

    def _stop_all(self) -> int:
        """SIGTERM every worker, wait for each; 0 when all stopped cleanly."""
        alive = {i: p for i, p in self.workers.items() if p is not None and p.poll() is None}
        for p in alive.values():
            p.send_signal(signal.SIGTERM)
        codes = []
        for i, p in alive.items():
            try:
                codes.append(p.wait(timeout=self._stop_timeout_s))
            except subprocess.TimeoutExpired:
                log.error("worker %d did not stop within %.0f s: killing it", i, self._stop_timeout_s)
                p.kill()
                codes.append(p.wait())
        return 0 if all(c == 0 for c in codes) else 1
