"""The models online: each model of the repository in a lane of its own (its served model, its
dispatcher and admission, its meters), loaded at start, on demand, or by the repository API, and
kept within ``models.max_loaded``.

A lane is READY (loaded, warmed up, answering), LOADING, or UNAVAILABLE with its reason (not
loaded yet, unloaded, its load failed). Loads and unloads run one at a time on a thread of their
own, never on the event loop: a model's load runs its warm-up before it answers, and first
unloads the least recently used lanes while the loaded ones (and the one loading) would be more
than ``max_loaded`` (0: no bound). Pinned lanes (the default model, whose serving ``/v1/score``
uses; beside the stream, the stream's models) are never unloaded and count toward the bound.

A request for a model that is not loaded loads it and waits for it within its deadline (past it:
503 ``expired``); one for a model unloaded by the API is refused (503) until the API loads it
again, as Triton answers a model unloaded explicitly. Unloading answers what the lane admitted.

Worked example: 20 models, ``max_loaded`` 5, the default pinned. Requests for m1..m4 load them
(5 loaded); one for m5 unloads the least recently used of m1..m4 first, then loads and warms m5
up and answers; never more than 5 are in memory.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from streamer.errors import Refused
from streamer.online.dispatch import Dispatcher
from streamer.online.meters import OnlineMetrics

log = logging.getLogger(__name__)
READY, LOADING, UNAVAILABLE = "READY", "LOADING", "UNAVAILABLE"


@dataclass(frozen=True, slots=True)
class Loaded:
    """A loaded model: what answers its requests, its dispatcher (started), and what frees it
    (its dispatcher stopped once its admitted requests are answered, its serving closed)."""

    model: Any  # an OnlineModel (online/plane.py)
    dispatcher: Dispatcher
    close: Callable[[], None]


Build = Callable[[str, OnlineMetrics], Loaded]  # a model loaded, warmed up, its dispatcher started


class Lane:
    """One model online: its meters always, its loaded model while loaded."""

    def __init__(self, name: str, version: str, metrics: OnlineMetrics, pinned: bool) -> None:
        self.name, self.version, self.metrics, self.pinned = name, version, metrics, pinned
        self.loaded: Loaded | None = None
        self.state, self.reason = UNAVAILABLE, "not loaded"
        self.unloaded = False  # by the repository API: refused until loaded again
        self.used = 0.0  # when a request last asked for it (the least recently used is unloaded first)
        self.loading: concurrent.futures.Future[Loaded] | None = None

    def entry(self) -> dict[str, str]:
        """Its line of the repository index (Triton's shape)."""
        version = self.loaded.model.version if self.loaded is not None else self.version
        return {"name": self.name, "version": version, "state": self.state,
                "reason": "" if self.state == READY else self.reason}


class Lanes:
    """Every model's lane; ``versions``: each model's configured version, in order, the default first."""

    def __init__(self, versions: Mapping[str, str], build: Build, *, max_loaded: int = 0,
                 metrics: Callable[[str], OnlineMetrics] = lambda name: OnlineMetrics(),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._build, self.max_loaded, self._clock = build, max_loaded, clock
        self.names: tuple[str, ...] = tuple(versions)
        self.default = self.names[0]
        self._lanes = {name: Lane(name, version, metrics(name), False) for name, version in versions.items()}
        self._lock = threading.Lock()  # the lanes' states; loads and unloads are ordered by the one thread
        self._loader = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="online-load")

    # ---- reading -----------------------------------------------------------------------------

    def lane(self, name: str) -> Lane:
        """Model ``name``'s lane; :class:`Refused` 404 naming the models for another name."""
        lane = self._lanes.get(name)
        if lane is None:
            raise Refused(404, f"unknown model {name!r}: the models are {', '.join(sorted(self.names))}")
        return lane

    def known(self, name: str) -> bool:
        return name in self._lanes

    def loaded(self) -> list[str]:
        """The models in memory (or loading), by name."""
        with self._lock:
            return sorted(n for n, lane in self._lanes.items() if lane.loaded is not None or lane.state == LOADING)

    def index(self, ready_only: bool = False) -> list[dict[str, str]]:
        """Every model with its state (the repository index), by name."""
        with self._lock:
            entries = [lane.entry() for _, lane in sorted(self._lanes.items())]
        return [e for e in entries if e["state"] == READY] if ready_only else entries

    def all_loaded(self) -> list[Loaded]:
        with self._lock:
            return [lane.loaded for lane in self._lanes.values() if lane.loaded is not None]

    # ---- loading -----------------------------------------------------------------------------

    def pin(self, name: str, loaded: Loaded) -> None:
        """``loaded`` is model ``name``'s for good: never unloaded (the default, the stream's)."""
        with self._lock:
            lane = self.lane(name)
            lane.loaded, lane.pinned, lane.state, lane.used = loaded, True, READY, self._clock()

    def put(self, name: str, loaded: Loaded) -> None:
        """``loaded`` (built at start) is model ``name``'s, unloaded as any other."""
        with self._lock:
            lane = self.lane(name)
            lane.loaded, lane.state, lane.used = loaded, READY, self._clock()

    async def ready_lane(self, name: str, deadline: float) -> Loaded:
        """Model ``name`` loaded, waiting for its load (off the loop) until ``deadline`` (the
        clock's time); :class:`Refused`: 404 another name, 503 unloaded, expired, or a failed load."""
        lane = self.lane(name)
        with self._lock:
            loaded = lane.loaded
            if loaded is not None and lane.state == READY:
                lane.used = self._clock()
                return loaded
            if lane.unloaded:
                raise Refused(503, f"model {name!r} is unloaded: POST /v2/repository/models/{name}/load "
                                   "loads it again", 1.0, why="unloaded")
        future = asyncio.wrap_future(self.load(name, asked=False))
        try:
            return await asyncio.wait_for(asyncio.shield(future), max(deadline - self._clock(), 0.0))
        except TimeoutError:
            raise Refused(503, f"expired: model {name!r} was still loading at the request's deadline", 1.0,
                          why="expired") from None
        except Refused:
            raise
        except Exception as exc:  # noqa: BLE001 - the model's load failure is the answer
            raise Refused(503, f"model {name!r} cannot be loaded: {exc}", 1.0, why="load") from None

    def load(self, name: str, asked: bool = True) -> concurrent.futures.Future[Loaded]:
        """Load model ``name`` (on the loader's thread; one load of it at a time); ``asked``: by
        the repository API, which also undoes an unload."""
        with self._lock:
            lane = self.lane(name)
            if asked:
                lane.unloaded = False
            if lane.loading is not None:
                return lane.loading
            if lane.loaded is not None:
                done: concurrent.futures.Future[Loaded] = concurrent.futures.Future()
                done.set_result(lane.loaded)
                return done
            if lane.unloaded:
                raise Refused(503, f"model {name!r} is unloaded", 1.0, why="unloaded")
            lane.state, lane.reason = LOADING, "loading"
            lane.loading = self._loader.submit(self._load, lane)
            return lane.loading

    def _load(self, lane: Lane) -> Loaded:
        try:
            self._make_room(lane)
            loaded = self._build(lane.name, lane.metrics)
        except BaseException as exc:
            with self._lock:
                lane.state, lane.reason, lane.loading = UNAVAILABLE, f"load failed: {exc}", None
            log.warning("online: model %s did not load: %s", lane.name, exc)
            raise
        with self._lock:
            lane.loaded, lane.state, lane.reason, lane.loading = loaded, READY, "", None
            lane.used = self._clock()
        log.info("online: model %s loaded (%d in memory)", lane.name, len(self.loaded()))
        return loaded

    def _make_room(self, coming: Lane) -> None:
        """Unload the least recently used lanes until ``coming`` fits within ``max_loaded``."""
        if not self.max_loaded:
            return
        while True:
            with self._lock:
                held = [lane for lane in self._lanes.values() if lane.loaded is not None and lane is not coming]
                if len(held) < self.max_loaded:
                    return
                free = [lane for lane in held if not lane.pinned]
                if not free:
                    return  # only pinned models: the bound cannot be kept below them
                victim = min(free, key=lambda lane: lane.used)
            self._unload(victim, "unloaded: the least recently used, for " + coming.name)

    def unload(self, name: str) -> concurrent.futures.Future[None]:
        """Unload model ``name`` (the repository API) once its admitted requests are answered;
        it answers 503 until loaded again. :class:`Refused` 409 for a pinned model."""
        lane = self.lane(name)
        if lane.pinned:
            raise Refused(409, f"model {name!r} stays loaded: it is the default model or the stream's")
        with self._lock:
            lane.unloaded = True
        return self._loader.submit(self._unload, lane, "unloaded")

    def _unload(self, lane: Lane, reason: str) -> None:
        with self._lock:
            loaded, lane.loaded = lane.loaded, None
            lane.state, lane.reason = UNAVAILABLE, reason
        if loaded is None:
            return
        loaded.model.set_ready(False)
        loaded.close()
        del loaded
        gc.collect()  # the model's session, held in cycles of its serving: its memory back now
        log.info("online: model %s %s", lane.name, reason)

    def stop(self) -> None:
        """Every loaded model stopped (their admitted requests answered); no more loads."""
        self._loader.shutdown(wait=True, cancel_futures=True)
        for loaded in self.all_loaded():
            loaded.model.set_ready(False)
        for loaded in self.all_loaded():
            loaded.close()


def ordered(names: Sequence[str], default: str) -> list[str]:
    """``names`` with ``default`` first."""
    return [default, *(n for n in names if n != default)]
