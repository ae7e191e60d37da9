"""The `streamer` command line: each command dispatched to its module (cli_parser.py holds the words).

Each command's module is imported when its command runs: ``streamer --help`` and the light
commands start at once, ONNX Runtime (and its CUDA probing) loads only for the commands that
score or read a model (never for ``dlq``, ``lag-exporter``, ``topics`` or ``dev``), and an optional
extra (lake, eval, online) only with its command.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType

from streamer.cli_parser import parser
from streamer.errors import EXIT_CONFIG, EXIT_FATAL, EXIT_STOPPED, ConfigError, StopRequested, StreamerError
from streamer.errors import ReplayFinishedError as ShardFinished
from streamer.extras import need


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # --workers starts processes of the same command
    worker = f"w{args.worker_index} " if getattr(args, "worker_index", None) is not None else ""
    logging.basicConfig(level=args.log_level.upper(),
                        format=f"%(asctime)s %(levelname)s {worker}%(name)s: %(message)s")
    try:
        if args.command == "run" and args.workers != 1:
            return _supervise(args.config, args.workers)
        if args.command == "run":
            return _run(args.config, args.worker_index)
        if args.command == "dlq":
            return _dlq(args)
        if args.command == "lag-exporter":
            return _lag_exporter(args)
        if args.command == "replay" and (args.to_table or args.to_parquet):
            if args.at_least_once:
                raise ConfigError("--at-least-once", "is for a replay to a topic: --to-table and --to-parquet "
                                                     "write exactly once per run")
            return _lake(args)
        if args.command in ("replay", "score"):
            return _replay(args) if args.command == "replay" else _lake(args)
        if args.command in ("model", "schema"):
            return _model(args)
        if args.command == "evaluate":
            return _evaluate(args)
        if args.command == "serve":
            need("online", "serve")
            from streamer.commands.serve import run_serve
            from streamer.config_file import load_config

            return run_serve(load_config(args.config))
        if args.command in ("produce", "tail"):
            return _files(args)
        if args.command == "check":
            return _check(args.config, args.timeout)
        if args.command in ("dev", "topics"):
            return _dev_or_topics(args)
        return _demo(args.events, args.brokers)
    except ConfigError as exc:
        print(f"streamer: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except StreamerError as exc:  # fenced, a fatal client error, a broker away past the start-up wait
        print(f"streamer: {exc}", file=sys.stderr)
        return EXIT_FATAL
    finally:
        if argv is None:  # the summary is out: a late signal (a stop forwarded as a worker ends) changes
            # nothing, instead of the teardown's default action taking it (exit 143 after a finished run)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            signal.signal(signal.SIGINT, signal.SIG_IGN)


def _supervise(config_path: str, workers: int) -> int:
    from streamer.commands.workers import Supervisor, spawn_worker
    from streamer.config_file import load_config

    if workers < 1:
        raise ConfigError("--workers", f"must be >= 1, got {workers}")
    if load_config(config_path).online.enabled:  # a bad config fails here once, not in every worker
        need("online", "online.enabled")
    supervisor = Supervisor(workers, lambda index: spawn_worker(config_path, index))
    _on_signals(supervisor.stop)
    signal.signal(signal.SIGHUP, lambda *_: supervisor.forward(signal.SIGHUP))  # reload: every worker
    return supervisor.run()


def _run(config_path: str, worker_index: int | None = None) -> int:
    # Signals first: one that arrives while the model loads means "stop", not a hard kill.
    stop_requested: list[bool] = []
    stop: list[Callable[[], None]] = [lambda: stop_requested.append(True)]
    _on_signals(lambda: stop[0]())
    reload: list[Callable[[], None]] = [lambda: None]  # SIGHUP: load the model again (not: hang up)
    signal.signal(signal.SIGHUP, lambda *_: reload[0]())

    from streamer.commands.workers import for_worker
    from streamer.config import redacted
    from streamer.config_file import load_config
    from streamer.wiring.online import running

    cfg = load_config(config_path)
    if cfg.online.enabled:
        need("online", "online.enabled")
    if worker_index is not None:
        cfg = for_worker(cfg, worker_index)
    logging.getLogger("streamer").info("kafka settings: %s", redacted(cfg))
    try:
        run = running(cfg, stopping=lambda: bool(stop_requested))  # the stream, and online beside it
    except StopRequested:  # SIGTERM while start-up waited for the cluster: nothing ran
        return 0
    stop[0], reload[0] = run.stop, run.reload
    if stop_requested:
        return 0
    run.run()  # an online server that could not serve (a port taken) raises here, the stream stopped
    return 0


def _dlq(args: argparse.Namespace) -> int:
    from streamer.commands import dlq
    from streamer.config import dead_letter_topic
    from streamer.config_file import load_unscored

    cfg = load_unscored(args.config)  # the model's file need not be here
    if args.dlq_command == "inspect":
        lines = dlq.inspect(cfg, args.limit, topic=args.topic)
        print("\n".join(lines) if lines else "no dead letters")
        return 0
    stop = _stop_event()
    result = dlq.redrive(cfg, args.stage, args.limit, offsets=args.offset, event_ids=args.event_id, topic=args.topic,
                         stop=stop)
    print(("redrive stopped: " if result.stopped else "")
          + f"redriven {result.redriven}, refused {result.refused} (redriven "
          f"{cfg.processing.max_redrives} times already), skipped {result.skipped} (other stages, or cut short), "
          f"already redriven {result.already}"
          + (f", not found {' '.join(result.not_found)}" if result.not_found and not result.stopped else ""))
    if result.stopped:  # what was sent is committed: the same command sends the rest (and finds the rest)
        print("the letters sent are committed; run the same command again to send the rest")
        return EXIT_STOPPED
    if result.not_found:  # an id asked for is not there: a wrong id, not a done job
        print(f"streamer: no dead letter in {dead_letter_topic(cfg)} has {' '.join(result.not_found)} "
              "(streamer dlq inspect lists them)", file=sys.stderr)
        return EXIT_CONFIG
    return 0


def _lag_exporter(args: argparse.Namespace) -> int:
    from prometheus_client import CollectorRegistry

    from streamer.config import librdkafka_config
    from streamer.config_file import load_part
    from streamer.observe.health import HealthServer, Status
    from streamer.observe.lag import LagConfig, LagExporter

    host, port = "127.0.0.1", 9399
    if args.config:
        # The processors' file, so the cluster's security settings and the group are theirs; only
        # its part the exporter uses is read (a pod of its own mounts no model or schemas).
        cfg = load_part(args.config, LagConfig)
        client, group, topics = librdkafka_config(cfg), cfg.input.group_id, list(cfg.input.topics)
        host, port = cfg.metrics.host, max(cfg.metrics.port - 1, 0)  # below the workers' ports
    elif args.bootstrap and args.group and args.topics:
        client, group, topics = {"bootstrap.servers": args.bootstrap}, args.group, args.topics.split(",")
    else:
        raise SystemExit("streamer lag-exporter: give --config, or --bootstrap, --group and --topics")
    registry = CollectorRegistry()
    exporter = LagExporter(client, group, topics, registry)
    server = HealthServer(registry, args.host or host, args.port if args.port is not None else port,
                          lambda: Status(healthy=True, ready=True))
    stop = threading.Event()
    _on_signals(stop.set)
    try:
        exporter.run(args.interval, stop)
    finally:
        server.close()
        exporter.close()
    return 0


def _lake(args: argparse.Namespace) -> int:
    need("lake", "score" if args.command == "score" else "--to-table" if args.to_table else "--to-parquet")
    stop = _stop_event()  # a signal while the model loads stops the run at its first chunk
    from streamer.commands import lake
    from streamer.config_file import load_config

    cfg = load_config(args.config)
    target = lake.Target(args.to_table, args.to_parquet)
    if args.command == "score":
        summary = lake.run_score(cfg, args.from_, target, run_id=args.run_id, force=args.force,
                                 batch_size=args.batch_size, stop=stop)
    else:
        from streamer.kafka.ranges import parse_when

        if args.workers != 1:  # the supervisor forwards signals to its workers instead
            return lake.supervise_replay(args.argv, cfg, args.workers, args.run_id, args.from_)
        shard = lake.parse_shard(args.shard)
        if shard.count > 1 and not args.run_id:
            raise ConfigError("--run-id", "is required with --shard: every shard of a run writes under one id")
        try:
            summary = lake.run_lake_replay(
                cfg, parse_when(args.from_, "--from"), parse_when(args.to or "latest", "--to"), target,
                run_id=args.run_id, shard=shard, force=args.force, batch_size=args.batch_size,
                model_path=Path(args.model).resolve() if args.model else None, model_version=args.model_version,
                stop=stop)
        except ShardFinished:  # a resumed --workers run: a shard that had finished has nothing to read
            if args.finished_ok:
                print(f"replay {args.run_id}: shard {shard} had finished, nothing left to read")
                return 0
            raise
    print("\n".join(summary.lines()))
    if summary.counts.stopped:
        return EXIT_STOPPED
    if summary.all_rejected:
        print(f"streamer: every row of {summary.verb} {summary.run_id} was rejected (see {summary.sink}_rejects "
              f"for the reasons); fix the model or the schemas, then run it again with --force", file=sys.stderr)
        return EXIT_CONFIG
    return 0


def _replay(args: argparse.Namespace) -> int:
    stop = threading.Event()
    _on_signals(stop.set)  # first: a Ctrl+C while the model loads is a stop, not a traceback
    from streamer.commands.replay import run_replay
    from streamer.config_file import load_config
    from streamer.kafka.ranges import parse_when

    cfg = load_config(args.config)
    summary = run_replay(
        cfg, parse_when(args.from_, "--from"), parse_when(args.to, "--to") if args.to else None,
        run_id=args.run_id, output_topic=args.output_topic,
        model_path=Path(args.model).resolve() if args.model else None,
        model_version=args.model_version, force=args.force, batch_size=args.batch_size,
        max_wait_ms=args.max_wait_ms, allow_live_output=args.allow_live_output,
        exactly_once=not args.at_least_once, stop=stop)
    print("\n".join(summary.lines()))
    if summary.stopped:
        return EXIT_STOPPED
    if summary.all_dead_lettered:  # a run that scored nothing is not a success
        print(f"streamer: every event of replay {summary.run_id} became a dead letter in "
              f"{summary.output_topic}.dlq (each one's streamer.dlq.exception.message header says why); "
              f"fix the model or the schemas, then run it again with --force", file=sys.stderr)
        return EXIT_CONFIG
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    need("eval", "evaluate")
    if args.to_table:
        need("lake", "--to-table")
    if args.labels_from and not _a_file(args.labels_from):
        need("lake", "--labels-from")  # a table of the catalog
    stop = _stop_event()
    from streamer.commands.evaluate import evaluate, parse_within
    from streamer.config_file import load_config
    from streamer.evaluate.labels import LabelsFrom
    from streamer.kafka.ranges import parse_when
    from streamer.wiring.evaluate import Evaluation, Outputs

    given = [flag for flag, value in (("--labels-key", args.labels_key), ("--labels-column", args.labels_column),
                                      ("--labels-time", args.labels_time), ("--labels-within", args.labels_within))
             if value is not None]
    if given and not args.labels_from:
        raise ConfigError(given[0], "shapes the join of --labels-from; give --labels-from PATH|TABLE too")
    labels_from = None
    if args.labels_from:
        labels_from = LabelsFrom(args.labels_from, args.labels_key, args.labels_column or "label", args.labels_time,
                                 parse_within(args.labels_within))
    cfg = load_config(args.config)
    start, end = parse_when(args.from_, "--from"), parse_when(args.to or "latest", "--to")
    ev = Evaluation(Path(args.candidate), start, end, report=Path(args.report) if args.report else None,
                    candidate_version=args.candidate_version, labels=args.labels, labels_from=labels_from,
                    threshold=args.threshold, require=args.require,
                    outputs=Outputs(args.to_topic, args.to_table, args.to_parquet), batch_size=args.batch_size,
                    min_events=args.min_events, bootstrap=args.bootstrap)
    result = evaluate(cfg, ev, stop=stop)
    print("\n".join(result.lines))
    return result.exit_code


def _a_file(where: str) -> bool:
    """``--labels-from`` names a file or folder (else a table), as evaluate/labels.py reads it."""
    return "/" in where or where.endswith((".csv", ".parquet")) or Path(where).exists()


def _model(args: argparse.Namespace) -> int:
    from streamer.commands import model

    if args.command == "model":
        if args.model_command == "optimize":
            return _optimize(args)
        print(model.inspect(Path(args.path)))
        return 0
    from streamer.config_file import load_config

    print(model.schema(load_config(args.config)))
    return 0


def _optimize(args: argparse.Namespace) -> int:
    need("optimize", "model optimize")
    from streamer.commands.model import calibration_rows
    from streamer.model.optimize import optimize

    calibration = None
    if args.calibrate_from:
        from streamer.config_file import load_config

        if not args.config:
            raise ConfigError("--config", "is required with --calibrate-from: it names the input topics and the contract")
        if args.calibrate_rows < 1:
            raise ConfigError("--calibrate-rows", f"must be >= 1, got {args.calibrate_rows}")
        calibration = calibration_rows(load_config(args.config), args.calibrate_from, args.calibrate_rows)
    done = optimize(Path(args.path), Path(args.out), level=args.level, int8=args.int8, calibration=calibration)
    print("\n".join(done.lines()))
    return 0


def _check(config_path: str, timeout_s: float) -> int:
    from streamer.commands.check import check
    from streamer.config_file import load_config

    findings = check(load_config(config_path), timeout_s)  # a bad config: ConfigError, exit 2
    print("\n".join(f.line() for f in findings))
    failed = [f for f in findings if not f.ok]
    print(f"{len(failed)} problem{'s' if len(failed) != 1 else ''}" if failed else "ready to run")
    return EXIT_CONFIG if failed else 0


def _dev_or_topics(args: argparse.Namespace) -> int:
    if args.command == "dev":
        from streamer.commands.devkafka import run_dev_kafka

        return run_dev_kafka(Path(args.data), args.port, sys.stdout, sys.stderr)
    from streamer.commands.topics import TopicsPlan, create_topics, exit_code
    from streamer.config_file import load_unscored

    plan = TopicsPlan(args.partitions, args.replication, args.retention_ms)  # a bad flag: exit 2
    lines = create_topics(load_unscored(args.config), plan)
    print("\n".join(lines))
    return exit_code(lines)


def _files(args: argparse.Namespace) -> int:
    from streamer.commands.produce import produce_file, tail
    from streamer.config_file import load_config, load_unscored

    if args.command == "produce":  # the model's file need not be here
        cfg = load_unscored(args.config)
        done = produce_file(cfg, Path(args.file), args.key_field, skip=args.skip, stop=_stop_event())
        print("\n".join(done.lines(cfg.input.format)))
        return EXIT_STOPPED if done.stopped else 0
    tail(load_config(args.config), sys.stdout, args.limit, args.topic)  # decodes with the prediction schema
    return 0


def _demo(events: int, brokers: int = 1) -> int:
    from streamer.commands.demo import run_demo

    if events <= 0:
        raise SystemExit("streamer demo: --events must be > 0")
    summary = run_demo(events, brokers)
    print("\n".join(["", "streamer demo summary", *summary.lines()]))
    return 0


def _stop_event() -> threading.Event:
    """A long command's stop: set by the first SIGTERM or SIGINT (see :func:`_on_signals`)."""
    stop = threading.Event()
    _on_signals(stop.set)
    return stop


def _on_signals(stop: Callable[[], None]) -> None:
    """First SIGTERM/SIGINT: graceful stop (flush, ack, commit). A second: exit at once.

    The second is left to the kernel's default action, not to a Python handler: Python runs
    handlers only between bytecodes, and a process stuck in a blocking librdkafka call (a commit
    to a coordinator that went away) must still die when told twice.
    """

    def first(signum: int, _frame: FrameType | None) -> None:
        logging.getLogger("streamer").info("signal %d: finishing the open batch, then exiting "
                                           "(send it again to exit at once)", signum)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        stop()

    signal.signal(signal.SIGTERM, first)
    signal.signal(signal.SIGINT, first)


if __name__ == "__main__":
    sys.exit(main())
