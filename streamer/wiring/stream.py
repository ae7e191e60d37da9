"""The stream's house: the model side (model.py) and the Kafka side a processor opens, wired before it runs."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from prometheus_client import CollectorRegistry

from streamer.config import Config, for_model, route_models
from streamer.formats.configured import input_codec
from streamer.house import ModelSide, Observer, Scope, Wiring
from streamer.kafka.clients import KafkaClients, check_topics, topic_wait
from streamer.kafka.side import open_kafka
from streamer.model.runner import ModelRunner
from streamer.observe.health import serve_http
from streamer.observe.metrics import GroupRegistry, Metrics
from streamer.processor import Processor
from streamer.wiring.models import house_of, model_houses


def build_wiring(cfg: Config, runner: ModelRunner | None = None, registry: CollectorRegistry | None = None,
                 clients: KafkaClients | None = None, stopping: Callable[[], bool] = lambda: False,
                 model_version: str | None = None, observers: tuple[Observer, ...] = ()) -> Wiring:
    """The house for one processor, built and checked before anything is read: the model side
    (model.model_house: the model checked at start-up as a reload is, unless ``runner`` is given;
    codecs; serving with reloads, fallback, challengers), metrics when ``metrics.enabled`` or a
    ``registry`` is given, and /metrics, /healthz and /readyz when ``metrics.enabled``.
    ``clients``: other Kafka clients than the config's (the in-memory ones of benchmarks/gpu.py);
    the config's cluster is checked first, and the processor waits for the topics of
    :func:`topic_wait` before it reads. ``stopping``: a stop signal came (it ends start-up's wait
    for the cluster: StopRequested). ``model_version``: the label every prediction carries,
    verbatim, whatever the file declares. ``observers``: watch the loop beside its accounting.
    With a route (``route.field``), every model it scores with (config.route_models) is built
    and checked here, each on its own key (wiring/models.py), the default first; without one (or
    with ``runner``), the default model scores every event with its own config (config.for_model)."""
    metrics = None
    if cfg.metrics.enabled or registry is not None:
        registry = registry or GroupRegistry(cfg.input.group_id)
        metrics = Metrics(registry)
    sides: tuple[ModelSide, ...] = ()
    if cfg.route.field is not None and runner is None:
        houses = model_houses(cfg, route_models(cfg), metrics)
        sides = tuple(ModelSide(for_model(cfg, name), h.serving, h.encoder) for name, h in houses.items())
        # The default model's serving, the online server's beside the stream: built even when the
        # route sends it nothing (unknown values dead letters, no value mapped to it).
        house = houses.get(cfg.model.name) or house_of(cfg, cfg.model.name, metrics)
    else:  # one model: the default's own config (its batching, challengers and topic), or ``runner``
        house = house_of(cfg, cfg.model.name, metrics, runner, model_version)
        cfg = for_model(cfg)
    topics = None
    if clients is None:
        check_topics(cfg, stopping=stopping)
        topics = topic_wait(cfg)
    health = None
    if cfg.metrics.enabled:
        exported = registry
        assert exported is not None
        health = partial(serve_http, cfg, exported)
    return Wiring(cfg, house.serving, input_codec(cfg.input, house.schema_in), house.encoder,
                  open_kafka(cfg, clients or KafkaClients.from_config(cfg)),
                  metrics, health=health, observers=observers, topics=topics, models=sides)


def build_processor(cfg: Config, runner: ModelRunner | None = None, registry: CollectorRegistry | None = None,
                    clients: KafkaClients | None = None, stopping: Callable[[], bool] = lambda: False,
                    scope: Scope = Scope(), model_version: str | None = None,
                    observers: tuple[Observer, ...] = ()) -> Processor:
    """A ready Processor on :func:`build_wiring`'s house, for ``scope`` (default: the live stream)."""
    return Processor(build_wiring(cfg, runner, registry, clients, stopping, model_version, observers), scope)


