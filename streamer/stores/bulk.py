"""Many commands in one round trip: the Redis protocol (RESP) packed straight from bytes, for a run's writes.

redis-py's pipeline checks and encodes every argument in Python, which makes writing a
prediction's hash (some 30 arguments) the cost of a precompute. Here a batch of commands, each a
list of ``bytes`` arguments, is packed into one buffer, sent on one of the client's connections
and its replies read in order: about three times the rows per second. A Redis Cluster spreads a
batch's keys over its nodes, so there the batch is redis-py's cluster pipeline, which routes each
command to its slot's node. An error reply raises (the client's ``ResponseError``); the connection
is then closed, never reused with replies left unread.

Worked example: ``pack([b"HSET", b"k", b"f", b"v"])`` is
``b"*4\\r\\n$4\\r\\nHSET\\r\\n$1\\r\\nk\\r\\n$1\\r\\nf\\r\\n$1\\r\\nv\\r\\n"``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Command = list[bytes]


def pack(args: Sequence[bytes]) -> bytes:
    """One command as RESP: an array of bulk strings."""
    return b"".join([b"*%d\r\n" % len(args), *[b"$%d\r\n%b\r\n" % (len(arg), arg) for arg in args]])


def send(client: Any, commands: Sequence[Command]) -> list[Any]:
    """``commands`` sent in one round trip (a cluster's: one per node); their replies, in order."""
    if not commands:
        return []
    pool = getattr(client, "connection_pool", None)
    if pool is None:  # a RedisCluster: its pipeline routes each command to its slot's node
        pipe = client.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        return list(pipe.execute())
    conn = pool.get_connection()
    try:
        conn.send_packed_command([b"".join(map(pack, commands))])
        return [conn.read_response() for _ in commands]
    except BaseException:
        conn.disconnect()  # replies may be left unread: the connection is never reused
        raise
    finally:
        pool.release(conn)
