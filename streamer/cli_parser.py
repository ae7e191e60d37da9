"""The `streamer` command line's words: every command, flag and help text a user reads."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

from streamer.errors import STAGES

DESCRIPTION = """\
Score Kafka events with an ONNX model: read feature events from input topics, score them in
micro-batches with ONNX Runtime, write one prediction per event to an output topic, and send
any event that cannot be scored to a dead-letter topic with the reason. Offsets are committed
only after the predictions are acknowledged."""

EPILOG = """\
a first hour, with the example config (deploy/config/example.yaml):
  make kafka                                      a broker on 127.0.0.1:9092 (second terminal)
  streamer topics create --config FILE            the input, output and dead-letter topics
  streamer check --config FILE                    everything start-up checks, touching nothing
  streamer produce --config FILE events.jsonl     send events from a file
  streamer run --config FILE                      score until Ctrl+C
  streamer tail --config FILE                     read the predictions
  streamer replay --config FILE --from earliest   score a range again, to a backfill topic
  streamer replay ... --to-table scores           ... or into an Apache Iceberg table
  streamer dlq inspect --config FILE              read the dead letters

exit codes: 0 done, 2 fix the config or the input file, 3 restart it (a broker or runtime failure).
`streamer COMMAND --help` describes one command; docs/ is the reference (make docs builds it)."""

CONFIG = "the YAML config file (docs/configuration.md lists every key)"
MODEL = "a model of the config's models (models.named, models.repository) to score with (default: models.default)"
DLQ_TOPIC = ("the dead-letter topic (default processing.dead_letter_topic); a replay's is <its output topic>.dlq, "
             "which its summary names")


def actions(parent: argparse.ArgumentParser, dest: str,
            metavar: str = "ACTION") -> Callable[[str, str, str], argparse.ArgumentParser]:
    """A command's actions (``dlq inspect``, ``topics create``): each added by name, summary, description."""
    sub = parent.add_subparsers(dest=dest, required=True, metavar=metavar)
    return lambda name, summary, description: sub.add_parser(name, help=summary, description=description)


def run_flags(cmd: argparse.ArgumentParser) -> None:
    """A resumable run's flags (replay, score)."""
    cmd.add_argument("--run-id", help="resume or name a run (default: a new one)")
    cmd.add_argument("--force", action="store_true", help="run a finished run id again, replacing what it wrote")


def lake_targets(cmd: argparse.ArgumentParser) -> None:
    where = cmd.add_mutually_exclusive_group()
    where.add_argument("--to-table", metavar="NAME",
                       help="an Apache Iceberg table of lake.catalog (made on first use, partitioned by day)")
    where.add_argument("--to-parquet", metavar="PATH",
                       help="a Parquet dataset, Hive-partitioned by event date (a folder or s3://bucket/prefix)")
    where.add_argument("--to-kv", metavar="PREFIX", nargs="?", const="",
                       help="the key-value store of kv.address (Redis): a hash per entity under PREFIX (default "
                            "kv.prefix), switched to when the run completes")


def parser() -> argparse.ArgumentParser:
    """The parser of ``streamer``: commands in the order a newcomer meets them."""
    top = argparse.ArgumentParser(prog="streamer", description=DESCRIPTION, epilog=EPILOG,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    top.add_argument("--log-level", default=os.environ.get("STREAMER_LOG_LEVEL", "INFO"),
                     help="DEBUG, INFO (default, or $STREAMER_LOG_LEVEL), WARNING or ERROR")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, summary: str, more: str = "") -> argparse.ArgumentParser:
        return sub.add_parser(name, help=summary, description=f"{summary[0].upper()}{summary[1:]}.{more}")

    demo = command("demo", "start a broker, score synthetic events with the example config, print a summary",
                   " Uses KAFKA_BOOTSTRAP instead when it is set.")
    demo.add_argument("--events", type=int, default=100_000, help="how many events (default 100000)")
    demo.add_argument("--brokers", type=int, choices=(1, 3), default=1,
                      help="a single broker, or a three-node cluster with replication 3 (default 1)")

    dev = command("dev", "tools for a development machine")
    dev_tool = actions(dev, "dev_command", "TOOL")
    dev_kafka = dev_tool(
        "kafka", "run a Kafka broker in the foreground until Ctrl+C",
        "Run the project's Apache Kafka broker (KRaft, one node) in the foreground on "
        "127.0.0.1:PORT until Ctrl+C. Its data stays in the data folder across restarts.")
    dev_kafka.add_argument("--data", default=".cache/dev-kafka",
                           help="its data folder, kept across restarts (default .cache/dev-kafka)")
    dev_kafka.add_argument("--port", type=int, default=9092, help="port on 127.0.0.1 (default 9092)")
    dev_redis = dev_tool(
        "redis", "run a Redis server (Debian's redis-server) in the foreground until Ctrl+C",
        "Run Debian's redis-server in the foreground on 127.0.0.1:PORT until Ctrl+C, with a password: "
        "$REDIS_PASSWORD, or a new one printed with the address. Its data stays in the data folder "
        "across restarts. The kv: store of --to-kv, online answers and features.")
    dev_redis.add_argument("--data", default=".cache/dev-redis",
                           help="its data folder, kept across restarts (default .cache/dev-redis)")
    dev_redis.add_argument("--port", type=int, default=6379, help="port on 127.0.0.1 (default 6379)")

    topics = command("topics", "manage the topics a config reads and writes")
    create = actions(topics, "topics_command")(
        "create", "create the input, output and dead-letter topics (and the shadow topic)",
        "Create the input, output and dead-letter topics a config names (and the shadow "
        "topic when shadow scoring is on). A topic that exists already is reported, not an error.")
    create.add_argument("--config", required=True, help=CONFIG)
    create.add_argument("--partitions", type=int, default=3, help="partitions of each topic created (default 3)")
    create.add_argument("--replication", type=int, default=1, help="replication factor (default 1)")
    create.add_argument("--retention-ms", type=int, help="retention.ms of each topic created (default: the broker's)")

    check = command("check", "check what start-up checks, touching nothing",
                    " The config, each model against the schemas, the cluster, the topics and the Schema "
                    "Registry: one line each, ok or FAIL with the config key to change. Exit 0 when all are "
                    "ok, 2 otherwise. Nothing is consumed, produced or registered.")
    check.add_argument("--config", required=True, help=CONFIG)
    check.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the cluster (default 10)")

    produce = command("produce", "send events from a file to the input topic, in the input format",
                      " A value that does not fit its field's type is refused with the file, line and "
                      "field (exit 2), and nothing is sent. SIGTERM or Ctrl+C stops the sending: what was sent "
                      "is acknowledged, the summary gives the --skip that produces the rest, exit 6.")
    produce.add_argument("--config", required=True, help=CONFIG)
    produce.add_argument("file", help="JSON Lines (.jsonl, .ndjson), CSV with a header row (.csv) or Parquet")
    produce.add_argument("--key-field", help="the field whose value keys each event (default input.entity_field)")
    produce.add_argument("--skip", type=int, default=0, metavar="N",
                         help="leave out the file's first N events (a stopped produce prints the N that "
                              "produces the rest)")

    run = command("run", "score events until Ctrl+C or SIGTERM",
                  " On a signal it finishes the open batch, waits for the acknowledgements, commits and "
                  "exits 0; a second signal exits at once.")
    run.add_argument("--config", required=True, help=CONFIG)
    run.add_argument("--workers", type=int, default=1,
                     help="processes on this host, each a member of the consumer group (default 1)")
    run.add_argument("--worker-index", type=int, help=argparse.SUPPRESS)  # set by the supervisor

    tail = command("tail", "print predictions as JSON lines, from the start of the topic to its end",
                   " Reads committed data only (read_committed) and commits nothing.")
    tail.add_argument("--config", required=True, help=CONFIG)
    tail.add_argument("--topic", help="a prediction topic (default output.topic), e.g. <output.topic>.backfill")
    tail.add_argument("--model", metavar="NAME", help="a model of the config's models: its predictions' schema, and "
                                                      "its topic with output.topic_per_model (default: models.default)")
    tail.add_argument("--limit", type=int, help="stop after this many")

    rp = command("replay", "score a bounded range of the input topics again, for a backfill",
                 " The range is bounded by the Kafka record timestamp (not the event's event_time), "
                 "or by offsets. Predictions go to <output.topic>.backfill unless --output-topic says "
                 "otherwise, or into the lake: an Apache Iceberg table (--to-table) or a Parquet dataset "
                 "(--to-parquet), or into the key-value store (--to-kv), exactly once per run. A run can be resumed by its id; SIGTERM or Ctrl+C stops it "
                 "after the open batch, committed, and exits 6.")
    rp.add_argument("--config", required=True, help=CONFIG)
    rp.add_argument("--from", dest="from_", required=True, metavar="WHEN",
                    help="ISO-8601 time, a duration ago (2h), earliest, or partition:offset,...")
    rp.add_argument("--to", metavar="WHEN", help="same forms (default: the end offsets when the run starts)")
    rp.add_argument("--output-topic", help="default: <output.topic>.backfill")
    rp.add_argument("--model", metavar="NAME",
                    help="a model of the config's models to score every event with (default: routed by route.field "
                         "as the stream routes, else models.default)")
    rp.add_argument("--model-file", metavar="PATH", help="score with another ONNX model file (of --model's contract)")
    rp.add_argument("--model-version", help="the version the predictions carry")
    run_flags(rp)
    rp.add_argument("--batch-size", type=int,
                    help="rows per model call (default: 4096, or batching.max_size when larger)")
    rp.add_argument("--max-wait-ms", type=int, help="batch wait (default: batching.max_wait_ms)")
    rp.add_argument("--allow-live-output", action="store_true",
                    help="allow --output-topic to be the live output topic")
    rp.add_argument("--at-least-once", action="store_true",
                    help="to a topic: write without Kafka transactions (default: exactly once); a resumed run "
                         "may write again what the stopped run wrote after its last commit, and its summary says "
                         "how many at most")
    lake_targets(rp)
    rp.add_argument("--workers", type=int, default=1,
                    help="into the lake: split the partitions over N processes on this host (default 1)")
    rp.add_argument("--shard", metavar="I/N",
                    help="into the lake: take only the partitions p with p %% N == I (a Kubernetes Indexed "
                         "Job's pod: $(JOB_COMPLETION_INDEX)/N); needs --run-id")
    rp.add_argument("--finished-ok", action="store_true",  # --workers' workers: a resumed run's finished shards
                    help=argparse.SUPPRESS)

    sc = command("score", "score the rows of Parquet files or an Iceberg table into the lake, no Kafka",
                 " Reads batch by batch through Arrow (memory stays bounded) with the config's model.inputs, "
                 "model.outputs and output.include; rows that cannot be scored go to <target>_rejects with "
                 "the reason and the row. Exactly once per run: a run can be resumed by its id; SIGTERM or Ctrl+C "
                 "stops it after the open batch, committed, and exits 6.")
    sc.add_argument("--config", required=True, help=CONFIG)
    sc.add_argument("--model", metavar="NAME", help=MODEL)
    sc.add_argument("--from", dest="from_", required=True, metavar="PATH|TABLE",
                    help="a Parquet file, a folder of them (local or s3://), or an Iceberg table's name")
    lake_targets(sc)
    run_flags(sc)
    sc.add_argument("--batch-size", type=int, help="rows per model call (default 8192); on Ray, rows per batch")
    sc.add_argument("--engine", choices=("local", "ray"), default="local",
                    help="local (default): this process; ray: Ray Data's actor pool of scorers on the cluster of "
                         "--address (the ray extra), writing --to-table or --to-parquet once per run id")
    sc.add_argument("--address", metavar="ADDR",
                    help="with --engine ray: the Ray cluster's address, host:port (default $RAY_ADDRESS, else a "
                         "Ray started in this process)")
    sc.add_argument("--concurrency", type=int, metavar="N",
                    help="with --engine ray: scoring actors in the pool, each loading the model once "
                         "(default: the cluster's CPUs less one)")

    jb = command("jobs", "submit batch jobs to the workers' queue, and follow them",
                 " A job is a spec (YAML or JSON): a source (Parquet files or a folder, an Iceberg table, a topic's "
                 "range), a target (an Iceberg table, a Parquet dataset, a topic), and optionally a model, not_before, "
                 "within (its window), priority, labels, a schedule or a trigger. Its id is its run id: a job "
                 "retried or submitted twice scores each row once. See the Batch jobs page.")
    act = actions(jb, "action")
    sub_ = act("submit", "queue a job spec", "Queue a job spec (a schedule's slot with --slot).")
    sub_.add_argument("--config", required=True, help=CONFIG)
    sub_.add_argument("spec", help="the job spec file (YAML or JSON)")
    sub_.add_argument("--slot", metavar="TIME|latest",
                      help="a scheduled spec's slot: latest (or now: the schedule's latest time at or before "
                           "the present) or the slot's time")
    sub_.add_argument("--id", help="the job's id (default: the spec's, else one made of its name and the time)")
    for name, summary in (("status", "show a job's status"), ("cancel", "cancel a job (a running one stops at "
                                                                         "its next commit)"),
                          ("wait", "wait for a job's end: exit 0 completed, 1 failed, expired or cancelled"),
                          ("retry", "queue a failed or cancelled job again: it resumes from its last commit")):
        one = act(name, summary, f"{summary[0].upper()}{summary[1:]}.")
        one.add_argument("--config", required=True, help=CONFIG)
        one.add_argument("id", help="the job's id")
        if name == "status":
            one.add_argument("--json", action="store_true", help="the status record as JSON")
        if name == "wait":
            one.add_argument("--timeout", type=float, default=None, help="seconds to wait at most (exit 3 after)")
    ls = act("list", "list the jobs and the schedules' missed slots", "List the jobs and the missed slots.")
    ls.add_argument("--config", required=True, help=CONFIG)
    ls.add_argument("--status", help="only the jobs in this state (queued, running, completed, failed, expired, "
                                     "cancelling, cancelled)")
    watch = act("watch", "submit a job for each new snapshot or file of a triggered spec",
                "Submit a job for each new snapshot of the trigger's table, or new complete Parquet files of its folder.")
    watch.add_argument("--config", required=True, help=CONFIG)
    watch.add_argument("spec", help="the triggered job spec (YAML or JSON)")
    watch.add_argument("--once", action="store_true", help="look once and exit (a CronJob's way)")
    watch.add_argument("--interval", type=float, default=30.0, help="seconds between looks (default 30)")

    wk = command("worker", "run batch jobs from the jobs' queue, one at a time, as a member of the workers' group",
                 " Takes jobs from jobs.topic in the consumer group jobs.group_id and runs each with the config's "
                 "model (the job spec's model: one of the config's models). A worker that dies mid-job leaves it to the group: another worker resumes it from its last "
                 "commit. SIGTERM stops the job at its next commit (another worker resumes it) and exits 0.")
    wk.add_argument("--config", required=True, help=CONFIG)
    wk.add_argument("--name", help="the worker's name in the jobs' statuses (default: host name and process id)")

    sv = command("serve", "answer online over the Open Inference Protocol (HTTP and gRPC), no Kafka",
                 " Serves the config's model on online.host: the protocol over HTTP on online.http_port and over "
                 "gRPC on online.grpc_port, requests batched by the stream's flush policy, each with a deadline "
                 "(a request that cannot meet it is refused at once with 503). SIGTERM: admitted requests are "
                 "answered, new ones refused, exit 0.")
    sv.add_argument("--config", required=True, help=CONFIG)

    ft = command("features", "features that online requests fetch by entity id")
    load = actions(ft, "features_command")(
        "load", "write rows of Parquet files or an Iceberg table as a Redis hash per entity",
        "Write each row of Parquet files or an Iceberg table as the Redis hash <prefix>:<entity id> of the "
        "kv: store (input.entity_field is the entity column; every other column a field), which "
        "online.features.kind redis reads. Reads batch by batch through Arrow; rows without an entity id are "
        "skipped and named. SIGTERM or Ctrl+C stops it between two pipelines, exit 6; run it again to load every row.")
    load.add_argument("--config", required=True, help=CONFIG)
    load.add_argument("--from", dest="from_", required=True, metavar="PATH|TABLE",
                      help="a Parquet file, a folder of them (local or s3://), or an Iceberg table's name")
    load.add_argument("--prefix", help="the hashes' key prefix (default online.features.prefix)")

    ev = command("evaluate", "prove a candidate model against the champion on a replayed range",
                 " Reads the range once, in its own consumer group, and scores every batch with the config's "
                 "model (the champion) and the candidate. Writes both predictions side by side (champion_* and "
                 "candidate_* columns), a report (report.html, self-contained, and report.json with every figure) "
                 "and judges --require. Exit 0: every condition holds; 5: one failed or could not be computed "
                 "(the report is written either way); 2: the candidate cannot serve the config; 6: stopped by SIGTERM or "
                 "Ctrl+C (the report covers what was read).")
    ev.add_argument("--config", required=True, help=CONFIG)
    ev.add_argument("--model", metavar="NAME", help="the champion: a model of the config's models, its contract the "
                                                    "candidate's; with a route, the events it sends that model are "
                                                    "scored by both (default: models.default)")
    ev.add_argument("--candidate", required=True, metavar="PATH", help="the candidate's .onnx file")
    ev.add_argument("--candidate-version", help="the version its predictions carry (default: the file's name)")
    ev.add_argument("--from", dest="from_", required=True, metavar="WHEN", help="as replay: 7d, an ISO-8601 time, "
                    "earliest, or partition:offset,...")
    ev.add_argument("--to", metavar="WHEN", help="same forms (default: the end offsets when the run starts)")
    known = ev.add_mutually_exclusive_group()
    known.add_argument("--labels", metavar="FIELD", help="the outcome is this field of the event (0/1, true/false)")
    known.add_argument("--labels-from", metavar="PATH|TABLE",
                       help="outcomes from a CSV or Parquet file, a folder, or an Iceberg table of lake.catalog")
    ev.add_argument("--labels-key", choices=("event_id", "entity_id"),
                    help="what --labels-from joins on (default: event_id when it has the column)")
    ev.add_argument("--labels-column", help="the outcome's column in --labels-from (default label)")
    ev.add_argument("--labels-time", metavar="COLUMN",
                    help="on entity_id: the outcome's time (a timestamp, a date, or ms since the epoch); an event "
                         "takes its entity's first outcome at or after it (default label_time)")
    ev.add_argument("--labels-within", metavar="DURATION",
                    help="on entity_id: only an outcome this soon after the event (7d, 12h)")
    ev.add_argument("--threshold", type=float,
                    help="a decision is score >= this (default shadow.flip_threshold, 0.5)")
    ev.add_argument("--require", metavar="CONDITIONS",
                    help='the gate, e.g. "auc_delta>=-0.005,agreement>=0.99,p99_abs_delta<=0.02" '
                         "(docs/evaluate.md lists the metrics)")
    ev.add_argument("--report", metavar="DIR", help="the report's folder (default evaluation-<run id>)")
    side = ev.add_mutually_exclusive_group()
    side.add_argument("--to-topic", metavar="TOPIC", help="the side-by-side predictions to this topic "
                                                          "(made like output.topic when missing)")
    side.add_argument("--to-table", metavar="NAME", help="... into this Iceberg table of lake.catalog")
    side.add_argument("--to-parquet", metavar="PATH", help="... into this Parquet dataset (default: "
                                                           "predictions/ in the report's folder)")
    ev.add_argument("--batch-size", type=int, help="rows per model call (default batching.max_size, the "
                                                   "stream's batches: the latency is the stream's)")
    ev.add_argument("--min-events", type=int, default=100,
                    help="fewer compared events (or labeled ones) make the metrics missing (default 100)")
    ev.add_argument("--bootstrap", type=int, default=200, help="resamples of the 95%% intervals (default 200)")

    dlq = command("dlq", "read dead letters, or send them back to their input topic")
    dlq_action = actions(dlq, "dlq_command")
    inspect = dlq_action("inspect", "one line per dead letter",
                         "One line per dead letter, oldest first: time, place in the "
                         "dead-letter topic, stage, original topic, partition and offset, "
                         "key, event id, whether it was redriven, attempt, reason.")
    inspect.add_argument("--config", required=True, help=CONFIG)
    inspect.add_argument("--limit", type=int, help="stop after this many")
    inspect.add_argument("--topic", metavar="NAME", help=DLQ_TOPIC)
    redrive = dlq_action("redrive", "send dead letters back to their original topic",
                         "Send dead letters back to their original topic: the original "
                         "key, value and headers, unchanged, with the redrive count raised. "
                         "Fix the producer or the model first. A later run skips letters already sent back. "
                         "SIGTERM or Ctrl+C stops it between two letters, what was sent committed, exit 6.")
    redrive.add_argument("--config", required=True, help=CONFIG)
    redrive.add_argument("--stage", choices=STAGES, help="only the letters of this stage")
    redrive.add_argument("--offset", action="append", default=[], type=_place, metavar="PARTITION:OFFSET",
                         help="only the letter at this place of the dead-letter topic (as inspect shows it); "
                              "repeatable")
    redrive.add_argument("--event-id", action="append", default=[], metavar="ID",
                         help="only the letters of this event id; repeatable")
    redrive.add_argument("--limit", type=int, help="stop after this many")
    redrive.add_argument("--topic", metavar="NAME", help=DLQ_TOPIC)

    model = command("model", "look at a model before serving it")
    model_action = actions(model, "model_command")
    inspect_model = model_action(
        "inspect", "its inputs and outputs, a starting config, and the prediction schema it gives",
        "Print an ONNX model's inputs and outputs, a starting config for it, and the prediction "
        "schema that config gives.")
    inspect_model.add_argument("path", help="the .onnx file")
    opt = model_action(
        "optimize", "a faster candidate: ONNX Runtime's optimized graph saved, optionally INT8",
        "Save ONNX Runtime's optimized graph of a model, and with --int8 quantize it to INT8 "
        "(dynamic; static with --calibrate-from, calibrated on rows of the input topics). The file records "
        "its parent's digest and the options in its metadata. A candidate to prove on history, not to serve unproven.")
    opt.add_argument("path", help="the .onnx file")
    opt.add_argument("--out", required=True, help="the candidate's file")
    opt.add_argument("--level", default="extended", choices=("basic", "extended", "all"),
                     help="graph optimizations (default extended; all adds layouts tied to this machine's CPU)")
    opt.add_argument("--int8", action="store_true", help="quantize to INT8 (dynamic unless --calibrate-from)")
    opt.add_argument("--calibrate-from", metavar="START..END",
                     help="static INT8, calibrated on rows of this range of the config's input topics (replay's "
                          "forms: 2h..latest, earliest..latest); needs --config")
    opt.add_argument("--calibrate-rows", type=int, default=10_000, help="rows to calibrate on (default 10000)")
    opt.add_argument("--config", help=f"{CONFIG}; for --calibrate-from")
    opt.add_argument("--model", metavar="NAME", help="with --calibrate-from: the model of the config's models whose "
                                                     "contract reads the rows (default: models.default)")
    schema = command("schema", "print the prediction schema a config gives (its model checked)")
    schema.add_argument("--config", required=True, help=CONFIG)
    schema.add_argument("--model", metavar="NAME", help="a model of the config's models (default: models.default)")

    lag = command("lag-exporter", "serve a consumer group's lag to Prometheus, with or without live members")
    lag.add_argument("--config", help="the processors' config; only kafka, input.group_id, input.topics and "
                                      "metrics are read (no model or schema files needed)")
    lag.add_argument("--bootstrap", "--bootstrap-server", help="instead of --config: the cluster (plaintext)")
    lag.add_argument("--group", help="instead of --config: the consumer group")
    lag.add_argument("--topics", help="instead of --config: comma-separated topics")
    lag.add_argument("--host", default=None, help="bind address (default metrics.host or 127.0.0.1)")
    lag.add_argument("--port", type=int, default=None,
                     help="port (default metrics.port - 1 or 9399: metrics.port + i are run --workers' ports)")
    lag.add_argument("--interval", type=float, default=15.0, help="seconds between collections (default 15)")
    return top


def _place(text: str) -> tuple[int, int]:
    """``--offset PARTITION:OFFSET``; argparse names a bad one (exit 2)."""
    from streamer.commands.dlq import parse_place  # the command's module, only when its flag is read

    try:
        return parse_place(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
