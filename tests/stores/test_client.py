"""The store's client against a real Redis: its password, its timeout on a stalled server, and errors without the password."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest
import redis

from streamer.config import KvConfig, Secret
from streamer.dev.redis import LocalRedis
from streamer.errors import ConfigError
from streamer.stores import values
from streamer.stores.client import connect, describe_error
from tests.support.redis import kv_config


def test_a_client_of_the_config_reaches_the_server_with_its_password(redis_server: LocalRedis) -> None:
    kv = kv_config(redis_server)
    r = connect(kv)
    r.set(f"{kv.prefix}:k", b"v")
    assert r.get(f"{kv.prefix}:k") == b"v"
    with pytest.raises(redis.AuthenticationError):
        connect(replace(kv, password=Secret("wrong"))).ping()


def test_a_stalled_server_is_an_error_within_the_timeout_and_the_error_hides_the_password(
        redis_server: LocalRedis) -> None:
    kv = kv_config(redis_server, timeout_ms=200)
    r = connect(kv)
    r.ping()
    got: list[BaseException] = []

    def get() -> None:
        try:
            r.get("x")
        except BaseException as exc:  # what the caller sees
            got.append(exc)

    redis_server.pause()
    try:
        asker = threading.Thread(target=get, daemon=True)
        asker.start()
        asker.join(3)  # 15 timeouts: a client that retries with back-off (seconds) is still asking
        assert not asker.is_alive(), "the client kept a stalled server's command past its timeout"
    finally:
        redis_server.resume()
    assert len(got) == 1 and isinstance(got[0], redis.TimeoutError)
    text = describe_error(kv, got[0])
    assert redis_server.address in text and redis_server.password not in text
    leaky = describe_error(kv, RuntimeError(f"AUTH {redis_server.password} refused"))
    assert redis_server.password not in leaky and "***" in leaky


def test_a_config_without_an_address_names_the_key() -> None:
    with pytest.raises(ConfigError, match="kv.address"):
        connect(KvConfig())
    with pytest.raises(ConfigError, match="kv.address"):
        KvConfig(address="10.0.0.1:6379,10.0.0.2:6379")  # several servers need kind cluster or sentinel


@pytest.mark.parametrize("value", ["3", "", 3, 0.25, True, None, [0.5, 1.0], {"a": 1}])
def test_a_value_reads_back_as_written(value: object) -> None:
    assert values.decode(values.encode(value), values.kind_of(value)) == value
