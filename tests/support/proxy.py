"""A TCP proxy between a client and one broker, with network faults switched on and off at run time.

Used by the network fault tests: each node of a cluster advertises, on a second listener, the
port of its proxy, so a client that bootstraps through a proxy reaches every broker through its
proxy (metadata answers carry the advertised addresses), while the test's own feeder and audit
talk to the brokers directly.

Faults, each until :meth:`Proxy.heal`:

- ``latency(ms)``: every chunk in either direction is delivered ``ms`` later (order kept).
- ``bandwidth(bytes_per_s)``: each direction is limited to that rate (a token bucket).
- ``cut()``: every open connection is reset (RST, SO_LINGER 0) and new ones are reset on accept,
  as when a firewall rejects the traffic.
- ``black_hole()``: nothing moves and nothing is closed. Open connections stop forwarding (the
  pumps stop reading, so the sender's kernel buffers fill as when packets are dropped), and new
  connections are accepted but never reach the broker. On heal the held bytes flow on: TCP would
  have retransmitted them, so the byte streams stay whole.

Example::

    with Proxy(listen_port, broker_port) as proxy:
        proxy.black_hole()   # the client sees a silent network
        ...
        proxy.heal()
"""

from __future__ import annotations

import contextlib
import queue
import socket
import struct
import threading
import time
from types import TracebackType

CHUNK = 65_536


class _Bucket:
    """A token bucket: :meth:`take` blocks until ``n`` bytes may pass at ``rate`` bytes/s."""

    def __init__(self) -> None:
        self.rate: float | None = None
        self._tokens = 0.0
        self._at = time.monotonic()
        self._lock = threading.Lock()

    def take(self, n: int) -> None:
        while True:
            with self._lock:
                if self.rate is None:
                    return
                now = time.monotonic()
                # At most a tenth of a second of burst.
                self._tokens = min(self.rate / 10, self._tokens + (now - self._at) * self.rate)
                self._at = now
                self._tokens -= n
                wait = -self._tokens / self.rate if self._tokens < 0 else 0.0
            if wait:
                time.sleep(wait)  # pacing the bytes, not synchronisation
            return


class Proxy:
    """Forwards 127.0.0.1:``listen_port`` to 127.0.0.1:``target_port``; see the module docstring."""

    def __init__(self, listen_port: int, target_port: int) -> None:
        self.listen_port, self.target_port = listen_port, target_port
        self.latency_s = 0.0
        self._buckets = (_Bucket(), _Bucket())  # client->broker, broker->client
        self._flowing = threading.Event()
        self._flowing.set()
        self._cut = False
        self._closed = False
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._server = socket.create_server(("127.0.0.1", listen_port), reuse_port=False)
        self._server.settimeout(0.2)
        self._acceptor = threading.Thread(target=self._accept, daemon=True, name=f"proxy-{listen_port}")

    def start(self) -> Proxy:
        self._acceptor.start()
        return self

    # --- faults ---

    def latency(self, ms: float) -> None:
        self.latency_s = ms / 1000

    def bandwidth(self, bytes_per_s: float | None) -> None:
        for b in self._buckets:
            b.rate = bytes_per_s

    def cut(self) -> None:
        self._cut = True
        with self._lock:
            for s in list(self._sockets):
                _reset(s)

    def black_hole(self) -> None:
        self._flowing.clear()

    def heal(self) -> None:
        """Back to a clean network: no latency, no limit, connections accepted and flowing."""
        self.latency_s = 0.0
        self.bandwidth(None)
        self._cut = False
        self._flowing.set()

    @property
    def connections(self) -> int:
        with self._lock:
            return len(self._sockets) // 2

    # --- plumbing ---

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if self._cut:
                _reset(client)
                continue
            threading.Thread(target=self._connect, args=(client,), daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        self._flowing.wait()  # a black hole: accepted, but the broker never hears of it
        if self._cut or self._closed:
            _reset(client)
            return
        try:
            upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
        except OSError:
            _reset(client)
            return
        upstream.settimeout(None)
        client.settimeout(None)
        with self._lock:
            self._sockets.update((client, upstream))
        for src, dst, bucket in ((client, upstream, self._buckets[0]), (upstream, client, self._buckets[1])):
            pipe: queue.SimpleQueue[tuple[float, bytes] | None] = queue.SimpleQueue()
            threading.Thread(target=self._read, args=(src, pipe), daemon=True).start()
            threading.Thread(target=self._write, args=(dst, pipe, bucket, (client, upstream)),
                             daemon=True).start()

    def _read(self, src: socket.socket, pipe: queue.SimpleQueue[tuple[float, bytes] | None]) -> None:
        try:
            while True:
                self._flowing.wait()  # held in the sender's buffers while the network is silent
                data = src.recv(CHUNK)
                if not data:
                    break
                pipe.put((time.monotonic() + self.latency_s, data))
        except OSError:
            pass
        pipe.put(None)

    def _write(self, dst: socket.socket, pipe: queue.SimpleQueue[tuple[float, bytes] | None],
               bucket: _Bucket, pair: tuple[socket.socket, socket.socket]) -> None:
        try:
            while (item := pipe.get()) is not None:
                due, data = item
                if (wait := due - time.monotonic()) > 0:
                    time.sleep(wait)  # the added latency
                self._flowing.wait()
                bucket.take(len(data))
                dst.sendall(data)
        except OSError:
            pass
        with self._lock:  # one side ended: end the other too, as a real connection would
            for s in pair:
                if s in self._sockets:
                    self._sockets.discard(s)
                    with contextlib.suppress(OSError):
                        s.shutdown(socket.SHUT_RDWR)
                    s.close()

    def close(self) -> None:
        self._closed = True
        self.heal()
        self.cut()
        self._server.close()
        self._acceptor.join(5)

    def __enter__(self) -> Proxy:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _reset(s: socket.socket) -> None:
    """Close with RST rather than FIN: the peer sees 'connection reset', as after a network cut."""
    with contextlib.suppress(OSError):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RD)  # wakes a pump blocked in recv(), which holds the socket open
    with contextlib.suppress(OSError):
        s.close()
