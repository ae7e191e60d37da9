"""The Spark engine's entry point: ``spark-submit streamer/engines/spark_main.py`` scores a table into the lake on a Spark cluster.

Flags:

``--config FILE``
    the stream's config (model, contract, ``output.include``, ``lake:``), as ``streamer score`` reads it.
``--from TABLE|PATH``
    a Parquet file or folder, or an Iceberg table of the lake's catalog (``name`` or ``namespace.name``).
``--to-table NAME`` | ``--to-parquet PATH``
    an Iceberg table of the lake's catalog (made as ``streamer score`` makes it, with
    ``NAME_rejects``), or a Parquet folder (the run's rows in ``PATH/run_id=<run>/``, its rejects
    in ``PATH_rejects/run_id=<run>/``).
``--run-id ID``
    required: a retried submit carries the same id, and a run id that committed is refused (exit 2).
``--force``
    score a committed run id again, replacing its rows.

Example::

    spark-submit --master spark://host:7077 --jars "$(ls .cache/spark-jars/*/*.jar | paste -sd,)" \\
        streamer/engines/spark_main.py --config stream.yaml --from events/ --to-table nightly --run-id n-42

The executors need streamer and the ``spark`` extra installed (the project's image has them).
One line on stderr and exit 2 for a config error or a run id already committed, as ``streamer``
does (spark-submit passes a Python driver's stderr on to its own stdout); the summary (rows,
predictions, rejects, where) on stdout.
"""

from __future__ import annotations

import argparse
import sys
import time

from streamer.config_file import load_config
from streamer.engines.runs import prepare
from streamer.engines.scorer import ArrowScorer
from streamer.engines.spark import catalog_conf, score_dataframe
from streamer.engines.spark_io import ENGINE, read_source, write_run
from streamer.errors import EXIT_CONFIG, ConfigError
from streamer.extras import need
from streamer.house import new_run_id
from streamer.wiring.lake import Target


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="spark_main.py", description="Score a table into the lake on Spark.")
    parser.add_argument("--config", required=True, help="the stream's config file")
    parser.add_argument("--from", dest="source", required=True, metavar="TABLE|PATH",
                        help="a Parquet file or folder, or a table of the lake's catalog")
    to = parser.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-table", metavar="NAME", help="an Iceberg table of the lake's catalog")
    to.add_argument("--to-parquet", metavar="PATH", help="a Parquet folder: the run in PATH/run_id=<run>/")
    parser.add_argument("--run-id", required=True, help="the run's id; a committed one is refused")
    parser.add_argument("--force", action="store_true", help="score a committed run id again, replacing its rows")
    return parser.parse_args(argv)


def run(args: argparse.Namespace) -> str:
    """The run; its summary line."""
    need("spark", "spark_main.py")
    from pyspark.sql import SparkSession

    cfg = load_config(args.config)
    run_id = new_run_id(args.run_id)
    conf = catalog_conf(cfg.lake)
    if (args.to_parquet or "").startswith("s3://"):
        raise ConfigError("--to-parquet", "the Spark engine writes Parquet to a local or shared filesystem path")
    scorer = ArrowScorer(cfg, run_id)
    target = prepare(cfg.lake, Target(table=args.to_table, parquet=args.to_parquet), run_id, scorer.schema,
                     force=args.force)
    builder = SparkSession.builder.appName(f"streamer score {run_id}")
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    try:
        started = time.monotonic()
        frame, files = read_source(spark, cfg.lake, args.source)
        predictions, rejects = score_dataframe(frame, cfg, run_id, files, scorer)
        counts = (predictions.count(), rejects.count())
        write_run(cfg.lake, target, predictions, rejects)
    finally:
        spark.stop()
    return (f"spark: scored {sum(counts)} rows of {args.source} into {target.name} "
            f"({counts[0]} predictions, {counts[1]} rejects into {target.rejects_at}), run {run_id}, "
            f"engine {ENGINE}, in {time.monotonic() - started:.1f}s")


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    try:
        print(run(args), flush=True)
    except ConfigError as exc:
        print(f"streamer: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    return 0


if __name__ == "__main__":
    sys.exit(main())
