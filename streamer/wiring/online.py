"""The online server's house: the config's models served alone (`streamer serve`), or beside the stream on the stream's serving (`streamer run` with `online.enabled`).

Every model of ``models`` is served at ``/v2/models/<name>``: without ``models.max_loaded`` each
is loaded and checked at start (a bad one refused on its own key); with it, the default model at
start and the others on demand (wiring/models.py builds each house).

Beside the stream, one model is in memory and one serving scores both (one load, one reload,
one breaker), online batches first (pipeline/priority.py); the stream's loop reloads the model
between its batches. A stop stops both; an online server that cannot start (its port taken)
stops the stream, and the run ends with its error.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from streamer.config import Config, model_entries
from streamer.pipeline.serving import Serving
from streamer.processor import Processor
from streamer.wiring.models import house_of
from streamer.wiring.stream import build_processor

if TYPE_CHECKING:
    from streamer.online.server import OnlineServer

JOIN_S = 60.0  # the longest the stream's end waits for the online server's drain


def online_server(cfg: Config) -> OnlineServer:
    """``cfg``'s models served alone: each checked as at the stream's start-up, with its fallback
    and challengers (Kafka only for their shadow predictions)."""
    from streamer.online.server import OnlineServer, check_ports  # the online extra's

    check_ports(cfg.online)  # a taken port is refused before the model loads
    return OnlineServer(cfg, house_of(cfg, cfg.model.name).serving, servings=_at_start(cfg), load=_loader(cfg))


def _at_start(cfg: Config) -> dict[str, Serving]:
    """The models other than the default loaded at start: every one without ``models.max_loaded``."""
    if cfg.models.max_loaded:
        return {}
    return {name: house_of(cfg, name).serving for name in model_entries(cfg) if name != cfg.model.name}


def _loader(cfg: Config) -> Callable[[str], Serving]:
    """A model's serving, loaded on demand (its house checked as at start-up)."""
    return lambda name: house_of(cfg, name).serving


class StreamAndOnline:
    """A processor and an online server on its serving: run, stopped and reloaded as one."""

    def __init__(self, processor: Processor, online: OnlineServer) -> None:
        self.processor, self.online = processor, online
        self._failed: list[BaseException] = []

    def run(self) -> None:
        """Serve online on a thread while the stream runs on this one; raise what stopped the
        online server (the stream stopped with it)."""
        thread = threading.Thread(target=self._serve_online, name="online", daemon=True)
        thread.start()
        try:
            self.processor.run()
        finally:
            self.online.stop()
            thread.join(JOIN_S)
        if self._failed:
            raise self._failed[0]

    def _serve_online(self) -> None:
        try:
            self.online.run(install_signals=False)
        except BaseException as exc:  # noqa: BLE001 - raised again in run(), after the stream stops
            self._failed.append(exc)
            self.processor.stop()

    def stop(self) -> None:
        """Signal-safe: both finish (the online server answers what it admitted)."""
        self.online.stop()
        self.processor.stop()

    def reload(self) -> None:
        self.processor.reload()


def running(cfg: Config, stopping: Callable[[], bool] = lambda: False) -> Processor | StreamAndOnline:
    """What ``streamer run`` runs: the processor, and beside it the online server when
    ``online.enabled`` (``stopping``: a stop signal came during start-up)."""
    if not cfg.online.enabled:
        return build_processor(cfg, stopping=stopping)
    from streamer.online.server import OnlineServer, check_ports  # the online extra's

    check_ports(cfg.online)  # a taken port is refused before the stream starts
    processor = build_processor(cfg, stopping=stopping)

    shared = processor.servings  # the stream's models: one load each, never unloaded
    return StreamAndOnline(processor, OnlineServer(cfg, processor.serving, beside_stream=True,
                                                   servings={n: s for n, s in shared.items() if n != cfg.model.name},
                                                   load=_loader(cfg)))
