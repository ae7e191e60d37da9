"""The houses of several models (``models``): each built as one model's is (model.py), on the
one-model config it scores with (config.for_model), and refused at start-up on its own key."""

from __future__ import annotations

from collections.abc import Iterable

from streamer.config import Config, for_model, model_key
from streamer.observe.metrics import Metrics
from streamer.wiring.model import ModelHouse, model_house


def house_of(cfg: Config, name: str, metrics: Metrics | None = None) -> ModelHouse:
    """Model ``name``'s house: its runner checked as at start-up (a refusal names
    ``models.named.<name>.model.path``), codecs, serving with its own reloads, breaker, fallback
    and challengers."""
    return model_house(for_model(cfg, name), metrics=metrics, key=f"{model_key(cfg, name)}.path")


def model_houses(cfg: Config, names: Iterable[str], metrics: Metrics | None = None) -> dict[str, ModelHouse]:
    """The houses of ``names``, in order, each checked at start-up."""
    return {name: house_of(cfg, name, metrics) for name in names}
