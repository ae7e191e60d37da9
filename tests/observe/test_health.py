"""observe/health.py: /healthz and /readyz answer with why not, over real HTTP."""

from __future__ import annotations

import urllib.error
import urllib.request

from prometheus_client import CollectorRegistry

from streamer.observe.health import HealthServer, Status, loop_status


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def status(**over: object) -> Status:
    args: dict[str, object] = {"running": True, "silent_s": 0.0, "stall_s": 60.0, "blocked": None,
                               "stalled": set(), "ready": True} | over
    return loop_status(**args)  # type: ignore[arg-type]


def test_readyz_says_why_a_healthy_process_is_not_ready() -> None:
    now = [status(ready=False)]
    server = HealthServer(CollectorRegistry(), "127.0.0.1", 0, lambda: now[0])
    try:
        base = f"http://127.0.0.1:{server.port}"
        assert get(f"{base}/healthz") == (200, "ok\n")
        assert get(f"{base}/readyz") == (503, "no partitions assigned yet: joining the consumer group\n")
        now[0] = status(running=False, ready=True)
        assert get(f"{base}/readyz")[1].startswith("not running: starting")
        now[0] = status(blocked="schema registry: lookup of schema id 7 failed")
        assert get(f"{base}/healthz") == (503, "schema registry: lookup of schema id 7 failed\n")
        assert get(f"{base}/readyz")[0] == 200  # blocked but in the group: /healthz says it
        now[0] = status(blocked="paused", ready=False)
        assert get(f"{base}/readyz") == (503, "paused\n")  # unhealthy first: the more serious reason
        now[0] = status()
        assert get(f"{base}/readyz") == (200, "ok\n")
    finally:
        server.close()
