"""One online server: the data plane over HTTP (uvicorn) and gRPC (grpc.aio) on one event loop,
each model's lane (online/lanes.py: its dispatcher's thread, loaded at start or on demand),
readiness after warm-up, and a stop that answers what it admitted.

Start: the routes listen at once (``/v2/health/live`` answers), the models served from the
start (the default one; every model without ``models.max_loaded``) warm up, then
``/v2/health/ready`` says ready. Stop (SIGTERM, SIGINT, or :meth:`OnlineServer.stop`): ready
turns false, new requests are refused (503, UNAVAILABLE), the requests already admitted are
scored and answered, the listeners close, and :meth:`run` returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import grpc
import uvicorn

from streamer.config import Config, for_model, model_entries
from streamer.config_sections import OnlineConfig
from streamer.errors import ConfigError
from streamer.extras import need
from streamer.observe.drift import DriftGauges
from streamer.online.cache import Cache, predictions_route
from streamer.online.dispatch import Dispatcher
from streamer.online.entity import EntityFeatures
from streamer.online.events import ScoreRoute
from streamer.online.grpc_service import GrpcTransport
from streamer.online.http import HttpTransport
from streamer.online.lanes import Lanes, Loaded, ordered
from streamer.online.meters import ModelsRegistry, OnlineMetrics
from streamer.online.plane import DataPlane
from streamer.online.repository_http import RepositoryApi
from streamer.online.served import ServedModel
from streamer.pipeline.serving import Serving
from streamer.stores.features import FeatureSource, feature_source
from streamer.stores.precomputed import PredictionStore

if TYPE_CHECKING:
    from streamer.online.jobs_http import JobsApi

log = logging.getLogger(__name__)
DRAIN_S = 30.0  # the longest a stop waits for admitted requests
CLOSE_S = 10.0  # the longest a model unloaded or stopped gives its challengers to publish
NO_SERVINGS: Mapping[str, Serving] = {}


def check_ports(o: OnlineConfig) -> None:
    """Refuse (ConfigError naming the key) a port another process listens on, before anything
    starts: the listeners bind without port reuse, so a second server is never started beside a
    first one on the same port. Binding again at start refuses a port taken in between."""
    for key, port in (("online.http_port", o.http_port), ("online.grpc_port", o.grpc_port)):
        if not port:  # http 0: a free one is chosen; grpc 0: no gRPC listener
            continue
        try:
            family, kind, _, _, address = socket.getaddrinfo(o.host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
            with socket.socket(family, kind) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the listeners do
                probe.bind(address)
                probe.listen()
        except OSError as exc:
            raise ConfigError(key, f"cannot listen on {o.host}:{port}: {exc.strerror or exc}") from None


def _jobs_api(cfg: Config, serving: Serving) -> JobsApi | None:
    """The jobs API when ``jobs.api_token`` is set (it needs the lake extra: its files are Parquet)."""
    if cfg.jobs.api_token is None:
        return None
    need("lake", "jobs.api_token (the jobs API)")
    from streamer.online.jobs_http import JobsApi  # the lake extra's

    return JobsApi(cfg, serving.runner.contract)


def _cache(cfg: Config, meters: OnlineMetrics) -> Cache | None:
    """The precomputed predictions (kv:) the server answers from; None without ``kv.address``
    (ConfigError when ``online.cache.mode`` needs them)."""
    if cfg.kv.address is None:
        if cfg.online.cache.mode != "fresh":
            raise ConfigError("online.cache.mode", f"{cfg.online.cache.mode!r} answers from the precomputed "
                                                   "predictions: set kv.address (the store), or use fresh")
        return None
    need("kv", "kv.address (precomputed predictions online)")
    return Cache(PredictionStore(cfg.kv), cfg.kv, cfg.online.cache, meters)


def _entity(cfg: Config, serving: Serving, source: FeatureSource | None) -> EntityFeatures | None:
    """Entity-only requests' features (``online.features``; ``source``: one given instead)."""
    if source is None:
        if cfg.online.features.kind == "none":
            return None
        need("kv", "online.features.kind (features fetched by entity id)")
        source = feature_source(cfg)
        if source is None:
            return None
    return EntityFeatures(source, cfg.online.features, serving.runner.contract)


class _Uvicorn(uvicorn.Server):
    """uvicorn without its own signal handling: the server's stop is this module's, and exits 0."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class OnlineServer:
    """Serves ``serving``'s model (the default) and every other model of the config's ``models``
    under its ``online`` section, each in its lane (online/lanes.py)."""

    def __init__(self, cfg: Config, serving: Serving, beside_stream: bool = False,
                 features: FeatureSource | None = None, *, servings: Mapping[str, Serving] = NO_SERVINGS,
                 load: Callable[[str], Serving] | None = None) -> None:
        """``beside_stream``: the serving is a running stream's, whose loop reloads it between its
        batches (the online side only scores, first); ``features``: the source of entity-only
        requests' features (default: ``online.features``'); ``servings``: other models loaded
        already (beside the stream: the stream's, never unloaded); ``load``: a model's serving,
        loaded on demand (None: only the models given are served)."""
        o = cfg.online
        self.cfg, self.serving, self._load, self._beside = cfg, serving, load, beside_stream
        # the group label, as the stream's series: one dashboard selects both; and each model's
        self.registry = ModelsRegistry(cfg.input.group_id)
        names = ordered(list(model_entries(cfg)), cfg.model.name)
        self._start: list[tuple[Loaded, Callable[[], None]]] = []  # the models served from the start, their warm-ups
        self.lanes = Lanes({n: for_model(cfg, n).model.version for n in names}, self._build,
                           max_loaded=cfg.models.max_loaded, metrics=lambda n: OnlineMetrics(self.registry.of(n)))
        self._stop_asked = threading.Event()  # a stop asked, before the loop runs or after it ended too
        default, warm = self._served(cfg.model.name, serving, beside_stream, close=False)
        self.model, self.dispatcher = default.model, default.dispatcher
        self.lanes.pin(cfg.model.name, default)
        self._start.append((default, warm))
        for name, other in servings.items():
            given, warm = self._served(name, other, beside_stream, close=not beside_stream)
            (self.lanes.pin if beside_stream else self.lanes.put)(name, given)
            self._start.append((given, warm))
        self.plane = DataPlane(self.model, self.dispatcher, timeout_ms=o.timeout_ms, lanes=self.lanes,
                               registry=self.registry)
        meters = self.dispatcher.metrics
        self.cache = _cache(cfg, meters)
        self.entity = _entity(cfg, serving, features)
        self.ready = self.model.readiness  # set when the model has warmed up and the listeners are open
        self.jobs = _jobs_api(cfg, serving)
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _served(self, name: str, serving: Serving, beside: bool, close: bool) -> tuple[Loaded, Callable[[], None]]:
        """Model ``name`` served online by ``serving``: its served model and dispatcher (not
        started), on its lane's meters, and its warm-up; ``close``: its serving is closed with its lane."""
        cfg, o = for_model(self.cfg, name), self.cfg.online
        meters = self.lanes.lane(name).metrics
        m = cfg.model
        drift = DriftGauges.of(m.drift_profile, serving.runner.contract.numeric_width, m.drift_window_rows,
                               meters.feature_psi, meters.feature_out_of_range)
        model = ServedModel(name, serving, drift)
        rows = o.max_size or cfg.batching.max_size
        dispatcher = Dispatcher(model.score, rows, cfg.batching.max_wait_ms if o.max_wait_ms is None else o.max_wait_ms,
                                o.max_queue_rows, between=(lambda: None) if beside else serving.poll, metrics=meters)

        def stop() -> None:
            dispatcher.stop(DRAIN_S)
            if close:
                serving.close(CLOSE_S)

        warm = (lambda: self._warm_beside(serving, rows)) if beside else serving.warm_up
        return Loaded(model, dispatcher, stop), warm

    def _build(self, name: str, metrics: OnlineMetrics) -> Loaded:
        """Model ``name`` loaded on demand (the loader's thread): its serving, warmed up, then its
        dispatcher started, then ready."""
        if self._load is None:
            raise ConfigError("models", f"model {name!r} is not served here")
        loaded, warm = self._served(name, self._load(name), beside=False, close=True)
        warm()
        loaded.dispatcher.start()
        loaded.model.set_ready(True)
        return loaded

    def _warm_beside(self, serving: Serving, rows: int) -> None:
        """Once the stream's start-up has warmed its serving (or a stop came first), warm the model
        up for online batches: one model call among the stream's (the priority lock)."""
        while not serving.warmed.wait(0.05):
            if self._stop_asked.is_set():
                return
        with serving.priority.hold(urgent=True):
            serving.runner.warm_up(rows)

    def stop(self) -> None:
        """Begin the stop (from any thread, or a signal handler); a stop before the server runs
        is kept, one after it ended does nothing."""
        self._stop_asked.set()
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            try:
                loop.call_soon_threadsafe(stop.set)
            except RuntimeError:  # the loop has ended: the server has stopped already
                pass

    def http_app(self) -> Any:
        """The HTTP application: the protocol's routes, ``/v1/score``, ``/v1/predictions`` and, with
        ``jobs.api_token``, ``/v1/jobs`` (online/jobs_http.py) and the repository extension
        (online/repository_http.py), on this server's data plane."""
        http = HttpTransport(self.plane, max_body_bytes=self.cfg.online.max_body_bytes)
        token = self.cfg.jobs.api_token
        jobs = [] if self.jobs is None else self.jobs.routes()
        if token is not None:
            jobs += RepositoryApi(self.lanes, token.value).routes()
        score = ScoreRoute(self.cfg, self.serving, self.plane, self.cache, self.entity)
        return http.app(more=[score.route(), predictions_route(self.cache, self.plane), *jobs])

    def run(self, install_signals: bool = True) -> int:
        """Serve until stopped, then answer what was admitted (for up to ``DRAIN_S``; rows left
        unanswered past it are logged); 0."""
        try:
            return asyncio.run(self._serve(install_signals))
        finally:
            if self.jobs is not None:
                self.jobs.close()

    async def _serve(self, install_signals: bool) -> int:
        o = self.cfg.online
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        if self._stop_asked.is_set():  # asked before the loop ran
            self._stop.set()
        if install_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._loop.add_signal_handler(sig, self.stop)
        for loaded, _ in self._start:
            loaded.dispatcher.start()
        await self._warm_stores()
        web = _Uvicorn(uvicorn.Config(self.http_app(), host=o.host, port=o.http_port, log_level="warning",
                                      lifespan="off"))
        async def listen() -> None:
            try:
                await web.serve()
            except SystemExit:  # uvicorn's way to say it could not start; it logged why (the port is taken)
                raise ConfigError("online.http_port", f"cannot listen on {o.host}:{o.http_port} "
                                                      "(the log above says why)") from None

        http_task = asyncio.create_task(listen())
        rpc: Any = None
        try:
            if o.grpc_port:
                rpc = grpc.aio.server(options=[("grpc.max_receive_message_length", o.max_body_bytes),
                                               ("grpc.max_send_message_length", -1),  # answers of any size
                                               ("grpc.so_reuseport", 0)])  # a taken port is refused, not shared
                rpc.add_generic_rpc_handlers((GrpcTransport(self.plane).handler(),))
                try:
                    rpc.add_insecure_port(f"{o.host}:{o.grpc_port}")
                except RuntimeError:  # grpc's word for a port it cannot bind
                    raise ConfigError("online.grpc_port", f"cannot listen on {o.host}:{o.grpc_port}: "
                                                          "address already in use") from None
                await rpc.start()
            for _, warm in self._start:
                await asyncio.get_running_loop().run_in_executor(None, warm)
            while not web.started:  # uvicorn says it listens by a flag only
                if http_task.done():
                    await http_task  # its ConfigError
                await asyncio.sleep(0.01)
        except BaseException:  # a start-up error: the listeners closed in this loop, before it closes
            web.should_exit = True
            if rpc is not None:
                await rpc.stop(None)
            with contextlib.suppress(Exception):  # its error, raised already, or none
                await http_task
            for loaded, _ in self._start:
                await asyncio.get_running_loop().run_in_executor(None, loaded.dispatcher.stop, 0.0)
            await asyncio.get_running_loop().run_in_executor(None, self.lanes.stop)
            raise
        for loaded, _ in self._start:
            loaded.model.set_ready(True)
        log.info("online: %s version %s ready on http://%s:%d%s", self.model.name, self.model.version, o.host,
                 o.http_port, (f" and grpc {o.host}:{o.grpc_port}" if o.grpc_port else "")
                 + (", jobs API at /v1/jobs" if self.jobs is not None else ""))
        await self._stop.wait()
        log.info("online: stopping: new requests are refused, admitted ones answered")
        await asyncio.get_running_loop().run_in_executor(None, self.lanes.stop)  # each answers what it admitted
        for loaded in self.lanes.all_loaded():
            if loaded.dispatcher.admission.queued_rows:
                log.error("online: %s: %d admitted rows were not answered within %.0f s of the stop",
                          loaded.model.name, loaded.dispatcher.admission.queued_rows, DRAIN_S)
        web.should_exit = True
        if rpc is not None:
            await rpc.stop(1.0)
        await http_task
        await self._close_stores()
        return 0

    async def _warm_stores(self) -> None:
        """Open the stores' connections (as many as may wait on each at once) before the first
        request; a store that fails here is logged, and the server starts anyway: its answers degrade."""
        o = self.cfg.online
        warming = [] if self.cache is None else [self.cache.store.warm(o.cache.max_in_flight)]
        if self.entity is not None:
            warming.append(self.entity.source.warm(o.features.max_in_flight))
        for result in await asyncio.gather(*warming, return_exceptions=True):
            if isinstance(result, Exception):
                log.warning("online: a store did not answer at start-up: %s", result)

    async def _close_stores(self) -> None:
        """Close the store's and the feature source's clients (their failures are logged: the server stops anyway)."""
        closing = [] if self.cache is None else [self.cache.close()]
        if self.entity is not None:
            closing.append(self.entity.source.close())
        for result in await asyncio.gather(*closing, return_exceptions=True):
            if isinstance(result, Exception):
                log.warning("online: closing a store's client: %s", result)
