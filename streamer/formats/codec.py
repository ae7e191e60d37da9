"""What every wire format implements (:class:`Codec`), and the bound on a message's size."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from streamer.errors import DeserializeError

DEFAULT_MAX_BYTES = 1_048_576


class Codec(Protocol):
    """Turns one Kafka message value into a mapping, and a mapping into a message value."""

    def decode(self, data: bytes) -> Mapping[str, Any]: ...

    def encode(self, record: Mapping[str, Any]) -> bytes: ...


def check_size(data: bytes, max_bytes: int) -> None:
    if len(data) > max_bytes:
        raise DeserializeError(f"message is {len(data)} bytes, over the {max_bytes}-byte limit")
