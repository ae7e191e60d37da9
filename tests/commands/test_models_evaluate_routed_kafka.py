"""`evaluate --model NAME` of a routed config, on the real broker: the candidate is proved on the
events the route sends that model (one tenant's), the other tenants' passed over."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from streamer.cli import main
from streamer.commands.demo import produce_events
from streamer.formats.json_events import JsonCodec
from tests.commands.test_models_batch import ENCODER, models_config, offline
from tests.conftest import Topics
from tests.jobs.support import ROOT

pytestmark = [pytest.mark.kafka, pytest.mark.usefixtures("own_signals")]
MLP = ROOT / "models" / "fraud_mlp.onnx"


def test_evaluate_with_model_of_a_routed_config_proves_the_candidate_on_that_models_events(
        bootstrap: str, topics: Topics, tmp_path: Path) -> None:
    pytest.importorskip("sklearn")
    config = models_config(tmp_path, bootstrap, run=topics.group.removeprefix("group-"))
    text = config.read_text().replace("  format: avro\n", "  format: json\n", 1)
    text = "\n".join(line for line in text.splitlines() if "feature_event.avsc" not in line)
    config.write_text(text + "\nroute:\n  field: tenant\n  map: {a: acme, b: fraud_mlp}\n")
    x = np.random.default_rng(5).standard_normal((150, 32)).astype(np.float32)
    events = [{"event_id": f"e{i}", "entity_id": "c", "event_time": 1_700_000_000_000 + i,
               "tenant": "aab"[i % 3], "features": x[i].tolist()} for i in range(150)]
    produce_events(bootstrap, topics.input, ((b"c", JsonCodec().encode(e)) for e in events))
    report = tmp_path / "report"
    assert main(["evaluate", "--config", str(config), "--model", "acme", "--candidate", str(MLP),
                 "--from", "earliest", "--report", str(report), "--min-events", "10", "--bootstrap", "10"]) == 0
    figures = json.loads((report / "report.json").read_text())
    assert (figures["run"]["champion"]["name"], figures["run"]["champion"]["version"]) == ("acme", "7")
    got = {r["event_id"]: r for r in pq.read_table(report / "predictions").to_pylist()}
    ids = [i for i in range(150) if events[i]["tenant"] == "a"]  # acme's tenant alone
    assert sorted(got) == sorted(f"e{i}" for i in ids)
    np.testing.assert_array_equal(np.array([got[f"e{i}"]["champion_scores"] for i in ids], np.float32),
                                  offline(ENCODER, x[ids]))
