"""`streamer topics create --config FILE`: the topics a config reads and writes, created on its cluster.

The input topics, the output topic (with ``output.topic_per_model``, one per model of the
config: ``<output.topic>.<model>``), the dead-letter topic and, with ``shadow.challengers``, the
shadow topic, each with ``--partitions`` (default 3), ``--replication`` (default 1) and
``--retention-ms`` (default: the broker's). One line per topic, with its config key::

    created  features (input.topics[0]): 3 partitions, replication 1
    exists   predictions (output.topic): 6 partitions
    FAIL     features.dlq (processing.dead_letter_topic): Broker: Invalid replication factor

An existing topic is left as it is and is not an error. Exit 0 when none failed, 3 when the
broker refused one (or gave no listing), 2 for a bad config or flag.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from streamer.config import Config, Sections, dead_letter_topic, model_entries, prediction_topic, shadow_topic
from streamer.errors import EXIT_FATAL, ConfigError
from streamer.kafka.clients import make_admin
from streamer.kafka.topics import Outcome, create_each

DEFAULT_PARTITIONS = 3
DEFAULT_REPLICATION = 1


@dataclass(frozen=True, slots=True)
class TopicsPlan:
    """How ``topics create`` makes the topics it does not find."""

    partitions: int = DEFAULT_PARTITIONS
    replication: int = DEFAULT_REPLICATION
    retention_ms: int | None = None  # None: the broker's default

    def __post_init__(self) -> None:
        if self.partitions < 1:
            raise ConfigError("--partitions", f"must be >= 1, got {self.partitions}")
        if self.replication < 1:
            raise ConfigError("--replication", f"must be >= 1, got {self.replication}")
        if self.retention_ms is not None and self.retention_ms < -1:
            raise ConfigError("--retention-ms", f"must be >= -1 (-1: keep for ever), got {self.retention_ms}")


def config_topics(cfg: Sections, models: Iterable[str] = ()) -> dict[str, str]:
    """Each topic the config reads or writes -> the config key that names it, in that order.
    ``models``: the config's model names (config_file.model_names), for ``output.topic_per_model``
    where ``cfg`` has no model sections (an UnscoredConfig); a Config's own otherwise."""
    keys: dict[str, str] = {}
    for n, topic in enumerate(cfg.input.topics):
        keys.setdefault(topic, f"input.topics[{n}]")
    names = sorted(model_entries(cfg)) if isinstance(cfg, Config) else sorted(models)
    if cfg.output.topic_per_model and names:
        for name in names:
            keys.setdefault(prediction_topic(cfg, name), "output.topic_per_model")
    else:
        keys.setdefault(cfg.output.topic, "output.topic")
    keys.setdefault(dead_letter_topic(cfg), "processing.dead_letter_topic")
    if cfg.shadow.challengers:
        keys.setdefault(shadow_topic(cfg), "shadow.topic")
    return keys


def create_topics(cfg: Sections, plan: TopicsPlan, timeout_s: float = 30.0, models: Iterable[str] = ()) -> list[str]:
    """Create the config's missing topics per ``plan``; one line per topic (see the module docstring).
    ``models``: as :func:`config_topics` takes them."""
    keys = config_topics(cfg, models)
    settings = {} if plan.retention_ms is None else {"retention.ms": str(plan.retention_ms)}
    outcomes = create_each(make_admin(cfg), {t: plan.partitions for t in keys},
                           replication_factor=plan.replication, config=settings, timeout_s=timeout_s)
    return [line(o, keys[o.topic], plan) for o in outcomes]


def line(o: Outcome, key: str, plan: TopicsPlan) -> str:
    if o.state == "failed":
        return f"FAIL     {o.topic} ({key}): {o.reason}"
    if o.state == "exists":
        return f"exists   {o.topic} ({key}): {o.partitions} partitions"
    return f"created  {o.topic} ({key}): {o.partitions} partitions, replication {plan.replication}"


def exit_code(lines: list[str]) -> int:
    return EXIT_FATAL if any(x.startswith("FAIL") for x in lines) else 0
