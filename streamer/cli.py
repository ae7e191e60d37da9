"""The `streamer` command line: argument parsing and wiring only."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from types import FrameType

from streamer.errors import EXIT_CONFIG, EXIT_FATAL, STAGES, ConfigError, StopRequested, StreamerError


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="streamer", description=__doc__)
    parser.add_argument("--log-level", default=os.environ.get("STREAMER_LOG_LEVEL", "INFO"))
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="score events from Kafka until SIGTERM or SIGINT")
    run.add_argument("--config", required=True, help="YAML config file")
    run.add_argument("--workers", type=int, default=1,
                     help="processes on this host, each a member of the group (default 1)")
    run.add_argument("--worker-index", type=int, help=argparse.SUPPRESS)  # set by the supervisor
    dlq = sub.add_parser("dlq", help="inspect or redrive dead letters")
    dlq_sub = dlq.add_subparsers(dest="dlq_command", required=True)
    inspect = dlq_sub.add_parser("inspect", help="print one line per dead letter")
    inspect.add_argument("--config", required=True)
    inspect.add_argument("--limit", type=int)
    redrive = dlq_sub.add_parser("redrive", help="re-publish dead letters to their original topic")
    redrive.add_argument("--config", required=True)
    redrive.add_argument("--stage", choices=STAGES)
    redrive.add_argument("--offset", action="append", default=[], type=_place, metavar="PARTITION:OFFSET",
                         help="only the letter at this place of the dead-letter topic (as inspect shows it); "
                              "repeatable")
    redrive.add_argument("--event-id", action="append", default=[], metavar="ID",
                         help="only the letters of this event id; repeatable")
    redrive.add_argument("--limit", type=int)
    lag = sub.add_parser("lag-exporter", help="export a group's lag, with or without live members")
    lag.add_argument("--config", help="the processors' YAML config, of which only kafka, input.group_id, "
                                      "input.topics and metrics are read (no model or schema files needed)")
    lag.add_argument("--bootstrap", "--bootstrap-server", help="instead of --config: the cluster (plaintext)")
    lag.add_argument("--group", help="instead of --config: the consumer group")
    lag.add_argument("--topics", help="instead of --config: comma-separated topics")
    lag.add_argument("--host", default=None, help="bind address (default metrics.host or 127.0.0.1)")
    lag.add_argument("--port", type=int, default=None,
                     help="port (default metrics.port - 1 or 9399: metrics.port + i are run --workers' ports)")
    lag.add_argument("--interval", type=float, default=15.0, help="seconds between collections")
    rp = sub.add_parser("replay", help="score a bounded range of the input topics (backfill)")
    rp.add_argument("--config", required=True)
    rp.add_argument("--from", dest="from_", required=True,
                    help="ISO-8601 time, a duration ago (2h), earliest, or partition:offset,...")
    rp.add_argument("--to", help="same forms; default: the end offsets when the run starts")
    rp.add_argument("--output-topic", help="default: <output.topic>.backfill")
    rp.add_argument("--model", help="another ONNX model file")
    rp.add_argument("--model-version", help="the version recorded in the predictions")
    rp.add_argument("--run-id", help="resume or name a run (default: a new one)")
    rp.add_argument("--force", action="store_true", help="run a finished run id again")
    rp.add_argument("--batch-size", type=int,
                    help="rows per model call (default: 4096, or batching.max_size when larger)")
    rp.add_argument("--max-wait-ms", type=int, help="batch wait (default: batching.max_wait_ms)")
    rp.add_argument("--allow-live-output", action="store_true",
                    help="allow --output-topic to be the live output topic")
    model = sub.add_parser("model", help="look at a model before serving it")
    model_sub = model.add_subparsers(dest="model_command", required=True)
    inspect_model = model_sub.add_parser("inspect", help="its inputs and outputs, a starting config, the "
                                                         "prediction schema that config produces")
    inspect_model.add_argument("path", help="the .onnx file")
    schema = sub.add_parser("schema", help="print the prediction schema a config produces (its model checked)")
    schema.add_argument("--config", required=True)
    check = sub.add_parser("check", help="a dry run of start-up: config, model, cluster, topics, registry; "
                                         "each problem named (exit 2), nothing consumed or produced")
    check.add_argument("--config", required=True)
    check.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the cluster (default 10)")
    produce = sub.add_parser("produce", help="publish events from a JSON Lines, CSV or Parquet file in the input format")
    produce.add_argument("--config", required=True)
    produce.add_argument("file", help="events: .jsonl / .ndjson (one object a line), .csv (a header row) or .parquet")
    produce.add_argument("--key-field", help="the field whose value keys each event (default input.entity_field)")
    tail = sub.add_parser("tail", help="print the output topic's predictions as JSON lines (read_committed)")
    tail.add_argument("--config", required=True)
    tail.add_argument("--topic", help="a prediction topic to read (default output.topic), e.g. <output.topic>.backfill")
    tail.add_argument("--limit", type=int, help="stop after this many")
    demo = sub.add_parser("demo", help="start or find a broker, score synthetic events, summarise")
    demo.add_argument("--events", type=int, default=100_000)
    demo.add_argument("--brokers", type=int, choices=(1, 3), default=1,
                      help="start a single broker, or a three-node cluster (replication 3)")
    dev = sub.add_parser("dev", help="development tools")
    dev_sub = dev.add_subparsers(dest="dev_command", required=True)
    dev_kafka = dev_sub.add_parser("kafka", help="run the project's KRaft broker in the foreground until Ctrl+C")
    dev_kafka.add_argument("--data", default=".cache/dev-kafka",
                           help="its data folder, kept across restarts (default .cache/dev-kafka)")
    dev_kafka.add_argument("--port", type=int, default=9092, help="port on 127.0.0.1 (default 9092)")
    topics = sub.add_parser("topics", help="the topics a config reads and writes")
    topics_sub = topics.add_subparsers(dest="topics_command", required=True)
    create = topics_sub.add_parser("create", help="create the input, output, dead-letter (and shadow) topics; "
                                                  "existing ones are reported, not an error")
    create.add_argument("--config", required=True)
    create.add_argument("--partitions", type=int, default=3, help="for each topic created (default 3)")
    create.add_argument("--replication", type=int, default=1, help="replication factor (default 1)")
    create.add_argument("--retention-ms", type=int, help="retention.ms of each topic created (default: the broker's)")
    args = parser.parse_args(argv)
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
        if args.command == "replay":
            return _replay(args)
        if args.command in ("model", "schema"):
            return _model(args)
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


def _supervise(config_path: str, workers: int) -> int:
    from streamer.commands.workers import Supervisor, spawn_worker
    from streamer.config_file import load_config
    from streamer.errors import ConfigError

    if workers < 1:
        raise ConfigError("--workers", f"must be >= 1, got {workers}")
    load_config(config_path)  # a bad config fails here once, not in every worker
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

    from streamer.config import redacted
    from streamer.config_file import load_config
    from streamer.wiring import build_processor

    cfg = load_config(config_path)
    if worker_index is not None:
        from streamer.commands.workers import for_worker

        cfg = for_worker(cfg, worker_index)
    logging.getLogger("streamer").info("kafka settings: %s", redacted(cfg))
    try:
        processor = build_processor(cfg, stopping=lambda: bool(stop_requested))
    except StopRequested:  # SIGTERM while start-up waited for the cluster: nothing ran
        return 0
    stop[0], reload[0] = processor.stop, processor.reload
    if stop_requested:
        return 0
    processor.run()
    return 0


def _dlq(args: argparse.Namespace) -> int:
    from streamer.commands import dlq
    from streamer.config_file import load_config

    cfg = load_config(args.config)
    if args.dlq_command == "inspect":
        lines = dlq.inspect(cfg, args.limit)
        print("\n".join(lines) if lines else "no dead letters")
        return 0
    result = dlq.redrive(cfg, args.stage, args.limit, offsets=args.offset, event_ids=args.event_id)
    print(f"redriven {result.redriven}, refused {result.refused} (redriven "
          f"{cfg.processing.max_redrives} times already), skipped {result.skipped} (other stages, or cut short), "
          f"already redriven {result.already}"
          + (f", not found {' '.join(result.not_found)}" if result.not_found else ""))
    return 0


def _place(text: str) -> tuple[int, int]:
    """``--offset PARTITION:OFFSET``; argparse names a bad one (exit 2)."""
    from streamer.commands.dlq import parse_place

    try:
        return parse_place(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


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


def _replay(args: argparse.Namespace) -> int:
    from pathlib import Path

    from streamer.commands.replay import parse_when, run_replay
    from streamer.config_file import load_config

    cfg = load_config(args.config)
    summary = run_replay(
        cfg, parse_when(args.from_, "--from"), parse_when(args.to, "--to") if args.to else None,
        run_id=args.run_id, output_topic=args.output_topic,
        model_path=Path(args.model).resolve() if args.model else None,
        model_version=args.model_version, force=args.force, batch_size=args.batch_size,
        max_wait_ms=args.max_wait_ms, allow_live_output=args.allow_live_output)
    print("\n".join(summary.lines()))
    if summary.all_dead_lettered:  # a run that scored nothing is not a success
        print(f"streamer: every event of replay {summary.run_id} became a dead letter in "
              f"{summary.output_topic}.dlq (each one's streamer.dlq.exception.message header says why); "
              f"fix the model or the schemas, then run it again with --force", file=sys.stderr)
        return EXIT_CONFIG
    return 0


def _model(args: argparse.Namespace) -> int:
    from pathlib import Path

    from streamer.commands import model

    if args.command == "model":
        print(model.inspect(Path(args.path)))
        return 0
    from streamer.config_file import load_config

    print(model.schema(load_config(args.config)))
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
    from pathlib import Path

    if args.command == "dev":
        from streamer.commands.devkafka import run_dev_kafka

        return run_dev_kafka(Path(args.data), args.port, sys.stdout, sys.stderr)
    from streamer.commands.topics import TopicsPlan, create_topics, exit_code
    from streamer.config_file import load_config

    plan = TopicsPlan(args.partitions, args.replication, args.retention_ms)  # a bad flag: exit 2
    lines = create_topics(load_config(args.config), plan)
    print("\n".join(lines))
    return exit_code(lines)


def _files(args: argparse.Namespace) -> int:
    from pathlib import Path

    from streamer.commands.produce import produce_file, tail
    from streamer.config_file import load_config

    cfg = load_config(args.config)
    if args.command == "produce":
        n = produce_file(cfg, Path(args.file), args.key_field)
        print(f"produced {n} events to {cfg.input.topics[0]} ({cfg.input.format})")
        return 0
    tail(cfg, sys.stdout, args.limit, args.topic)
    return 0


def _demo(events: int, brokers: int = 1) -> int:
    from streamer.commands.demo import run_demo

    if events <= 0:
        raise SystemExit("streamer demo: --events must be > 0")
    summary = run_demo(events, brokers)
    print("\n".join(["", "streamer demo summary", *summary.lines()]))
    return 0


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
