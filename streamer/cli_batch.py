"""The batch commands on the command line (replay, score, evaluate, dlq, produce, tail, features load): each one's
extra checked first, its stop wired to the signals, its summary printed and its exit code chosen.

As in cli.py, each command's module is imported when its command runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from streamer.cli_signals import stop_event
from streamer.errors import EXIT_CONFIG, EXIT_STOPPED, ConfigError, ReplayFinishedError
from streamer.extras import need

if TYPE_CHECKING:
    from streamer.config import Config


def dlq(args: argparse.Namespace) -> int:
    from streamer.commands import dlq
    from streamer.config import dead_letter_topic
    from streamer.config_file import load_unscored

    cfg = load_unscored(args.config)  # the model's file need not be here
    if args.dlq_command == "inspect":
        lines = dlq.inspect(cfg, args.limit, topic=args.topic)
        print("\n".join(lines) if lines else "no dead letters")
        return 0
    stop = stop_event()
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
        inspect = f"streamer dlq inspect --topic {args.topic}" if args.topic else "streamer dlq inspect"
        print(f"streamer: no dead letter in {args.topic or dead_letter_topic(cfg)} has {' '.join(result.not_found)} "
              f"({inspect} lists them)", file=sys.stderr)  # the topic searched: a replay's when --topic
        return EXIT_CONFIG
    return 0


def lake(args: argparse.Namespace) -> int:
    if args.command == "replay" and args.at_least_once:
        raise ConfigError("--at-least-once", "is for a replay to a topic: --to-table, --to-parquet and --to-kv "
                                             "write exactly once per run")
    if args.command == "score" and args.engine == "ray":
        return ray_score(args)
    for flag in ("--address", "--concurrency"):  # score's flags for Ray alone
        if getattr(args, flag[2:], None) is not None:
            raise ConfigError(flag, "is for --engine ray")
    need("lake", "score" if args.command == "score" else "--to-table" if args.to_table else
         "--to-parquet" if args.to_parquet else "--to-kv")
    if args.to_kv is not None:
        need("kv", "--to-kv")
    stop = stop_event()  # a signal while the model loads stops the run at its first chunk
    from streamer.commands import lake
    from streamer.config_file import load_config

    cfg = one_model(load_config(args.config), args)
    target = lake.Target(args.to_table, args.to_parquet, args.to_kv)
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
                model_path=Path(args.model_file).resolve() if args.model_file else None, model_version=args.model_version,
                stop=stop)
        except ReplayFinishedError:  # a resumed --workers run: a shard that had finished has nothing to read
            if args.finished_ok:
                print(f"replay {args.run_id}: shard {shard} had finished, nothing left to read")
                return 0
            raise
    print("\n".join(summary.lines()))
    if summary.counts.stopped:
        return EXIT_STOPPED
    if summary.all_rejected:
        print(f"streamer: every row of {summary.verb} {summary.run_id} was rejected (see {summary.rejects_at} "
              f"for the reasons); fix the model or the schemas, then run it again with --force", file=sys.stderr)
        return EXIT_CONFIG
    return 0


def ray_score(args: argparse.Namespace) -> int:
    """``streamer score --engine ray``: the run on a Ray cluster, its summary, exit 2 when every row was rejected."""
    need("ray", "--engine ray")
    from streamer.commands import lake
    from streamer.config_file import load_config

    cfg = one_model(load_config(args.config), args)
    run = lake.run_ray_score(cfg, args.from_, lake.Target(args.to_table, args.to_parquet, args.to_kv),
                             run_id=args.run_id, force=args.force, batch_size=args.batch_size, address=args.address,
                             concurrency=args.concurrency)
    print("\n".join(run.lines()))
    if run.all_rejected:
        print(f"streamer: every row of score {run.run_id} was rejected (see {run.rejects_at} for the reasons); fix "
              "the model or the schemas, then run it again with --force", file=sys.stderr)
        return EXIT_CONFIG
    return 0


def replay(args: argparse.Namespace) -> int:
    stop = stop_event()  # first: a Ctrl+C while the model loads is a stop, not a traceback
    from streamer.commands.replay import run_replay
    from streamer.config_file import load_config
    from streamer.kafka.ranges import parse_when

    cfg = one_model(load_config(args.config), args)
    summary = run_replay(
        cfg, parse_when(args.from_, "--from"), parse_when(args.to, "--to") if args.to else None,
        run_id=args.run_id, output_topic=args.output_topic,
        model_path=Path(args.model_file).resolve() if args.model_file else None,
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


def evaluate(args: argparse.Namespace) -> int:
    need("eval", "evaluate")
    if args.to_table:
        need("lake", "--to-table")
    if args.labels_from and not _a_file(args.labels_from):
        need("lake", "--labels-from")  # a table of the catalog
    stop = stop_event()
    from streamer.commands.evaluate import evaluate, parse_within
    from streamer.config_file import load_config
    from streamer.evaluate.labels import LabelsFrom
    from streamer.kafka.ranges import parse_when
    from streamer.wiring.evaluate import Evaluation, Outputs, RoutedTo

    given = [flag for flag, value in (("--labels-key", args.labels_key), ("--labels-column", args.labels_column),
                                      ("--labels-time", args.labels_time), ("--labels-within", args.labels_within))
             if value is not None]
    if given and not args.labels_from:
        raise ConfigError(given[0], "shapes the join of --labels-from; give --labels-from PATH|TABLE too")
    labels_from = None
    if args.labels_from:
        labels_from = LabelsFrom(args.labels_from, args.labels_key, args.labels_column or "label", args.labels_time,
                                 parse_within(args.labels_within))
    routed = load_config(args.config)
    cfg = one_model(routed, args)
    start, end = parse_when(args.from_, "--from"), parse_when(args.to or "latest", "--to")
    ev = Evaluation(Path(args.candidate), start, end, report=Path(args.report) if args.report else None,
                    candidate_version=args.candidate_version, labels=args.labels, labels_from=labels_from,
                    threshold=args.threshold, require=args.require,
                    outputs=Outputs(args.to_topic, args.to_table, args.to_parquet), batch_size=args.batch_size,
                    min_events=args.min_events, bootstrap=args.bootstrap,
                    routed=RoutedTo.of(routed, cfg.model.name))  # the champion's events of a route
    result = evaluate(cfg, ev, stop=stop)
    print("\n".join(result.lines))
    return result.exit_code


def one_model(cfg: Config, args: argparse.Namespace) -> Config:
    """The config a batch command scores with (config.replay_config): model ``--model``'s, taken
    here once. A replay of a routed config naming no model takes no one model's file or version."""
    from streamer.config import replay_config

    replay = args.command == "replay" and args.model is None and cfg.route.field is not None
    lake = replay and (args.to_table or args.to_parquet or args.to_kv is not None)
    if replay and not lake:
        for flag in ("--model-file", "--model-version"):
            if getattr(args, flag[2:].replace("-", "_")) is not None:
                raise ConfigError(flag, "is one model's: name it with --model (the config routes each event by "
                                        f"route.field {cfg.route.field!r})")
    if args.command != "replay":
        return replay_config(cfg, args.model, None)
    return replay_config(cfg, args.model, "lake" if lake else "topic")


def _a_file(where: str) -> bool:
    """``--labels-from`` names a file or folder (else a table), as evaluate/labels.py reads it."""
    return "/" in where or where.endswith((".csv", ".parquet")) or Path(where).exists()


def files(args: argparse.Namespace) -> int:
    from streamer.commands.produce import produce_file, tail
    from streamer.config import for_model
    from streamer.config_file import load_config, load_unscored

    if args.command == "produce":  # the model's file need not be here
        cfg = load_unscored(args.config)
        done = produce_file(cfg, Path(args.file), args.key_field, skip=args.skip, stop=stop_event())
        print("\n".join(done.lines(cfg.input.format)))
        return EXIT_STOPPED if done.stopped else 0
    scored = for_model(load_config(args.config), args.model)  # the model's prediction schema, and its topic
    tail(scored, sys.stdout, args.limit, args.topic)
    return 0


def features(args: argparse.Namespace) -> int:
    need("kv", "features load")
    need("lake", "features load")  # Arrow reads the rows
    stop = stop_event()
    from streamer.commands.features import OnlinePart, load_features
    from streamer.config_file import load_part, load_unscored

    cfg = load_unscored(args.config)  # the model's file need not be here
    prefix = args.prefix or load_part(args.config, OnlinePart).online.features.prefix
    summary = load_features(cfg.kv, cfg.lake, args.from_, prefix, cfg.input.entity_field, stop=stop)
    print("\n".join(summary.lines()))
    if summary.stopped:
        return EXIT_STOPPED
    if summary.all_skipped:
        print(f"streamer: no row of {args.from_} has an entity id in its column {cfg.input.entity_field!r} "
              "(input.entity_field)", file=sys.stderr)
        return EXIT_CONFIG
    return 0
