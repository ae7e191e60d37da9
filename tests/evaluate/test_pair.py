"""The pair scorer on fake servings: rows either model fails on, scores that are not finite, a
candidate that cannot score, each model first on every other batch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from streamer.errors import CandidateFailedError, InferenceError, ModelBrokenError
from streamer.evaluate.labels import Outcomes
from streamer.evaluate.pair import PairColumns, PairScorer
from streamer.formats.avro import load_schema
from streamer.lake.columns import PredictionColumns, prediction_arrow_schema
from streamer.model.signature import Columns
from streamer.pipeline.records import Messages, ModelId, Rows, Scored
from streamer.schemas import bundled
from tests.support.fakes import FakeMessage


@dataclass
class FakeServing:
    """Scores each row with ``fn`` of its first feature; poisons the rows in ``poison``."""

    version: str
    fn: Any
    poison: set[int] = field(default_factory=set)
    broken: bool = False
    calls: list[str] = field(default_factory=list)

    @property
    def model(self) -> ModelId:
        return ModelId("m", self.version, self.version * 3)

    def warm_up(self) -> None:
        pass

    def score(self, rows: Rows) -> Scored:
        self.calls.append(self.version)
        if self.broken:
            raise ModelBrokenError("every row of the batch failed")
        x = rows.features.arrays["features"][:, 0]
        out = self.fn(x).astype(np.float32).reshape(-1, 1)
        return Scored(Columns({"scores": out}), {i: InferenceError(f"row {i}") for i in self.poison if i < len(rows)},
                      model=self.model)


def rows(n: int) -> Rows:
    messages = Messages.of([FakeMessage("in", 0, i, b"") for i in range(n)])
    return Rows(messages, [f"e{i}" for i in range(n)], [f"a{i}" for i in range(n)], np.arange(n, dtype=np.int64),
                Columns({"features": np.linspace(0, 1, n, dtype=np.float32).reshape(-1, 1)}))


def scorer(champion: FakeServing, candidate: FakeServing, keep_ids: str | None = None) -> PairScorer:
    schema = load_schema(bundled("prediction.avsc"))
    columns = PredictionColumns(prediction_arrow_schema(schema))
    return PairScorer(champion, candidate, columns, PairColumns(schema, ["scores"]), "run", 0.5,  # type: ignore[arg-type]
                      Outcomes(), keep_ids)


def test_a_row_either_model_fails_on_is_a_reject_and_counted_against_that_model() -> None:
    pair = scorer(FakeServing("1", lambda x: x, poison={1}), FakeServing("2", lambda x: x, poison={3}), "event_id")
    table, rejects = pair.score(rows(6))
    assert table.num_rows == 4 and [m.offset() for _, m in rejects] == [1, 3]
    assert table.column("event_id").to_pylist() == ["e0", "e2", "e4", "e5"] == pair.ids
    assert (pair.timings[0].failed, pair.timings[1].failed) == (1, 1)
    obs = pair.observations()
    assert len(obs) == 4 and obs.outcome is None


def test_scores_that_are_not_finite_are_failures_left_out_of_the_comparison() -> None:
    pair = scorer(FakeServing("1", lambda x: x), FakeServing("2", lambda x: np.where(x > 0.5, np.nan, x)))
    table, rejects = pair.score(rows(4))
    assert table.num_rows == 4 and not rejects  # written as scored
    obs = pair.observations()
    assert len(obs) == 2 and np.isfinite(obs.candidate).all() and pair.timings[1].failed == 2


def test_a_candidate_that_cannot_score_stops_the_run_as_a_refusal_and_the_champion_is_no_candidate() -> None:
    with pytest.raises(CandidateFailedError, match="the candidate cannot score the range"):
        scorer(FakeServing("1", lambda x: x), FakeServing("2", lambda x: x, broken=True)).score(rows(2))
    with pytest.raises(ModelBrokenError):
        scorer(FakeServing("1", lambda x: x, broken=True), FakeServing("2", lambda x: x)).score(rows(2))


def test_each_model_goes_first_on_every_other_batch_and_sides_stay_apart() -> None:
    champion, candidate = FakeServing("1", lambda x: x), FakeServing("2", lambda x: 1 - x)
    calls: list[str] = []
    champion.calls = candidate.calls = calls
    pair = scorer(champion, candidate)
    tables = [pair.score(rows(3))[0] for _ in range(3)]
    assert calls == ["1", "2", "2", "1", "1", "2"]
    for t in tables:
        assert t.column("champion_scores").to_pylist() == pa.array([[0.0], [0.5], [1.0]], pa.list_(pa.float32())).to_pylist()
        assert t.column("candidate_model_version").to_pylist() == ["2"] * 3
    obs = pair.observations()
    assert obs.champion.tolist() == [0.0, 0.5, 1.0] * 3 and obs.candidate.tolist() == [1.0, 0.5, 0.0] * 3
    assert obs.champion_label.tolist() == [0, 1, 1] * 3 and obs.candidate_label.tolist() == [1, 1, 0] * 3
