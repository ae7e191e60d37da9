"""The houses of several models (``models``): each built as one model's is (model.py), on the
one-model config it scores with (config.for_model), and refused at start-up on its own key."""

from __future__ import annotations

from collections.abc import Iterable

from streamer.config import Config, for_model, model_key, under
from streamer.errors import ConfigError
from streamer.model.runner import ModelRunner
from streamer.observe.metrics import Metrics
from streamer.wiring.model import ModelHouse, model_house


def house_of(cfg: Config, name: str, metrics: Metrics | None = None, runner: ModelRunner | None = None,
             label: str | None = None) -> ModelHouse:
    """Model ``name``'s house (model.model_house, with ``runner`` and ``label`` when given): its
    runner checked as at start-up, a refusal named by the model's own key
    (``models.named.<name>.model.path``, ``...model.inputs.x``), codecs, serving with its own
    reloads, breaker, fallback and challengers."""
    key = model_key(cfg, name)
    try:
        return model_house(for_model(cfg, name), runner, metrics=metrics, label=label, key=f"{key}.path")
    except ConfigError as exc:
        if type(exc) is not ConfigError:  # a file's error names the file
            raise
        raise ConfigError(under(exc.key, key), exc.reason) from exc


def model_houses(cfg: Config, names: Iterable[str], metrics: Metrics | None = None) -> dict[str, ModelHouse]:
    """The houses of ``names``, in order, each checked at start-up."""
    return {name: house_of(cfg, name, metrics) for name in names}
