"""Many commands in one round trip: the Redis protocol (RESP) packed straight from bytes, for a run's writes.

redis-py's pipeline checks and encodes every argument in Python, which makes writing a
prediction's hash (some 30 arguments) the cost of a precompute. Here a prediction's ``HSET`` is
packed from its columns: each column's ``name value`` pairs are packed once, as a list, and a
row's command is the join of its pairs. A batch of commands is sent as one buffer on one of the
client's connections and its replies read in order. A Redis Cluster spreads a batch's keys over
its nodes, so there the commands are argument lists for redis-py's cluster pipeline, which routes
each to its slot's node. An error reply raises (the client's ``ResponseError``); the connection
is then closed, never reused with replies left unread.

Worked example: ``pack([b"HSET", b"k", b"f", b"v"])`` is
``b"*4\\r\\n$4\\r\\nHSET\\r\\n$1\\r\\nk\\r\\n$1\\r\\nf\\r\\n$1\\r\\nv\\r\\n"``, and so is
``hsets(client, [b"k"], [(b"f", [b"v"])], [])[1]`` for a client of one server (``[0]``: ``DEL k``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Command = list[bytes]  # a command's arguments
Column = tuple[bytes, list[bytes | None]]  # a field's name and its value in each row (None: left out)


def packs(client: Any) -> bool:
    """Whether ``client`` takes packed commands: one server's (or Sentinel's master's), not a cluster's."""
    return getattr(client, "connection_pool", None) is not None


def pack(args: Sequence[bytes]) -> bytes:
    """One command as RESP: an array of bulk strings."""
    return b"".join([b"*%d\r\n" % len(args), *[b"$%d\r\n%b\r\n" % (len(arg), arg) for arg in args]])


def hsets(client: Any, keys: Sequence[bytes], columns: Sequence[Column], after: Sequence[bytes]) -> list[Any]:
    """A ``DEL`` of each row's key and an ``HSET`` of its non-null fields (so a field the row
    leaves null keeps no value of an earlier write), each followed by the command ``after``
    names with the key after its first word (``[b"EXPIRE", b"60"]``: ``EXPIRE key 60``): packed
    for a client that :func:`packs`, argument lists for a cluster's."""
    out: list[Any] = []
    if not packs(client):
        for i, key in enumerate(keys):
            out.append([b"DEL", key])
            command = [b"HSET", key]
            for name, values in columns:
                value = values[i]
                if value is not None:
                    command += (name, value)
            out.append(command)
            if after:
                out.append([after[0], key, *after[1:]])
        return out
    pairs = [_pairs(name, values) for name, values in columns]
    for key, row in zip(keys, zip(*pairs, strict=True), strict=True):
        present = [p for p in row if p is not None]
        head = b"*%d\r\n$4\r\nHSET\r\n$%d\r\n%b\r\n" % (2 + 2 * len(present), len(key), key)
        out.append(pack([b"DEL", key]))
        out.append(head + b"".join(present))
        if after:
            out.append(pack([after[0], key, *after[1:]]))
    return out


def _pairs(name: bytes, values: list[bytes | None]) -> list[bytes | None]:
    """A column's ``name value`` pairs packed, one per row (a column of one value: packed once)."""
    if values and values[0] is not None and values.count(values[0]) == len(values):
        v = values[0]
        return [b"$%d\r\n%b\r\n$%d\r\n%b\r\n" % (len(name), name, len(v), v)] * len(values)
    return [None if v is None else b"$%d\r\n%b\r\n$%d\r\n%b\r\n" % (len(name), name, len(v), v) for v in values]


def send(client: Any, commands: Sequence[Any]) -> list[Any]:
    """``commands`` (packed bytes, or argument lists) sent in one round trip (a cluster's: one per
    node); their replies, in order."""
    if not commands:
        return []
    if not packs(client):  # a RedisCluster: its pipeline routes each command to its slot's node
        pipe = client.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        return list(pipe.execute())
    pool = client.connection_pool
    conn = pool.get_connection()
    try:
        conn.send_packed_command([b"".join(c if isinstance(c, bytes) else pack(c) for c in commands)])
        return [conn.read_response() for _ in commands]
    except BaseException:
        conn.disconnect()  # replies may be left unread: the connection is never reused
        raise
    finally:
        pool.release(conn)
