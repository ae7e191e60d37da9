"""The Spark engine's entry point: ``spark-submit streamer/engines/spark_main.py`` scores a table into the lake on a Spark cluster.

Flags:

``--config FILE``
    the stream's config (model, contract, ``output.include``, ``lake:``), as ``streamer score`` reads it.
``--model NAME``
    a model of the config's models (``models.named``, ``models.repository``) to score with; default: ``models.default``.
``--from TABLE|PATH``
    a Parquet file or folder on a local or shared filesystem (``s3://`` Parquet is refused: Spark
    reads it through Hadoop's S3 connector, which the ``spark`` extra leaves out), or an Iceberg
    table of the lake's catalog (``name`` or ``namespace.name``; an ``s3://`` warehouse needs Iceberg's AWS
    bundle on the classpath, as the ``spark`` image has it).
``--to-table NAME`` | ``--to-parquet PATH``
    an Iceberg table of the lake's catalog (made as ``streamer score`` makes it, with
    ``NAME_rejects``; one commit each, rejects first, replacing the rows of an earlier attempt), or a Parquet
    folder on a local or shared filesystem (the run's rows in ``PATH/run_id=<run>/event_date=.../``,
    its rejects in ``PATH_rejects/run_id=<run>/rejected_date=.../``, ``_SUCCESS`` written last).
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

from streamer.config import for_model
from streamer.config_file import load_config
from streamer.errors import EXIT_CONFIG, ConfigError
from streamer.extras import need
from streamer.house import new_run_id


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="spark_main.py", description="Score a table into the lake on Spark.")
    parser.add_argument("--config", required=True, help="the stream's config file")
    parser.add_argument("--model", metavar="NAME", help="a model of the config's models (default: models.default)")
    parser.add_argument("--from", dest="source", required=True, metavar="TABLE|PATH",
                        help="a Parquet file or folder, or a table of the lake's catalog")
    to = parser.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-table", metavar="NAME", help="an Iceberg table of the lake's catalog")
    to.add_argument("--to-parquet", metavar="PATH", help="a Parquet folder: the run in PATH/run_id=<run>/")
    parser.add_argument("--run-id", required=True, help="the run's id; a committed one is refused")
    parser.add_argument("--force", action="store_true", help="score a committed run id again, replacing its rows")
    return parser.parse_args(argv)


def run(args: argparse.Namespace) -> str:
    """The run, on a session of its own; its summary line. The spark extra's modules are imported
    here, once it is known to be installed: without it, one line says so."""
    need("spark", "spark_main.py")
    from pyspark.sql import SparkSession

    from streamer.engines.scorer import ArrowScorer
    from streamer.engines.spark import catalog_conf
    from streamer.engines.spark_io import checked_run, score_table
    from streamer.wiring.lake import Target

    cfg = for_model(load_config(args.config), args.model)  # the one model the run scores with
    run_id = new_run_id(args.run_id)
    conf = catalog_conf(cfg.lake)
    target = Target(table=args.to_table, parquet=args.to_parquet)
    scorer = ArrowScorer(cfg, run_id)
    run = checked_run(cfg, args.source, target, run_id, scorer, force=args.force)  # refused before a session starts
    builder = SparkSession.builder.appName(f"streamer score {run_id}")
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    try:
        return score_table(spark, cfg, args.source, target, run_id, scorer=scorer, run=run).line()
    finally:
        spark.stop()


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
