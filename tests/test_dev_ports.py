"""The development broker's ports: a listener and a controller never share one."""

from __future__ import annotations

import socket

from streamer.dev.broker import free_ports


def test_free_ports_are_distinct_and_free_when_handed_out() -> None:
    ports = free_ports(64)
    assert len(set(ports)) == 64
    for port in ports[:8]:  # each can be bound by whoever takes it
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
