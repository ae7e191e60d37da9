"""`streamer score` reads its source's schema before the first row: a column the model's inputs cannot
read is refused at start (exit 2, one line naming the column and the ``model.inputs`` key, nothing
written); `--to-table NS.NAME` makes its namespace in the embedded catalog."""

from __future__ import annotations

import decimal
from pathlib import Path
from types import SimpleNamespace

import onnx
import onnx.helper as oh
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streamer.cli import main
from streamer.config import LakeConfig
from streamer.config_check import Location
from streamer.errors import ConfigError
from streamer.lake.iceberg import ensure_table
from streamer.lake.places import open_catalog
from tests.lake.test_replay_lake_kafka import iceberg

CONFIG = """
kafka: {{bootstrap.servers: 127.0.0.1:1}}
input: {{topics: [x], group_id: g, format: json}}
model:
  path: {model}
  name: tiny
  version: "1"
  inputs: {{amount: {amount}, n_items: n_items}}
output: {{topic: out}}
lake: {{warehouse: {lake}}}
"""


def tiny_model(path: Path) -> Path:
    """A model of two inputs, ``amount`` float32 [N, 1] and ``n_items`` int64 [N, 1]: y = amount + n_items."""
    f, i = onnx.TensorProto.FLOAT, onnx.TensorProto.INT64
    graph = oh.make_graph(
        [oh.make_node("Cast", ["n_items"], ["n"], to=f), oh.make_node("Add", ["amount", "n"], ["y"])], "tiny",
        [oh.make_tensor_value_info("amount", f, [None, 1]), oh.make_tensor_value_info("n_items", i, [None, 1])],
        [oh.make_tensor_value_info("y", f, [None, 1])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def config(tmp_path: Path, amount: str = "amount") -> Path:
    path = tmp_path / "streamer.yaml"
    path.write_text(CONFIG.format(model=tiny_model(tmp_path / "tiny.onnx"), amount=amount, lake=tmp_path / "lake"))
    return path


def rows(**columns: pa.Array) -> pa.Table:
    n = len(next(iter(columns.values())))
    return pa.table({"event_id": [f"e{i}" for i in range(n)], **columns})


GOOD = {"amount": pa.array([1.5, 2.5], pa.float64()), "n_items": pa.array([1, 2], pa.int64())}
REFUSED = {  # case: (columns, the key, words the line holds)
    "a string column for a float input": (
        {**GOOD, "amount": pa.array(["1.5", "2.5"])}, "model.inputs.amount", "field 'amount' is ['string']"),
    "a decimal column for an int64 input": (
        {**GOOD, "n_items": pa.array([decimal.Decimal(1), decimal.Decimal(2)], pa.decimal128(5, 0))},
        "model.inputs.n_items", "field 'n_items' is ['decimal128(5, 0)']"),
    "a missing column": (
        {"n_items": GOOD["n_items"]}, "model.inputs.amount", "has no field 'amount' there"),
    "a column of nulls mapped without fill": (
        {**GOOD, "amount": pa.array([1.5, None], pa.float64())}, "model.inputs.amount",
        "field 'amount' holds nulls in"),
}


def refusal(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("streamer:")]


@pytest.mark.parametrize("case", REFUSED)
@pytest.mark.parametrize("to", ["--to-parquet", "--to-table"])
def test_a_column_the_inputs_cannot_read_is_refused_before_anything_is_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, to: str) -> None:
    columns, key, words = REFUSED[case]
    pq.write_table(rows(**columns), tmp_path / "in.parquet")
    target = str(tmp_path / "out") if to == "--to-parquet" else "analytics.scores"
    code = main(["score", "--config", str(config(tmp_path)), "--from", str(tmp_path / "in.parquet"), to, target])
    lines = refusal(capsys)
    assert code == 2 and len(lines) == 1, lines
    assert f"'{key}'" in lines[0] and words in lines[0] and "Traceback" not in lines[0]
    assert not (tmp_path / "out").exists()
    assert not (tmp_path / "lake").exists() or open_catalog(
        LakeConfig(warehouse=Location(str(tmp_path / "lake")))).list_tables("analytics") == []


def test_the_null_refusal_says_what_a_null_becomes_and_both_fixes(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    pq.write_table(rows(**REFUSED["a column of nulls mapped without fill"][0]), tmp_path / "in.parquet")
    code = main(["score", "--config", str(config(tmp_path)), "--from", str(tmp_path / "in.parquet"),
                 "--to-parquet", str(tmp_path / "out")])
    (line,) = refusal(capsys)
    assert code == 2 and line.endswith("model.inputs.amount has no fill: a null would be a reject; set "
                                       "model.inputs.amount.fill or make the column not null")


@pytest.mark.parametrize("amount", ["amount", "{field: amount, fill: 0}"])
def test_a_nullable_column_without_nulls_or_with_a_fill_is_scored(tmp_path: Path, amount: str,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """pyarrow and pandas write every column nullable: only nulls in the data (or no fill) refuse it."""
    values = [1.5, 2.5] if amount == "amount" else [1.5, None]
    table = rows(**{**GOOD, "amount": pa.array(values, pa.float64())})
    assert table.schema.field("amount").nullable
    pq.write_table(table, tmp_path / "in.parquet")
    code = main(["score", "--config", str(config(tmp_path, amount)), "--from", str(tmp_path / "in.parquet"),
                 "--to-parquet", str(tmp_path / "out")])
    assert code == 0 and "rows 2 = predictions 2 + rejects 0" in capsys.readouterr().out


def test_an_iceberg_source_is_checked_on_its_schema_and_its_files_null_counts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = config(tmp_path)
    catalog = open_catalog(LakeConfig(warehouse=Location(str(tmp_path / "lake"))))
    catalog.create_namespace("src")
    for name, table in (("texts", rows(**{**GOOD, "amount": pa.array(["1", "2"])})),
                        ("nulls", rows(**{**GOOD, "amount": pa.array([None, 2.0], pa.float64())}))):
        catalog.create_table(f"src.{name}", schema=table.schema).append(table)
    for name, words in (("texts", "string'] in src.texts; model input 'amount' takes float32"),
                        ("nulls", "field 'amount' holds nulls in src.nulls")):
        code = main(["score", "--config", str(cfg), "--from", f"src.{name}", "--to-parquet", str(tmp_path / "out")])
        (line,) = refusal(capsys)
        assert code == 2 and "'model.inputs.amount'" in line and words in line, line
    assert not (tmp_path / "out").exists()


def test_to_table_in_a_namespace_the_embedded_catalog_lacks_creates_it(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    pq.write_table(rows(**GOOD), tmp_path / "in.parquet")
    code = main(["score", "--config", str(config(tmp_path)), "--from", str(tmp_path / "in.parquet"),
                 "--to-table", "analytics.scores"])
    assert code == 0, capsys.readouterr().err
    table = open_catalog(LakeConfig(warehouse=Location(str(tmp_path / "lake")))).load_table("analytics.scores")
    assert iceberg(table.metadata_location, "SELECT event_id FROM {T} ORDER BY 1") == [("e0",), ("e1",)]


class Refusing:
    """A catalog (as a REST catalog without the right) that has no namespace and may not create one."""

    def load_table(self, ident: str) -> None:
        from pyiceberg.exceptions import NoSuchTableError

        raise NoSuchTableError(ident)

    def namespace_exists(self, namespace: str) -> bool:
        return False

    def create_namespace_if_not_exists(self, namespace: str) -> None:
        raise PermissionError("403 Forbidden: not allowed to create namespace")

    def create_table(self, *args: object, **kwargs: object) -> SimpleNamespace:
        raise AssertionError("never tried without its namespace")


def test_a_catalog_that_cannot_create_the_namespace_refuses_in_one_line_naming_the_table() -> None:
    with pytest.raises(ConfigError) as refused:
        ensure_table(Refusing(), "analytics.scores", pa.schema([("a", pa.int64())]), "event_time")  # type: ignore[arg-type]
    assert refused.value.key == "--to-table" and "\n" not in str(refused.value)
    assert "table analytics.scores: the catalog has no namespace 'analytics' and refused to create it" in str(
        refused.value) and "403 Forbidden" in str(refused.value)


NESTED = {  # the struct column card: (its values, words the line holds)
    "text in a struct": ([{"amount": "1"}, {"amount": "2"}], "field 'card.amount' is ['string']"),
    "a struct without it": ([{"total": 1.0}, {"total": 2.0}], "'card.amount': {path} has no field 'amount' there"),
    "a null struct": ([{"amount": 1.0}, None], "field 'card.amount' holds nulls in"),
}


@pytest.mark.parametrize("case", NESTED)
def test_a_dotted_path_is_checked_through_its_struct(tmp_path: Path, case: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    values, words = NESTED[case]
    path = tmp_path / "in.parquet"
    pq.write_table(rows(card=pa.array(values), n_items=GOOD["n_items"]), path)
    code = main(["score", "--config", str(config(tmp_path, "card.amount")), "--from", str(path),
                 "--to-parquet", str(tmp_path / "out")])
    (line,) = refusal(capsys)
    assert code == 2 and "'model.inputs.amount'" in line and words.format(path=path) in line, line
