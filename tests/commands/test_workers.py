"""The --workers supervisor and per-worker configs, without processes: fakes stand in for them."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from streamer.commands.workers import Supervisor, for_worker
from streamer.config import transactional_id, with_overrides
from streamer.config_file import load_config
from streamer.testing import FakeClock

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "config" / "example.yaml"


class FakeWorker:
    def __init__(self, index: int) -> None:
        self.index, self.code, self.signals = index, None, []  # type: ignore[var-annotated]

    def poll(self) -> int | None:
        return self.code

    def send_signal(self, sig: int) -> None:
        self.signals.append(sig)
        if sig != signal.SIGHUP:  # SIGHUP reloads the model; the rest stop it cleanly
            self.code = 0

    def wait(self, timeout: float | None = None) -> int:
        assert self.code is not None
        return self.code

    def kill(self) -> None:
        self.code = -9


class Script:
    """Spawns fake workers; runs ``actions[n]`` before the supervisor's n-th sleep."""

    def __init__(self, actions: dict[int, object]) -> None:
        self.spawned: list[FakeWorker] = []
        self.actions, self.sleeps = actions, 0
        self.clock = FakeClock()

    def spawn(self, index: int) -> FakeWorker:
        self.spawned.append(FakeWorker(index))
        return self.spawned[-1]

    def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        self.clock.advance(seconds)
        action = self.actions.get(self.sleeps)
        if callable(action):
            action()
        assert self.sleeps < 10_000, "the supervisor never finished"


def supervisor(script: Script, n: int = 2, **kw: object) -> Supervisor:
    return Supervisor(n, script.spawn, clock=script.clock, sleep=script.sleep, **kw)  # type: ignore[arg-type]


def test_stop_forwards_sigterm_to_every_worker_and_exits_0() -> None:
    script = Script({})
    sup = supervisor(script, 3)
    script.actions[5] = sup.stop
    assert sup.run() == 0
    assert [w.signals for w in script.spawned] == [[signal.SIGTERM]] * 3


def test_sighup_is_passed_on_to_every_running_worker() -> None:
    script = Script({})
    sup = supervisor(script, 3)
    script.actions[2] = lambda: sup.forward(signal.SIGHUP)
    script.actions[3] = sup.stop
    assert sup.run() == 0
    assert [w.signals for w in script.spawned] == [[signal.SIGHUP, signal.SIGTERM]] * 3


def test_a_dead_worker_is_restarted_after_a_back_off() -> None:
    script = Script({})
    sup = supervisor(script, 2, backoff_s=1.0)
    script.actions[3] = lambda: setattr(script.spawned[1], "code", -9)  # worker 1 is killed
    script.actions[40] = sup.stop
    assert sup.run() == 0
    assert [w.index for w in script.spawned] == [0, 1, 1]  # worker 1 started again
    assert script.spawned[1].signals == []  # the dead one is not signalled


def test_workers_that_keep_dying_make_the_supervisor_give_up() -> None:
    script = Script({})
    sup = supervisor(script, 2, max_deaths=3, window_s=60, backoff_s=0.2)

    def kill_latest() -> None:
        script.spawned[-1].code = 1

    for n in range(2, 200, 3):
        script.actions[n] = kill_latest
    assert sup.run() == 4  # EXIT_WORKERS
    assert script.spawned[0].signals == [signal.SIGTERM]  # the survivor was stopped


def test_a_config_error_is_not_restarted() -> None:
    script = Script({})
    sup = supervisor(script, 2)
    script.actions[2] = lambda: setattr(script.spawned[0], "code", 2)
    assert sup.run() == 2
    assert len(script.spawned) == 2


def test_each_worker_gets_its_own_member_id_transactional_id_and_port() -> None:
    cfg = load_config(EXAMPLE, env={"KAFKA_BOOTSTRAP": "x:9092", "INPUT_TOPIC": "in", "OUTPUT_TOPIC": "out",
                                    "GROUP_ID": "g"})
    cfg = with_overrides(cfg, metrics={"port": 9400})
    cfg = type(cfg)(**{**{f: getattr(cfg, f) for f in cfg.__dataclass_fields__},
                       "kafka": {**cfg.kafka, "group.instance.id": "host-a"}})
    workers = [for_worker(cfg, i) for i in range(3)]
    assert [w.kafka["group.instance.id"] for w in workers] == ["host-a-0", "host-a-1", "host-a-2"]
    assert len({transactional_id(w) for w in workers}) == 3
    assert [w.metrics.port for w in workers] == [9400, 9401, 9402]
    assert for_worker(with_overrides(cfg, metrics={"port": 0}), 2).metrics.port == 0  # any free port


def test_the_lag_exporters_default_port_is_below_the_workers_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    """run --workers N takes metrics.port .. metrics.port + N - 1; the exporter's default is
    metrics.port - 1, so the two never collide on one host (it used to be worker 1's)."""
    from streamer import cli

    bound: list[tuple[str, int]] = []

    class Stop(Exception):
        pass

    def server(_registry: object, host: str, port: int, _status: object) -> None:
        bound.append((host, port))
        raise Stop

    monkeypatch.setattr("streamer.observe.health.HealthServer", server)
    monkeypatch.setattr("streamer.observe.lag.LagExporter", lambda *a, **k: None)
    with pytest.raises(Stop):
        cli.main(["lag-exporter", "--config", str(EXAMPLE)])
    cfg = load_config(EXAMPLE)
    ports = [w.metrics.port for w in (for_worker(cfg, i) for i in range(3))]
    assert bound == [(cfg.metrics.host, cfg.metrics.port - 1)] and bound[0][1] not in ports
