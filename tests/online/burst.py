"""A burst of online requests from a process of its own (so the server's event loop shares no
interpreter with its client): ``python -m tests.online.burst URL TIMEOUT_S`` POSTs every JSON body
of its stdin (one per line) at once and prints, one per line, each answer's status and JSON in
the bodies' order (a client timeout ends it with an error)."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import aiohttp


async def burst(url: str, bodies: list[Any], timeout_s: float) -> list[tuple[int, Any]]:
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as session:
        async def one(body: Any) -> tuple[int, Any]:
            async with session.post(url, json=body) as r:
                return r.status, await r.json()

        return list(await asyncio.gather(*(one(b) for b in bodies)))


def main() -> None:
    url, timeout_s = sys.argv[1], float(sys.argv[2])
    bodies = [json.loads(line) for line in sys.stdin if line.strip()]
    for status, answer in asyncio.run(burst(url, bodies, timeout_s)):
        print(json.dumps([status, answer]))


if __name__ == "__main__":
    main()
