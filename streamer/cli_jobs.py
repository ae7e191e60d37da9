"""The jobs' commands on the command line: `streamer jobs ...` and `streamer worker`, and the runner that gives a worker's jobs to the batch commands.

A worker's :class:`JobRunner` runs each job as the command of its source and target would:
``score`` for Parquet files and tables, ``replay --to-table/--to-parquet/--to-kv`` for a topic's range into
the lake or the key-value store, ``replay`` for a topic's range into a topic (exactly once), each under the job's id as
its run id. A job whose run finished already (its worker died after the last commit) is complete.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import io
import os
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from streamer.cli_signals import stop_event
from streamer.config import Config, replay_config
from streamer.errors import EXIT_FATAL, FileError, ReplayFinishedError
from streamer.extras import need
from streamer.jobs.spec import JobSource, JobSpec, JobTarget, check_model, parse_spec
from streamer.jobs.states import Done, State
from streamer.jobs.worker import Outcome
from streamer.kafka.ranges import When, parse_when
from streamer.observe.health import Status
from streamer.observe.jobs import JobMetrics


def read_spec(path: str) -> JobSpec:
    """A spec file (YAML or JSON), checked."""
    try:
        raw = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise FileError(Path(path), f"cannot read it: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise FileError(Path(path), f"not valid YAML or JSON: {exc}") from exc
    return parse_spec(raw)


def checked_spec(path: str, config: str) -> JobSpec:
    """A spec file checked, its ``model`` against the models of the config file (whose files need
    not be here)."""
    from streamer.config_file import model_names

    spec = read_spec(path)
    names = model_names(config)
    if names is not None:
        check_model(spec, names)
    return spec


def jobs(args: argparse.Namespace) -> int:
    from streamer.commands import jobs as cmd
    from streamer.config_file import load_unscored
    from streamer.jobs.board import Board
    from streamer.jobs.queue import cancel

    cfg = load_unscored(args.config)
    if args.action == "submit":
        spec = checked_spec(args.spec, args.config)
        if args.id:
            spec = replace(spec, id=args.id)
        print(cmd.submit_spec(cfg, spec, args.slot))
        return 0
    board = Board(cfg)
    try:
        if args.action == "list":
            print("\n".join(cmd.list_lines(board.load().all(), args.status, dt.datetime.now(dt.UTC))))
            return 0
        if args.action == "watch":
            return _watch(cfg, args)
        board.load()
        if args.action == "status":
            status = board.must(args.id)
            print(cmd.status_json(status) if args.json else "\n".join(cmd.status_lines(status)))
            return 0
        if args.action == "cancel":
            status = cancel(board, args.id)
            print(f"job {status.id}: {status.state}" +
                  (" (it stops at its next commit)" if status.state == State.CANCELLING else ""))
            return 0
        if args.action == "retry":
            from streamer.jobs.queue import submit

            status = board.must(args.id)
            status, queued = submit(cfg, status.job, board)
            print(cmd.submitted_line(status, queued))
            return 0
        # wait
        board.must(args.id)
        board.close()
        board = Board(cfg).follow()
        waited = board.wait(args.id, lambda s: s.final, args.timeout)
        assert waited is not None
        status = waited
        print("\n".join(cmd.status_lines(status)))
        if not status.final:
            print(f"streamer: job {status.id} is still {status.state} after {args.timeout:.0f} s", file=sys.stderr)
            return EXIT_FATAL
        return 0 if status.state == State.COMPLETED else 1
    finally:
        board.close()


def _watch(cfg: Any, args: argparse.Namespace) -> int:
    need("lake", "jobs watch")
    stop = stop_event()
    from streamer.jobs.watch import watch

    return watch(cfg, checked_spec(args.spec, args.config), stop, args.interval, args.once, lambda line: print(line, flush=True))


def worker(args: argparse.Namespace) -> int:
    need("lake", "worker")
    stop = stop_event()
    from streamer.config_file import load_config
    from streamer.jobs.worker import Worker

    cfg = load_config(args.config)
    name = args.name or f"{socket.gethostname()}-{os.getpid()}"
    worker = Worker(cfg, JobRunner(args.config), name)
    with _meters(cfg, lambda: worker.health(cfg.metrics.stall_timeout_ms / 1000)) as meters:
        if meters is not None:
            worker.meters = meters
        return worker.run(stop)


@contextlib.contextmanager
def _meters(cfg: Config, status: Callable[[], Status]) -> Iterator[JobMetrics | None]:
    """The worker's metrics and health, served on its config's metrics section while it runs
    (metrics.enabled)."""
    if not cfg.metrics.enabled:
        yield None
        return
    from streamer.observe.health import serve_http
    from streamer.observe.metrics import GroupRegistry

    registry = GroupRegistry(cfg.jobs.group_id)  # every series carries the workers' group
    meters = JobMetrics(registry, cfg.jobs.group_id)
    http = serve_http(cfg, registry, status)
    try:
        yield meters
    finally:
        http.close()


class JobRunner:
    """Runs a job with the batch command of its source and target, on the config at ``config``
    (read again for each job: a changed model file or setting is taken up by the next job)."""

    def __init__(self, config: str) -> None:
        self.config = config

    def run(self, job_id: str, spec: JobSpec, stop: threading.Event,
            progress: Callable[[int, int | None], None], abandon: threading.Event | None = None) -> Outcome:
        from streamer.commands import lake
        from streamer.config_file import load_config

        cfg = job_config(load_config(self.config), spec)
        source, target = spec.source, spec.target
        assert source is not None
        quiet = io.StringIO()  # a worker logs; the progress is the job's status
        try:
            if target.topic is not None:
                return self._replay(cfg, job_id, spec, stop, progress, quiet)
            if target.kv is not None:
                need("kv", "a job's target kv")
            where = lake.Target(target.table, target.parquet, target.kv)
            if source.kind == "topic":
                summary = lake.run_lake_replay(cfg, *_range(source), where, run_id=job_id, progress=quiet, stop=stop,
                                               on_rows=progress, abandon=abandon)
            else:
                summary = lake.run_score(cfg, _where(source), where, run_id=job_id, progress=quiet, stop=stop,
                                         on_rows=progress, key="job.source", abandon=abandon)
        except ReplayFinishedError as done:  # finished by an earlier run of the job: what its commits hold
            predictions, rejects, rows = done.committed
            sink = done.sink or _place(target)  # a topic replay's says neither
            return Outcome(Done(rows, predictions, rejects, sink, done.rejects_at or f"{sink}_rejects"), stopped=False)
        (predictions, rejects), sink = summary.committed_rows, summary.sink
        return Outcome(Done(summary.rows_done, predictions, rejects, sink, summary.rejects_at), summary.counts.stopped)

    @staticmethod
    def _replay(cfg: Config, job_id: str, spec: JobSpec, stop: threading.Event,
                progress: Callable[[int, int | None], None], quiet: io.StringIO) -> Outcome:
        from streamer.commands.replay import run_replay

        assert spec.source is not None and spec.target.topic is not None
        summary = run_replay(cfg, *_range(spec.source), run_id=job_id, output_topic=spec.target.topic,
                             progress=quiet, stop=stop, on_rows=progress)
        st = summary.stats
        return Outcome(Done(st.outputs, st.predictions, sum(st.dead_letters.values()), f"topic {summary.output_topic}",
                            f"topic {summary.dead_letter_topic}"), summary.stopped)


def job_config(cfg: Config, spec: JobSpec) -> Config:
    """The config a job scores with (config.replay_config): its ``model``'s, an unknown one refused
    on ``job.model``; a replay naming none, of a routed config, routes to a topic as the stream does."""
    if spec.source is None or spec.source.kind != "topic":
        return replay_config(cfg, spec.model, None, key="job.model")
    return replay_config(cfg, spec.model, "topic" if spec.target.topic is not None else "lake", key="job.model")


def _where(source: JobSource) -> Any:
    """A job's source as the lake reads it: a table (the rows one snapshot appended), a file or
    folder, or several files."""
    from streamer.lake.appends import Appended

    if source.table is not None:
        return source.table if source.snapshot is None else Appended(source.table, source.snapshot)
    return source.parquet[0] if len(source.parquet) == 1 else list(source.parquet)


def _range(source: JobSource) -> tuple[When, When]:
    """A topic source's range, as `streamer replay --from/--to` reads it."""
    return (parse_when(source.topic_from or "earliest", "job.source.topic.from"),
            parse_when(source.topic_to or "latest", "job.source.topic.to"))


def _place(target: JobTarget) -> str:
    return f"table {target.table}" if target.table else f"parquet {target.parquet}" if target.parquet \
        else f"kv {target.kv}" if target.kv is not None else f"topic {target.topic}"
