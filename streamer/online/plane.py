"""The online data plane: the served models' health, metadata and inference, whatever the transport.

HTTP and gRPC (online/http.py, online/grpc_service.py) each translate their wire into one
:class:`InferRequest` and the plane's :class:`InferResponse` back into their wire; everything
between is here, once: which model a request names, its deadline, its inputs checked into the
model's columns, its rows batched and scored by the dispatcher, the outputs it asked for, and
every way it is not answered, one :class:`Refused` with its status. Each request is metered
once, where it ends (:meth:`DataPlane.ended`): by transport and status, and its seconds, on the
meters of the model it names (the default model's for a name no model has).

Several models (``lanes``: online/lanes.py): a request names its model, and goes to that model's
lane: its dispatcher, admission and meters; a model not loaded is loaded first, within the
request's deadline. Without lanes the plane serves its one model.

Every answer carries its hops in its parameters, in milliseconds: ``queue_ms`` (from admission
to its batch's model call), ``model_ms`` (the call) and ``encode_ms`` (from the call's end to the
answer's body, taken just before the body's last serialization); each is observed on
``streamer_online_hop_seconds{hop}``.

Refusals: 400 (the protocol or the model's inputs refuse the request, or an output it asks for
is unknown), 404 (no such model or version), 413 (more rows than the queue holds), 503 with
Retry-After (not ready, shed at admission, expired while it waited or its model loaded, the
model unloaded), 500 (the model failed).

A request's deadline, one rule for every transport: from when it has arrived whole,
``parameters.timeout`` (microseconds, what tritonclient's ``timeout=`` sends), else what the
wire asks (HTTP's ``X-Request-Timeout-Ms``), else ``online.timeout_ms``; never later than
``online.timeout_ms`` nor than the wire's own deadline (gRPC's). Worked example with ``online.timeout_ms`` 1000: a
gRPC call with a 300 ms deadline and ``parameters.timeout`` 500000 must be answered within
300 ms; an HTTP request with ``parameters.timeout`` 2000000 within 1000 ms.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from prometheus_client import CollectorRegistry

from streamer.errors import BadRequest, Refused
from streamer.model.signature import Columns
from streamer.online.dispatch import Answer, Dispatcher
from streamer.online.lanes import Lanes
from streamer.online.meters import OnlineMetrics
from streamer.pipeline.records import Scored

SERVER = {"name": "streamer", "version": "1", "extensions": ["binary_tensor_data", "model_repository"]}  # the server's metadata
NO_PARAMETERS: Mapping[str, Any] = {}


@dataclass(frozen=True, slots=True)
class InferRequest:
    """An inference request as each transport decodes it: the model (and version, "": any) it
    names, its input tensors by name, the outputs asked for (empty: all), which of them go back
    as binary (HTTP), its id and its parameters."""

    model: str
    version: str
    inputs: dict[str, np.ndarray]
    outputs: tuple[str, ...] = ()
    binary: frozenset[str] = frozenset()
    binary_default: bool = False
    id: str | None = None
    parameters: Mapping[str, Any] = field(default_factory=dict)

    def wants_binary(self, name: str) -> bool:
        return name in self.binary or self.binary_default


@dataclass(frozen=True, slots=True)
class InferResponse:
    """An inference answer as each transport encodes it: the served model's name, the version that
    scored, the outputs by name, the request's id, the parameters (the model file's digest,
    whether the fallback answered, and why; the hops' milliseconds), and when its model call
    ended (the plane's clock: the encode hop starts there)."""

    model: str
    version: str
    outputs: Mapping[str, np.ndarray]
    id: str | None
    parameters: dict[str, str | bool | float]
    done_at: float | None = None


class OnlineModel(Protocol):
    """The served model as the protocol sees it: its tensors, and a request's inputs checked into
    the columns the dispatcher scores."""

    name: str

    @property
    def version(self) -> str: ...

    def ready(self) -> bool: ...

    def set_ready(self, ready: bool) -> None: ...

    def metadata(self) -> dict[str, Any]: ...

    def columns(self, inputs: dict[str, np.ndarray]) -> Columns:
        """The model's input columns of a request's tensors; BadRequest naming the tensor when
        one is missing, unknown, of another datatype or shape."""
        ...


class DataPlane:
    """Health, metadata and inference of the served models: ``model``, the default one, its rows
    scored by ``dispatcher``, and with ``lanes`` every model of the repository."""

    def __init__(self, model: OnlineModel, dispatcher: Dispatcher, *, timeout_ms: int,
                 clock: Callable[[], float] = time.monotonic, lanes: Lanes | None = None,
                 registry: CollectorRegistry | None = None) -> None:
        """``timeout_ms``: a request's time to answer when it asks none, and the most it may ask;
        ``registry``: what ``/metrics`` exposes (default: the dispatcher's meters')."""
        self.model, self.dispatcher, self.clock, self.lanes = model, dispatcher, clock, lanes
        self.metrics: OnlineMetrics = dispatcher.metrics
        self.registry = registry or self.metrics.registry
        self._timeout_s = timeout_ms / 1000
        self._meters: dict[tuple[str, str, str], tuple[Any, Any]] = {}  # (model, transport, code) -> its counter, its histogram

    # ---- health and metadata ----------------------------------------------------------------

    def ready(self) -> bool:
        """Whether the model takes requests: warmed up, listening, not stopping."""
        return self.model.ready()

    def unknown(self, name: str, version: str | None) -> str | None:
        """Why ``name`` (and ``version``, when one is given) is not a served model; None when it is."""
        model: OnlineModel | None = self.model
        if self.lanes is not None and name != self.model.name:
            if not self.lanes.known(name):
                return f"unknown model {name!r}: the models are {', '.join(sorted(self.lanes.names))}"
            loaded = self.lanes.lane(name).loaded
            model = None if loaded is None else loaded.model
        elif name != self.model.name:
            return f"unknown model {name!r}: this server serves {self.model.name!r}"
        if model is not None and version and version != model.version:
            return f"model {name!r} has no version {version!r}: it serves {model.version!r}"
        return None

    def model_ready(self, name: str, version: str | None) -> bool:
        """Whether the named model is loaded and ready; :class:`Refused` 404 for another."""
        self._known(name, version)
        if self.lanes is None or name == self.model.name:
            return self.model.ready()
        loaded = self.lanes.lane(name).loaded
        return loaded is not None and bool(loaded.model.ready())

    def model_metadata(self, name: str, version: str | None) -> dict[str, Any]:
        """The named model's tensors, when it is loaded; :class:`Refused` 404 for another."""
        self._known(name, version)
        if self.lanes is None or name == self.model.name:
            return self.model.metadata()
        loaded = self.lanes.lane(name).loaded
        if loaded is None:
            raise Refused(503, f"model {name!r} is not loaded", 1.0)
        return dict(loaded.model.metadata())

    async def metadata(self, name: str, version: str | None) -> dict[str, Any]:
        """The named model's tensors, loading it first when it is not (within the default
        deadline); :class:`Refused` 404 for another."""
        model, _ = await self.lane(name, version, self.deadline(self.clock()))
        return dict(model.metadata())

    async def lane(self, name: str, version: str | None, deadline: float) -> tuple[OnlineModel, Dispatcher]:
        """The named model and its dispatcher, loaded by ``deadline`` when it is not loaded yet;
        :class:`Refused`: 404 for no such model or version, 503 when it cannot be had in time."""
        self._known(name, version)
        if self.lanes is None or name == self.model.name:
            return self.model, self.dispatcher
        loaded = await self.lanes.ready_lane(name, deadline)
        if version and version != loaded.model.version:
            raise Refused(404, f"model {name!r} has no version {version!r}: it serves {loaded.model.version!r}")
        return loaded.model, loaded.dispatcher

    def meters(self, name: str) -> OnlineMetrics:
        """The meters of model ``name`` (the default model's for a name no model has)."""
        if self.lanes is None or not self.lanes.known(name):
            return self.metrics
        return self.lanes.lane(name).metrics

    def _known(self, name: str, version: str | None) -> None:
        why = self.unknown(name, version)
        if why is not None:
            raise Refused(404, why)

    # ---- inference --------------------------------------------------------------------------

    def deadline(self, started: float, parameters: Mapping[str, Any] = NO_PARAMETERS, *,
                 asked_s: float | None = None, bound_s: float | None = None) -> float:
        """When a request that arrived at ``started`` must be answered (the module's rule):
        ``asked_s``, what its wire asks when its parameters do not; ``bound_s``, the wire's own
        deadline. BadRequest for a ``parameters.timeout`` that is not a positive integer."""
        timeout = parameters.get("timeout")
        if timeout is not None:
            if isinstance(timeout, bool) or not isinstance(timeout, int) or timeout <= 0:
                raise BadRequest(f"parameters.timeout {timeout!r} is not a positive number of microseconds")
            seconds = min(timeout / 1e6, self._timeout_s)
        elif asked_s is not None:
            seconds = min(asked_s, self._timeout_s)
        else:
            seconds = self._timeout_s
        if bound_s is not None:
            seconds = min(seconds, bound_s)
        return started + seconds

    def refused(self, name: str, version: str | None, status: int, why: str) -> Refused:
        """The refusal of what a request's wire carried (its body, tensors, timeout); 404 when the
        request names another model, as if that were checked first."""
        unknown = self.unknown(name, version)
        return Refused(status, why) if unknown is None else Refused(404, unknown)

    async def infer(self, request: InferRequest, deadline: float) -> InferResponse:
        """``request`` answered by ``deadline`` (the clock's time), or :class:`Refused`."""
        for again in (False, True):
            model, dispatcher = await self.lane(request.model, request.version, deadline)
            try:
                features = model.columns(request.inputs)
            except BadRequest as exc:
                raise Refused(400, str(exc)) from None
            try:
                if not model.ready():
                    raise _not_ready()
                answer = await dispatcher.answer(features, deadline, request.id)
                break
            except Refused as exc:
                if again or not self._unloaded_since(request.model, model, exc):
                    raise
        scored = answer.scored
        outputs = scored.scores.arrays
        if request.outputs:
            unknown = [name for name in request.outputs if name not in outputs]
            if unknown:
                raise Refused(400, f"no output {unknown[0]!r}: the model answers {', '.join(outputs)}")
            outputs = {k: v for k, v in outputs.items() if k in request.outputs}
        return InferResponse(model.name, scored.model.version, outputs, request.id,
                             {**parameters(scored), **self.hops(answer, dispatcher.metrics)}, answer.done_at)

    def _unloaded_since(self, name: str, model: OnlineModel, refused: Refused) -> bool:
        """Whether ``refused`` came from model ``name``'s lane unloaded (for another model) between
        the request's lookup and its admission, while the server serves: it is looked up again, once."""
        if self.lanes is None or name == self.model.name or not self.model.ready():
            return False
        if refused.status != 503:  # not ready, or shed as its dispatcher stopped
            return False
        loaded = self.lanes.lane(name).loaded
        return loaded is None or loaded.model is not model

    async def score(self, features: Columns, deadline: float, name: str | None = None) -> Answer:
        """Rows already in the model's columns (an event's: ``/v1/score``) answered by ``deadline``,
        or :class:`Refused`; ``name``: their event id."""
        if not self.model.ready():
            raise _not_ready()
        return await self.dispatcher.answer(features, deadline, name)

    def hops(self, answer: Answer, metrics: OnlineMetrics | None = None) -> dict[str, float]:
        """An answer's queue and model hops, observed (on ``metrics``, its model's; default: the
        default model's), as its parameters (milliseconds)."""
        hops = (metrics or self.metrics).hops
        hops["queue"].observe(answer.queued_s)
        hops["model"].observe(answer.model_s)
        return {"queue_ms": ms(answer.queued_s), "model_ms": ms(answer.model_s)}

    def encoded(self, done_at: float | None, model: str | None = None) -> float:
        """The encode hop of an answer whose model call ended at ``done_at``, observed (on model
        ``model``'s meters): its milliseconds (0, not observed, for an answer no model call made)."""
        if done_at is None:
            return 0.0
        seconds = max(self.clock() - done_at, 0.0)
        (self.metrics if model is None else self.meters(model)).hops["encode"].observe(seconds)
        return ms(seconds)

    def ended(self, transport: str, code: str, started: float, model: str | None = None) -> None:
        """Meter a request where it ends: its transport (http, grpc, score), its status (HTTP's
        number, gRPC's code name) and its seconds since ``started``, on model ``model``'s meters
        (None: the default model's)."""
        name = self.model.name if model is None or self.lanes is None or not self.lanes.known(model) else model
        meters = self._meters.get((name, transport, code))
        if meters is None:
            m = self.meters(name)
            meters = self._meters[name, transport, code] = (m.requests.labels(transport, code),
                                                            m.latency.labels(transport))
        meters[0].inc()
        meters[1].observe(self.clock() - started)


def ms(seconds: float) -> float:
    """Seconds as the answers' parameters carry them: milliseconds, to the microsecond."""
    return round(seconds * 1000, 3)


def parameters(scored: Scored) -> dict[str, str | bool | float]:
    """An answer's protocol parameters: the model file's digest, whether the fallback answered,
    and why."""
    params: dict[str, str | bool | float] = {"model_digest": scored.model.digest, "degraded": scored.degraded is not None}
    if scored.degraded is not None:
        params["degraded_reason"] = scored.degraded
    return params


def _not_ready() -> Refused:
    return Refused(503, "the model is not ready (warming up, or stopping)", 1.0)
