"""The Arrow-batch scorer: the rows `streamer score` writes, batch by batch, picklable, with the rows' places."""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from streamer.commands.lake import Target, run_score
from streamer.engines.scorer import POSITION, REJECT, ArrowScorer, split_outcomes
from streamer.errors import ConfigError
from tests.lake.test_score import config, events

STAMPS = ("run_id", "scored_at", "rejected_at")  # the run's own, never equal across two runs


def unstamped(table: pa.Table) -> pa.Table:
    return table.drop_columns([c for c in STAMPS if c in table.column_names]).sort_by(
        [("source_partition", "ascending"), ("source_offset", "ascending")])


def test_batches_score_as_streamer_score_does_rejects_included(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    table = events(3000, {10: {"features": [1.0] * 3}, 2500: {"features": [float("nan")] * 32}})
    path = tmp_path / "events.parquet"
    pq.write_table(table, path, row_group_size=1000)
    run_score(cfg, str(path), Target(parquet=str(tmp_path / "out")), run_id="r1", batch_size=1024,
              progress=io.StringIO())
    want = ds.dataset(tmp_path / "out", format="parquet").to_table()
    want_rejects = ds.dataset(tmp_path / "out_rejects", format="parquet").to_table()

    scorer = pickle.loads(pickle.dumps(ArrowScorer(cfg, "r1", batch_rows=700)))  # as a worker gets it
    n = table.num_rows
    placed = table.append_column(POSITION[0], pa.array([str(path)] * n)).append_column(
        POSITION[1], pa.array(np.zeros(n, np.int32))).append_column(POSITION[2], pa.array(np.arange(n)))
    parts = [scorer.score(b) for b in placed.to_batches(max_chunksize=1100)]
    got = pa.concat_tables([p.predictions for p in parts])
    got_rejects = pa.concat_tables([p.rejects for p in parts])
    assert unstamped(got).equals(unstamped(want.select(got.column_names).cast(got.schema)))
    assert unstamped(got_rejects).equals(unstamped(want_rejects.select(got_rejects.column_names)
                                                   .cast(got_rejects.schema)))
    assert got_rejects.column("source_offset").to_pylist() == [10, 2500]

    outcomes = scorer.outcomes(placed)
    assert pc.sum(outcomes.column(REJECT).is_valid()).as_py() == 2
    back = split_outcomes(outcomes, scorer.schema)
    assert unstamped(back.predictions).equals(unstamped(got))
    assert unstamped(back.rejects).equals(unstamped(got_rejects))


def test_a_source_the_inputs_cannot_read_is_refused_before_a_row_is_scored(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    pq.write_table(events(10, {}).drop_columns(["features"]), tmp_path / "nofeatures.parquet")
    with pytest.raises(ConfigError, match="features"):
        ArrowScorer(cfg, "r1").check(str(tmp_path / "nofeatures.parquet"))
    pq.write_table(events(10, {}), tmp_path / "good.parquet")
    ArrowScorer(cfg, "r1").check(str(tmp_path / "good.parquet"))
