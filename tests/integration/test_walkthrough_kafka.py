"""docs/bring_your_own_model.md, executed: the walk-through stays true because this runs it.

Every fenced block of the page whose info string carries a ``walkthrough-<step>`` marker is taken
from the page as written: the Python blocks and the shell commands run verbatim (the shell ones
with the venv's ``streamer`` first on the PATH) in a temporary folder laid out like the repository
root (``streamer/schemas/`` and ``deploy/config/byom.yaml`` copied in), so the model the training block
writes lands where the config's default ``model.path`` looks for it. Printed excerpts
(``walkthrough-inspect-output``, ``walkthrough-schema-fields``, ``walkthrough-read-output``) must
appear in what the commands really print, and the config block must be ``deploy/config/byom.yaml``
byte for byte.

The broker part: ``streamer check`` as the page runs it, the page's three purchases sent by its
``streamer produce`` block plus 100 more, all scored by the processor that ``streamer run``
builds, every prediction compared with ONNX Runtime offline on the same rows (equal float32
bits), the null amounts checked as dead letters naming the field, and the page's
``streamer tail`` run against the output topic. The topics come from the test's fixture.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from streamer.commands.demo import produce_events
from streamer.config_file import load_config
from streamer.formats.configured import input_codec
from streamer.kafka.deadletter import header
from streamer.wiring.stream import build_processor
from tests.conftest import ROOT, Topics, read_all, run_until_outputs
from tests.support.pages import marked_blocks, run_block

pytestmark = pytest.mark.kafka

DOC = ROOT / "docs" / "bring_your_own_model.md"
CONFIG = ROOT / "deploy" / "config" / "byom.yaml"
BIN = Path(sys.executable).parent  # the venv's bin: python and the streamer script
# ```<language> walkthrough-<step>  ...  ``` at the start of lines
STEPS = {"walkthrough-train": "python", "walkthrough-inspect": "sh", "walkthrough-inspect-output": "text",
         "walkthrough-config": "yaml", "walkthrough-schema": "sh", "walkthrough-schema-fields": "text",
         "walkthrough-check": "sh", "walkthrough-produce": "sh", "walkthrough-run": "sh", "walkthrough-read": "sh",
         "walkthrough-read-output": "text"}
N_MORE = 100  # events the test adds to the page's three


def doc_blocks() -> dict[str, str]:
    return marked_blocks(DOC, "walkthrough", STEPS)


def excerpt_lines(excerpt: str) -> list[str]:
    """The lines an abridged excerpt shows: blank lines and ``...`` (any indent) are elisions."""
    return [line.rstrip() for line in excerpt.splitlines() if line.strip() not in ("", "...")]


def assert_in_order(shown: list[str], printed: str) -> None:
    """Each shown line is a whole line of ``printed``, in the order shown."""
    lines = iter(line.rstrip() for line in printed.splitlines())
    for line in shown:
        assert any(have == line for have in lines), f"{line!r} is not printed (in this order):\n{printed}"


def f32_bits(values: Any) -> np.ndarray:
    return np.asarray(values, dtype=np.float32).view(np.uint32)


def purchase(i: int, rng: np.random.Generator) -> dict[str, Any]:
    """Purchases like the training data; every 20th without an amount, every 7th of unknown age."""
    return {"event_id": f"t-{i}", "entity_id": f"card-{i % 13}", "event_time": 1_764_590_400_000 + i,
            "card": {"country": ["US", "DE", "FR", "BR"][i % 4], "issuer": None},
            "channel": ["web", "app", "pos"][i % 3],
            "amount": None if i % 20 == 0 else float(np.round(rng.lognormal(3, 1), 2)),
            "age_days": None if i % 7 == 3 else float(np.float32(rng.uniform(0, 2000))),
            "n_items": int(rng.integers(1, 11)), "placed_on": 20_423}


def offline(model: Path, events: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """ONNX Runtime on the CPU, one thread per operator as the processor runs it, on the rows the
    config feeds: null age_days filled with 0."""
    feed = {"country": np.array([[e["card"]["country"]] for e in events], object),
            "channel": np.array([[e["channel"]] for e in events], object),
            "amount": np.array([[e["amount"]] for e in events], np.float32),
            "age_days": np.array([[0.0 if e["age_days"] is None else e["age_days"]] for e in events], np.float32),
            "n_items": np.array([[e["n_items"]] for e in events], np.int64)}
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feed), strict=True))


def test_the_config_shown_is_the_shipped_file() -> None:
    assert doc_blocks()["walkthrough-config"] == CONFIG.read_text()
    assert shlex.split(doc_blocks()["walkthrough-run"]) == ["streamer", "run", "--config", "deploy/config/byom.yaml"]


def test_the_walkthrough_runs_as_written(bootstrap: str, topics: Topics, tmp_path: Path) -> None:
    blocks = doc_blocks()
    assert (BIN / "streamer").exists(), f"no streamer script beside {sys.executable}"
    # The repository root as the walk-through uses it: the event schema and the config.
    shutil.copytree(ROOT / "streamer" / "schemas", tmp_path / "streamer" / "schemas")
    (tmp_path / "deploy" / "config").mkdir(parents=True)
    shutil.copy(CONFIG, tmp_path / "deploy" / "config" / "byom.yaml")
    kafka_env = {"KAFKA_BOOTSTRAP": bootstrap, "INPUT_TOPIC": topics.input, "OUTPUT_TOPIC": topics.output,
                 "GROUP_ID": topics.group}
    env = {k: v for k, v in os.environ.items() if k != "MODEL_PATH"}  # the config's default path is the one tested
    env.update(kafka_env, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")

    # 1. train and convert: the model lands in the root, where the config's default model.path looks
    run_block("python", blocks["walkthrough-train"], tmp_path, env)
    model = tmp_path / "purchase_model.onnx"
    assert model.is_file()

    # 2. inspect: the excerpt shown is what it prints
    printed = run_block("sh", blocks["walkthrough-inspect"], tmp_path, env)
    assert_in_order(excerpt_lines(blocks["walkthrough-inspect-output"]), printed)

    # 3. the config loads with nothing but the Kafka variables set, and serves the trained model
    cfg = load_config(tmp_path / "deploy" / "config" / "byom.yaml", env=kafka_env)
    assert cfg.model.path.resolve() == model.resolve()

    # 4. streamer schema: the fields shown are the fields made
    run_block("sh", blocks["walkthrough-schema"], tmp_path, env)
    made = {f["name"]: f for f in json.loads((tmp_path / "purchase_scores.avsc").read_text())["fields"]}
    for line in excerpt_lines(blocks["walkthrough-schema-fields"]):
        shown = json.loads(line)
        field = made.get(shown["name"])
        assert field is not None and {k: field.get(k) for k in shown} == shown, (shown, field)

    # 5. streamer check against the cluster, the model and the topics
    run_block("sh", blocks["walkthrough-check"], tmp_path, env)

    # 6. the page's three purchases, then 100 more; the processor `streamer run` builds scores them
    run_block("sh", blocks["walkthrough-produce"], tmp_path, env)
    codec = input_codec(cfg.input)
    rng = np.random.default_rng(11)
    more = [purchase(i, rng) for i in range(N_MORE)]
    produce_events(bootstrap, topics.input, ((e["entity_id"].encode(), codec.encode(e)) for e in more))
    events = {(m.partition(), m.offset()): dict(codec.decode(m.value())) for m in read_all(bootstrap, topics.input)}
    assert len(events) == 3 + N_MORE
    nulls = {e["event_id"] for e in events.values() if e["amount"] is None}
    assert "demo-2" in nulls and len(nulls) == 1 + len(range(0, N_MORE, 20))

    processor = build_processor(cfg)
    run_until_outputs(processor, len(events))
    assert processor.stats.predictions == len(events) - len(nulls), dict(processor.stats.dead_letters)

    predictions = [dict(processor.encoder.decode(m.value())) for m in read_all(bootstrap, topics.output)]
    assert len(predictions) == len(events) - len(nulls)
    assert {p["source_topic"] for p in predictions} == {topics.input}
    scored = [events[(p["source_partition"], p["source_offset"])] for p in predictions]
    assert [p["event_id"] for p in predictions] == [e["event_id"] for e in scored]
    assert not nulls & {e["event_id"] for e in scored}
    assert any(e["age_days"] is None for e in scored)  # filled, not dead-lettered
    want = offline(model, scored)
    labels = [p["label"] for p in predictions]
    probability = [p["fraud_probability"] for p in predictions]
    assert set(labels) == {0, 1}  # both classes occur: the comparison can tell them apart
    assert labels == want["label"].tolist()
    assert all(0.0 <= x <= 1.0 for x in probability)
    assert (f32_bits(probability) == f32_bits(want["probabilities"][:, 1])).all()
    assert [(p["card_country"], p["amount"]) for p in predictions] == [
        (e["card"]["country"], e["amount"]) for e in scored]
    assert {(p["model_name"], p["model_version"]) for p in predictions} == {("purchase_model", "1")}

    # null amounts: validate dead letters naming the field, original bytes kept
    letters = read_all(bootstrap, topics.dlq)
    assert {codec.decode(m.value())["event_id"] for m in letters} == nulls
    assert {header(m.headers(), "stage") for m in letters} == {"validate"}
    for m in letters:
        assert "field 'amount' is null or missing" in (header(m.headers(), "exception.message") or "")

    # the page's reader: streamer tail, one JSON object per prediction, as the processor wrote them
    printed = [json.loads(line) for line in run_block("sh", blocks["walkthrough-read"], tmp_path, env).splitlines()]
    assert sorted(printed, key=lambda p: p["event_id"]) == sorted(predictions, key=lambda p: p["event_id"])
    for line in excerpt_lines(blocks["walkthrough-read-output"]):  # the page's own purchases, abridged
        shown = json.loads(line)
        assert any({k: p.get(k) for k in shown} == shown for p in printed), (shown, printed)
