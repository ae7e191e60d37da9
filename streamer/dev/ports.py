"""Whether a loopback port is free, for the development servers' commands (dev kafka, dev redis)."""

from __future__ import annotations

import socket


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    """Nothing listens on ``host:port`` (connections of a server just stopped do not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the broker and redis-server bind it
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True
