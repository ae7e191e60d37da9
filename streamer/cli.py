"""The `streamer` command line: each command dispatched to its module (cli_parser.py holds the
words, cli_batch.py the batch commands, cli_signals.py the stop).

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
from collections.abc import Callable, Sequence
from pathlib import Path

from streamer import cli_batch
from streamer.cli_parser import parser
from streamer.cli_signals import on_signals, stop_event
from streamer.errors import EXIT_CONFIG, EXIT_FATAL, ConfigError, StopRequested, StreamerError
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
            return cli_batch.dlq(args)
        if args.command == "lag-exporter":
            return _lag_exporter(args)
        if args.command == "replay" and not (args.to_table or args.to_parquet or args.to_kv is not None):
            return cli_batch.replay(args)
        if args.command in ("replay", "score"):
            return cli_batch.lake(args)
        if args.command in ("model", "schema"):
            return _model(args)
        if args.command == "evaluate":
            return cli_batch.evaluate(args)
        if args.command == "serve":
            need("online", "serve")
            from streamer.commands.serve import run_serve
            from streamer.config_file import load_config

            return run_serve(load_config(args.config))
        if args.command == "jobs":
            from streamer import cli_jobs

            return cli_jobs.jobs(args)
        if args.command == "worker":
            from streamer import cli_jobs

            return cli_jobs.worker(args)
        if args.command == "features":
            return cli_batch.features(args)
        if args.command in ("produce", "tail"):
            return cli_batch.files(args)
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
    on_signals(supervisor.stop)
    signal.signal(signal.SIGHUP, lambda *_: supervisor.forward(signal.SIGHUP))  # reload: every worker
    return supervisor.run()


def _run(config_path: str, worker_index: int | None = None) -> int:
    # Signals first: one that arrives while the model loads means "stop", not a hard kill.
    stop_requested: list[bool] = []
    stop: list[Callable[[], None]] = [lambda: stop_requested.append(True)]
    on_signals(lambda: stop[0]())
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
    stop = stop_event()
    try:
        exporter.run(args.interval, stop)
    finally:
        server.close()
        exporter.close()
    return 0










def _model(args: argparse.Namespace) -> int:
    from streamer.commands import model

    if args.command == "model":
        if args.model_command == "optimize":
            return _optimize(args)
        print(model.inspect(Path(args.path)))
        return 0
    from streamer.config import for_model
    from streamer.config_file import load_config

    print(model.schema(for_model(load_config(args.config), args.model)))
    return 0


def _optimize(args: argparse.Namespace) -> int:
    need("optimize", "model optimize")
    from streamer.commands.model import calibration_rows
    from streamer.model.optimize import optimize

    calibration = None
    if args.model and not args.calibrate_from:
        raise ConfigError("--model", "names the model whose contract reads --calibrate-from's rows: give --calibrate-from too")
    if args.calibrate_from:
        from streamer.config import for_model
        from streamer.config_file import load_config

        if not args.config:
            raise ConfigError("--config", "is required with --calibrate-from: it names the input topics and the contract")
        if args.calibrate_rows < 1:
            raise ConfigError("--calibrate-rows", f"must be >= 1, got {args.calibrate_rows}")
        calibration = calibration_rows(for_model(load_config(args.config), args.model), args.calibrate_from,
                                       args.calibrate_rows)
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
    if args.command == "dev" and args.dev_command == "redis":
        from streamer.commands.devredis import run_dev_redis

        return run_dev_redis(Path(args.data), args.port, sys.stdout, sys.stderr)
    if args.command == "dev":
        from streamer.commands.devkafka import run_dev_kafka

        return run_dev_kafka(Path(args.data), args.port, sys.stdout, sys.stderr)
    from streamer.commands.topics import TopicsPlan, create_topics, exit_code
    from streamer.config_file import load_unscored, model_names

    plan = TopicsPlan(args.partitions, args.replication, args.retention_ms)  # a bad flag: exit 2
    lines = create_topics(load_unscored(args.config), plan, models=model_names(args.config) or ())
    print("\n".join(lines))
    return exit_code(lines)




def _demo(events: int, brokers: int = 1) -> int:
    from streamer.commands.demo import run_demo

    if events <= 0:
        raise SystemExit("streamer demo: --events must be > 0")
    summary = run_demo(events, brokers)
    print("\n".join(["", "streamer demo summary", *summary.lines()]))
    return 0






if __name__ == "__main__":
    sys.exit(main())
