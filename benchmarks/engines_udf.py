"""The UDF a user writes without streamer: a pandas UDF calling ONNX Runtime per batch, the contract converted by hand.

    spark-submit benchmarks/engines_udf.py EVENTS_FOLDER OUT_FOLDER MODEL.onnx

The comparison peer of ``benchmarks/engines.py``'s Spark figures, written as a Spark user writes
it: ``mapInPandas`` over the events, the model's session loaded once per Python worker, the
``features`` list turned into a float32 matrix by hand with the two checks the example model's
contract makes (32 values, none NaN or infinite), one ONNX Runtime call per batch, and one output
of every row: its score, or the reason it has none. What it leaves out beside the product: the
conversion table, nulls and fills, named inputs, the model's version and digest in each row, a
rejects table holding the original row.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import SparkSession

WIDTH = 32  # the example model's input: features[batch, 32], float32
OUT = "event_id string, entity_id string, event_time long, score float, reject_reason string"
_session: Any = None  # one ONNX Runtime session per Python worker


def model(path: str) -> Any:
    global _session
    if _session is None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1  # one Spark core, one thread
        _session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    return _session


def score(batches: Iterator[pd.DataFrame], path: str) -> Iterator[pd.DataFrame]:
    for pdf in batches:
        features = pdf["features"]
        widths = features.map(lambda v: -1 if v is None else len(v)).to_numpy()
        sized = widths == WIDTH
        matrix = np.zeros((len(pdf), WIDTH), np.float32)
        if sized.any():
            matrix[sized] = np.stack(features[sized].to_numpy()).astype(np.float32)
        finite = np.isfinite(matrix).all(axis=1)
        good = sized & finite
        scores = np.full(len(pdf), np.nan, np.float32)
        if good.any():
            scores[good] = model(path).run(None, {"features": matrix[good]})[0][:, 0]
        reason = np.where(~sized, "features: not 32 values", np.where(~finite, "features: NaN or infinite", None))
        yield pd.DataFrame({"event_id": pdf["event_id"], "entity_id": pdf["entity_id"],
                            "event_time": pdf["event_time"], "score": pd.Series(scores).where(good),
                            "reject_reason": reason})


def main() -> None:
    events, out, path = sys.argv[1:4]
    spark = SparkSession.builder.appName("hand-written-udf").getOrCreate()
    started = time.monotonic()  # the run's own seconds, as spark_main.py counts them: from the session on
    frame = spark.read.parquet(events)
    frame.mapInPandas(lambda batches: score(batches, path), OUT).write.mode("overwrite").parquet(out)
    print(f"udf: scored {events} into {out}, in {time.monotonic() - started:.1f}s", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
