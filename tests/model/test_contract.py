"""The model contract (model/contract.py, outputs.py, prediction_schema.py, signature.py): exact
conversion of event fields into typed inputs, the mapping checked against real converter models'
signatures, outputs read into prediction fields, and the prediction schema made or checked."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any, cast

import fastavro
import numpy as np
import onnxruntime as ort
import pytest

from streamer.commands.model import inspect
from streamer.config_contract import InputSource, OutputTarget
from streamer.config_file import config_from_dict
from streamer.errors import ConfigError, InferenceError, ValidationError
from streamer.formats.avro import AvroCodec, load_schema
from streamer.model.contract import Contract, exact, field_value
from streamer.model.outputs import decision_scores
from streamer.model.prediction_schema import check_schema, made_schema
from streamer.model.signature import Columns, Signature, TensorSpec, numeric_matrix

ROOT = Path(__file__).resolve().parents[2]
FRAUD_MLP = ROOT / "models" / "fraud_mlp.onnx"
PURCHASE = ROOT / "streamer" / "schemas" / "purchase_event.avsc"
PREDICTION = ROOT / "streamer" / "schemas" / "prediction.avsc"
TABULAR = ("country", "channel", "amount", "age_days", "n_items")
ONNX_TYPES = {"float32": "tensor(float)", "float64": "tensor(double)", "int64": "tensor(int64)",
              "int32": "tensor(int32)", "bool": "tensor(bool)", "string": "tensor(string)"}


def spec(name: str, element: str, *shape: int | None) -> TensorSpec:
    return TensorSpec(name, element, (None, *shape), ONNX_TYPES.get(element, element))


def sig(inputs: list[TensorSpec], outputs: list[TensorSpec] | None = None) -> Signature:
    return Signature(tuple(inputs), tuple(outputs or [spec("score", "float32", 1)]))


def session(path: Path) -> ort.InferenceSession:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def key_of(exc: pytest.ExceptionInfo[ConfigError]) -> str:
    return exc.value.key


@pytest.fixture(scope="module")
def tabular(converter_models: Path) -> Signature:
    """column_transformer.onnx: country/channel string, amount/age_days float32, n_items int64 (all
    [N, 1]) -> label int64 [N], probabilities float32 [N, 2]."""
    return Signature.of(session(converter_models / "column_transformer.onnx"))


def tabular_contract(tabular: Signature, **inputs: InputSource) -> Contract:
    mapped = {n: InputSource((n,)) for n in TABULAR} | inputs
    return Contract.of(tabular, mapped, {"label": OutputTarget("label"),
                                         "probabilities": OutputTarget("probabilities")})


# ---- exact -------------------------------------------------------------------------------------


@pytest.mark.parametrize("element", ["float32", "float64"])
def test_exact_floats_take_bools_ints_and_finite_floats_as_floats(element: str) -> None:
    assert exact(3, element) == 3.0 and isinstance(exact(3, element), float)
    assert exact(-2.5, element) == -2.5
    assert exact(True, element) == 1.0 and exact(False, element) == 0.0
    assert isinstance(exact(True, element), float)


@pytest.mark.parametrize("value", ["1.5", None, [1.0], math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("element", ["float32", "float64"])
def test_exact_floats_refuse_strings_and_non_finite_values(value: Any, element: str) -> None:
    with pytest.raises(ValueError):
        exact(value, element)


def test_exact_float32_refuses_overflow_and_ints_it_cannot_hold() -> None:
    with pytest.raises(ValueError, match="not a finite float32"):
        exact(1e39, "float32")
    assert exact(1e39, "float64") == 1e39
    assert exact(2 ** 24, "float32") == 16777216.0
    assert exact(-(2 ** 24), "float32") == -16777216.0
    # past the bound, even an integer float32 happens to hold (2**30) is refused: one rule to state
    for beyond in (2 ** 24 + 1, -(2 ** 24) - 1, 2 ** 30, 10 ** 400):
        with pytest.raises(ValueError, match=r"beyond 2\^24: float32 holds integers exactly up to 2\^24"):
            exact(beyond, "float32")
    assert exact(2 ** 24 + 1, "float64") == 16777217.0
    assert exact(2 ** 53, "float64") == float(2 ** 53)
    with pytest.raises(ValueError, match=r"beyond 2\^53"):
        exact(2 ** 53 + 1, "float64")


@pytest.mark.parametrize("element", ["int64", "int32"])
def test_exact_ints_take_ints_and_bools_never_doubles(element: str) -> None:
    assert exact(-7, element) == -7
    one = exact(True, element)
    assert one == 1 and type(one) is int and exact(False, element) == 0
    for bad in (3.0, 3.5, math.nan, math.inf, "3", None):  # a double into an int, even a whole one
        with pytest.raises(ValueError, match="not an integer"):
            exact(bad, element)


def test_exact_ints_refuse_values_out_of_range() -> None:
    assert exact(2 ** 31 - 1, "int32") == 2 ** 31 - 1
    with pytest.raises(ValueError, match="out of the int32 range"):
        exact(2 ** 31, "int32")
    with pytest.raises(ValueError, match="out of the int32 range"):
        exact(-(2 ** 31) - 1, "int32")
    assert exact(2 ** 31, "int64") == 2 ** 31
    with pytest.raises(ValueError, match="out of the int64 range"):
        exact(2 ** 63, "int64")
    with pytest.raises(ValueError, match="out of the int64 range"):
        exact(-(2 ** 63) - 1, "int64")


def test_exact_bool_and_string_take_only_their_own_type() -> None:
    assert exact(True, "bool") is True and exact(False, "bool") is False
    not_bools: tuple[Any, ...] = (1, 0, "true", 1.0)
    for bad in not_bools:
        with pytest.raises(ValueError, match="not true or false"):
            exact(bad, "bool")
    assert exact("FR", "string") == "FR" and exact("", "string") == ""
    not_strings: tuple[Any, ...] = (7, 1.5, True, b"FR")
    for bad in not_strings:
        with pytest.raises(ValueError, match="not a string"):
            exact(bad, "string")
    with pytest.raises(ValueError, match="not a number"):
        exact(1.0, "float16")


# ---- field_value -------------------------------------------------------------------------------


def test_field_value_follows_dotted_paths_and_gives_none_for_missing_or_null_parents() -> None:
    event = {"card": {"country": "FR", "issuer": None, "limits": {"daily": 0}}, "amount": 0.0, "flag": False,
             "nothing": None, "items": [1, 2]}
    assert field_value(event, "card.country") == "FR"
    assert field_value(event, "card.limits.daily") == 0  # a falsy value is a value
    assert field_value(event, "amount") == 0.0
    assert field_value(event, "flag") is False
    assert field_value(event, "items") == [1, 2]
    assert field_value(event, "card.issuer") is None
    assert field_value(event, "nothing.deeper") is None  # a null parent
    assert field_value(event, "absent.deeper") is None  # a missing parent
    assert field_value(event, "amount.deeper") is None  # a parent that is not a record
    assert field_value(event, "items.0") is None


# ---- Contract.row / stack ----------------------------------------------------------------------


def test_stacked_fields_become_one_row_in_the_listed_order() -> None:
    contract = Contract.of(sig([spec("x", "float32", 3)]), {"x": InputSource(("a", "b.c", "d"), stacked=True)})
    assert contract.feature_column is None
    rows = [contract.row({"a": 1, "b": {"c": 2.5}, "d": -3}), contract.row({"a": 4.0, "b": {"c": 5}, "d": 6})]
    assert rows[0] == {"x": [1.0, 2.5, -3.0]}
    batch = contract.stack(rows)
    assert isinstance(batch, Columns)
    np.testing.assert_array_equal(batch.arrays["x"], np.array([[1, 2.5, -3], [4, 5, 6]], np.float32))
    assert batch.arrays["x"].dtype == np.float32


def test_one_array_field_feeds_a_wide_input_and_refuses_the_wrong_length() -> None:
    contract = Contract.of(sig([spec("ids", "int64", 3)]), {"ids": InputSource(("history",))})
    batch = contract.stack([contract.row({"history": [1, True, 3]})])
    assert batch.arrays["ids"].dtype == np.int64
    np.testing.assert_array_equal(batch.arrays["ids"], [[1, 1, 3]])
    with pytest.raises(ValidationError, match=r"field 'history' gives 2 values; model input 'ids' takes 3"):
        contract.row({"history": [1, 2]})
    with pytest.raises(ValidationError, match=r"field 'history' is double 2\.0, not an integer; "
                                              r"model input 'ids' takes int64"):
        contract.row({"history": [1, 2.0, 3]})


def test_a_null_takes_the_fill_value_converted_to_the_input_type() -> None:
    contract = Contract.of(sig([spec("amount", "float32", 1), spec("n", "int64", 1)]),
                           {"amount": InputSource(("amount",), fill=0), "n": InputSource(("n",), fill=2)})
    row = contract.row({"amount": None})  # null and missing alike
    assert row == {"amount": [0.0], "n": [2]}
    assert type(row["amount"][0]) is float and type(row["n"][0]) is int
    assert contract.row({"amount": 1.5, "n": 4}) == {"amount": [1.5], "n": [4]}


def test_a_fill_value_also_stands_in_for_nulls_inside_an_array_field() -> None:
    contract = Contract.of(sig([spec("x", "float64", 3)]), {"x": InputSource(("v",), fill=-1)})
    assert contract.row({"v": [1.0, None, 3]}) == {"x": [1.0, -1.0, 3.0]}
    assert contract.row({}) == {"x": [-1.0, -1.0, -1.0]}


def test_a_null_without_fill_is_a_validation_error_naming_field_and_input() -> None:
    contract = Contract.of(sig([spec("amount", "float32", 1)]), {"amount": InputSource(("order.amount",))})
    with pytest.raises(ValidationError, match=r"field 'order\.amount' is null or missing and "
                                              r"model\.inputs\.amount has no fill value"):
        contract.row({"order": {"amount": None}})
    with pytest.raises(ValidationError, match=r"field 'order\.amount'"):
        contract.row({})
    wide = Contract.of(sig([spec("x", "float32", 2)]), {"x": InputSource(("v",))})
    with pytest.raises(ValidationError, match=r"field 'v' holds a null and model\.inputs\.x has no fill"):
        wide.row({"v": [1.0, None]})


@pytest.mark.parametrize(("element", "fill"), [("float32", "x"), ("int64", 1.0), ("int64", 1.5),
                                               ("int32", 2 ** 40), ("string", 0), ("bool", 1)])
def test_a_fill_the_input_cannot_take_is_a_config_error_on_the_fill_key(element: str, fill: Any) -> None:
    with pytest.raises(ConfigError) as err:
        Contract.of(sig([spec("amount", element, 1)]), {"amount": InputSource(("amount",), fill=fill)})
    assert key_of(err) == "model.inputs.amount.fill"
    assert f"takes {element}" in str(err.value)


def test_values_the_input_cannot_take_exactly_are_validation_errors_naming_field_and_input() -> None:
    contract = Contract.of(sig([spec("amount", "float32", 1), spec("n", "int32", 1), spec("ok", "bool", 1)]),
                           {"amount": InputSource(("amount",)), "n": InputSource(("n",)),
                            "ok": InputSource(("ok",))})
    good: dict[str, Any] = {"amount": 1.0, "n": 1, "ok": True}
    cases: list[tuple[dict[str, Any], str]] = [({"amount": "12.5"}, r"field 'amount' is string '12\.5', not a number; model input 'amount' takes float32"),
             ({"n": 2.0}, r"field 'n' is double 2\.0, not an integer; model input 'n' takes int32"),
             ({"amount": math.nan}, r"field 'amount' is nan, not a finite float32"),
             ({"amount": 2 ** 24 + 1}, r"field 'amount' is the integer 16777217, beyond 2\^24"),
             ({"n": 2 ** 31}, r"field 'n' is 2147483648, out of the int32 range; model input 'n' takes int32"),
             ({"ok": 1}, r"field 'ok' is int 1, not true or false; model input 'ok' takes bool")]
    for change, says in cases:
        with pytest.raises(ValidationError, match=says):
            contract.row(good | change)
    assert contract.row(good) == {"amount": [1.0], "n": [1], "ok": [True]}
    assert contract.row(good | {"amount": True, "n": False}) == {"amount": [1.0], "n": [0], "ok": [True]}


def test_string_inputs_give_object_arrays_and_rank_follows_the_signature() -> None:
    contract = Contract.of(sig([spec("country", "string", 1), spec("tags", "string"),
                                spec("amount", "float32"), spec("age", "float32", 1)]),
                           {"country": InputSource(("card.country",)), "tags": InputSource(("tag",)),
                            "amount": InputSource(("amount",)), "age": InputSource(("age",))})
    events = [{"card": {"country": "FR"}, "tag": "new", "amount": 1, "age": 2},
              {"card": {"country": "DE"}, "tag": "", "amount": 3.5, "age": 4}]
    batch = contract.stack([contract.row(e) for e in events])
    country, tags = batch.arrays["country"], batch.arrays["tags"]
    assert country.dtype == object and country.shape == (2, 1) and country.tolist() == [["FR"], ["DE"]]
    assert tags.dtype == object and tags.shape == (2,) and tags.tolist() == ["new", ""]
    assert batch.arrays["amount"].shape == (2,) and batch.arrays["amount"].dtype == np.float32
    assert batch.arrays["age"].shape == (2, 1)
    with pytest.raises(ValidationError, match=r"field 'card\.country' is int 7, not a string; "
                                              r"model input 'country' takes string"):
        contract.row(events[0] | {"card": {"country": 7}})


def test_blank_is_a_probe_batch_of_zeros_empty_strings_and_false() -> None:
    contract = Contract.of(sig([spec("s", "string", 1), spec("f", "float32", 2), spec("b", "bool")]),
                           {"s": InputSource(("s",)), "f": InputSource(("f",)), "b": InputSource(("b",))})
    probe = contract.blank(3)
    assert probe.arrays["s"].tolist() == [[""]] * 3
    np.testing.assert_array_equal(probe.arrays["f"], np.zeros((3, 2), np.float32))
    assert probe.arrays["b"].dtype == np.bool_ and not probe.arrays["b"].any() and probe.arrays["b"].shape == (3,)
    plain = Contract.of(Signature.of(session(FRAUD_MLP)))
    assert list(plain.blank(2).arrays) == ["features"]
    assert plain.blank(2).arrays["features"].shape == (2, 32) and plain.blank(2).arrays["features"].dtype == np.float32


def test_stacked_columns_feed_the_real_column_transformer_and_collect_its_outputs(tabular: Signature,
                                                                                   converter_models: Path) -> None:
    contract = tabular_contract(tabular, amount=InputSource(("amount",), fill=0))
    events: list[dict[str, Any]] = [{"country": "FR", "channel": "web", "amount": 12.5, "age_days": 30, "n_items": 2},
              {"country": "BR", "channel": "pos", "amount": None, "age_days": 900.0, "n_items": 7}]
    batch = contract.stack([contract.row(e) for e in events])
    sess = session(converter_models / "column_transformer.onnx")
    raw = sess.run(contract.output_names, contract.feed(batch))
    result = contract.collect(raw, 2)
    direct = sess.run(None, {"country": np.array([["FR"], ["BR"]], object),
                             "channel": np.array([["web"], ["pos"]], object),
                             "amount": np.array([[12.5], [0.0]], np.float32),
                             "age_days": np.array([[30], [900]], np.float32),
                             "n_items": np.array([[2], [7]], np.int64)})
    np.testing.assert_array_equal(result.arrays["label"], direct[0])
    np.testing.assert_array_equal(result.arrays["probabilities"], direct[1])
    assert numeric_matrix(batch).tolist() == [[12.5, 30.0, 2.0], [0.0, 900.0, 7.0]]
    assert contract.numeric_width == 3 and sum(p.width for p in contract.inputs) == 5


# ---- Contract.of refusals ----------------------------------------------------------------------


def test_several_inputs_and_no_mapping_is_refused_with_a_suggested_mapping(tabular: Signature) -> None:
    with pytest.raises(ConfigError) as err:
        Contract.of(tabular)
    assert key_of(err) == "model.inputs"
    assert "has 5 inputs" in str(err.value) and "country: country" in str(err.value)


def test_an_unknown_or_unmapped_input_is_named(tabular: Signature) -> None:
    mapped = {n: InputSource((n,)) for n in TABULAR}
    with pytest.raises(ConfigError) as err:
        Contract.of(tabular, mapped | {"amout": InputSource(("amount",))})
    assert key_of(err) == "model.inputs.amout" and "'amount'" in err.value.reason
    del mapped["age_days"]
    with pytest.raises(ConfigError) as err:
        Contract.of(tabular, mapped)
    assert key_of(err) == "model.inputs.age_days" and "not mapped" in err.value.reason


def test_stacked_fields_must_match_the_input_width(converter_models: Path) -> None:
    logreg = Signature.of(session(converter_models / "logreg.onnx"))  # features float32 [N, 4]
    with pytest.raises(ConfigError) as err:
        Contract.of(logreg, {"features": InputSource(("a", "b", "c"), stacked=True)},
                    {"label": OutputTarget("label")})
    assert key_of(err) == "model.inputs.features"
    assert "lists 3 fields" in err.value.reason and "takes 4 values a row" in err.value.reason
    four = Contract.of(logreg, {"features": InputSource(("a", "b", "c", "d"), stacked=True)},
                       {"label": OutputTarget("label")})
    assert four.feature_column is None and four.inputs[0].width == 4
    free = sig([spec("x", "float32", None)])
    with pytest.raises(ConfigError, match="no fixed width") as err:
        Contract.of(free, {"x": InputSource(("v",))})
    assert key_of(err) == "model.inputs.x"
    assert Contract.of(free, {"x": InputSource(("a", "b"), stacked=True)}).inputs[0].width == 2


def test_several_outputs_and_no_mapping_is_refused_with_a_suggested_mapping(converter_models: Path) -> None:
    zipmap = Signature.of(session(converter_models / "logreg_zipmap.onnx"))
    with pytest.raises(ConfigError) as err:
        Contract.of(zipmap)
    assert key_of(err) == "model.outputs"
    assert "none is picked silently" in err.value.reason
    assert "{label: output_label, probabilities: output_probability}" in err.value.reason


def test_an_unknown_output_or_a_column_out_of_range_is_named(converter_models: Path) -> None:
    logreg = Signature.of(session(converter_models / "logreg.onnx"))
    with pytest.raises(ConfigError) as err:
        Contract.of(logreg, None, {"fraud": OutputTarget("probability")})
    assert key_of(err) == "model.outputs.fraud" and "'probabilities'" in err.value.reason
    with pytest.raises(ConfigError) as err:
        Contract.of(logreg, None, {"fraud": OutputTarget("probabilities", 2)})
    assert key_of(err) == "model.outputs.fraud.column" and "has 2 columns" in err.value.reason
    ok = Contract.of(logreg, None, {"fraud": OutputTarget("probabilities", 1)})
    assert ok.avro_fields()[0]["type"] == "float"


def test_the_single_columns_follow_the_layout_not_the_model_file(converter_models: Path) -> None:
    mlp = Signature.of(session(FRAUD_MLP))
    plain = Contract.of(mlp)
    assert (plain.feature_column, plain.score_column, plain.features_field) == ("features", "scores", "features")
    assert plain.feature_width == 32
    renamed = Contract.of(mlp, {"features": InputSource(("vector",))})
    assert renamed.feature_column == "features" and renamed.features_field == "vector"
    assert Contract.of(mlp, {"features": InputSource(("features",))}).feature_column == "features"
    assert Contract.of(mlp, {"features": InputSource(("features",), fill=0)}).feature_column is None
    named_out = Contract.of(mlp, None, {"fraud": OutputTarget("score")})
    assert named_out.feature_column == "features" and named_out.score_column is None
    f64 = Contract.of(Signature.of(session(converter_models / "float64_regressor.onnx")))
    assert f64.feature_column is None and f64.score_column == "scores"
    assert f64.row({"features": [1, 2, 3, 4]}) == {"features": [1.0, 2.0, 3.0, 4.0]}
    one = Contract.of(sig([spec("x", "float32", 1)]), {"x": InputSource(("amount",))})
    assert one.feature_column is None  # a mapped [N, 1] input may be a plain number, not an array


def test_the_feature_array_feed_refuses_a_matrix_of_the_wrong_width() -> None:
    contract = Contract.of(Signature.of(session(FRAUD_MLP)))
    fed = contract.feed(Columns({"features": np.ones((2, 32), np.float64)}))
    assert fed["features"].dtype == np.float32 and fed["features"].flags.c_contiguous
    with pytest.raises(InferenceError, match=r"takes \[rows, 32\]"):
        contract.feed(Columns({"features": np.ones((2, 31), np.float32)}))


# ---- collect -----------------------------------------------------------------------------------


def test_zipmap_maps_become_probability_rows_in_class_order(converter_models: Path) -> None:
    x = np.array([[0.5, -1.0, 2.0, 0.0], [-1.5, 2.0, 0.1, 1.0], [0, 0, 0, 0]], np.float32)
    zip_sess = session(converter_models / "logreg_zipmap.onnx")
    contract = Contract.of(Signature.of(zip_sess), None,
                           {"label": OutputTarget("output_label"), "probabilities": OutputTarget("output_probability"),
                            "fraud": OutputTarget("output_probability", 1)})
    assert contract.output_names == ["output_label", "output_probability"]
    raw = zip_sess.run(contract.output_names, contract.feed(Columns({"features": x})))
    assert isinstance(raw[1], list) and isinstance(raw[1][0], dict)
    got = contract.collect(raw, 3)
    label, probabilities = session(converter_models / "logreg.onnx").run(["label", "probabilities"], {"features": x})
    np.testing.assert_array_equal(got.arrays["label"], label)
    np.testing.assert_allclose(got.arrays["probabilities"], probabilities, rtol=1e-6)
    assert got.arrays["probabilities"].dtype == np.float32 and got.arrays["probabilities"].shape == (3, 2)
    np.testing.assert_array_equal(got.arrays["fraud"], got.arrays["probabilities"][:, 1])
    assert [f["type"] for f in contract.avro_fields()] == ["long", {"type": "array", "items": "float"}, "float"]


def test_collect_reads_scalars_rows_and_columns_by_the_mapping(converter_models: Path) -> None:
    two = Signature.of(session(converter_models / "two_outputs.onnx"))  # score [N, 1], embedding [N, 3]
    contract = Contract.of(two, None, {"score": OutputTarget("score"), "embedding": OutputTarget("embedding"),
                                       "second": OutputTarget("embedding", 1)})
    score = np.array([[0.5], [1.5]], np.float32)
    embedding = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = contract.collect([score, embedding], 2)
    assert got.arrays["score"].tolist() == [0.5, 1.5]
    assert got.arrays["embedding"].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert got.arrays["second"].tolist() == [1, 4]
    assert [f["type"] for f in contract.avro_fields()] == ["float", {"type": "array", "items": "float"}, "float"]


def test_collect_refuses_outputs_of_the_wrong_row_count_or_shape(converter_models: Path) -> None:
    logreg = Signature.of(session(converter_models / "logreg.onnx"))
    contract = Contract.of(logreg, None, {"label": OutputTarget("label"), "p": OutputTarget("probabilities")})
    with pytest.raises(InferenceError, match=r"output 'label' has shape \(2, 1\) for 3 rows"):
        contract.collect([np.array([0, 1]), np.zeros((3, 2), np.float32)], 3)
    with pytest.raises(InferenceError, match=r"prediction field 'label' holds one"):
        contract.collect([np.zeros((3, 2)), np.zeros((3, 2), np.float32)], 3)
    plain = Contract.of(Signature.of(session(FRAUD_MLP)))
    assert plain.collect([np.array([0.25, 0.5], np.float32)], 2).arrays["scores"].tolist() == [[0.25], [0.5]]
    with pytest.raises(InferenceError, match="2 output rows for 3 input rows"):
        plain.collect([np.zeros((2, 1), np.float32)], 3)
    zipmap = Contract.of(Signature.of(session(converter_models / "logreg_zipmap.onnx")), None,
                         {"p": OutputTarget("output_probability")})
    with pytest.raises(InferenceError, match="do not share the classes"):
        zipmap.collect([[{0: 0.4, 1: 0.6}, {0: 1.0}]], 2)


# ---- check_fields ------------------------------------------------------------------------------


def test_check_fields_accepts_fields_the_inputs_take_from_the_avro_schema(tabular: Signature) -> None:
    purchase = load_schema(PURCHASE)
    # card.country: nested string; channel: an enum; amount: nullable double; age_days: nullable
    # float; n_items: long
    tabular_contract(tabular, country=InputSource(("card.country",))).check_fields(purchase)
    tabular_contract(tabular).check_fields(None)  # JSON: nothing to check against


def test_check_fields_refuses_a_field_of_the_wrong_type_or_a_missing_one(tabular: Signature) -> None:
    purchase = load_schema(PURCHASE)
    with pytest.raises(ConfigError) as err:
        tabular_contract(tabular, amount=InputSource(("entity_id",)),
                         country=InputSource(("card.country",))).check_fields(purchase)
    assert key_of(err) == "model.inputs.amount"
    assert "'entity_id' is ['string']" in err.value.reason and "takes float32" in err.value.reason
    with pytest.raises(ConfigError) as err:
        tabular_contract(tabular, country=InputSource(("card.city",))).check_fields(purchase)
    assert key_of(err) == "model.inputs.country"
    assert "'card.city'" in err.value.reason and "no field 'city'" in err.value.reason
    with pytest.raises(ConfigError) as err:
        tabular_contract(tabular, country=InputSource(("country",))).check_fields(purchase)
    assert key_of(err) == "model.inputs.country" and "no field 'country'" in err.value.reason
    with pytest.raises(ConfigError) as err:  # a double cannot go into an int64 exactly, so it is refused
        tabular_contract(tabular, country=InputSource(("card.country",)),
                         n_items=InputSource(("amount",))).check_fields(purchase)
    assert key_of(err) == "model.inputs.n_items"
    with pytest.raises(ConfigError) as err:  # the feature array is input.features_field's
        Contract.of(Signature.of(session(FRAUD_MLP))).check_fields(purchase)
    assert key_of(err) == "input.features_field"


# ---- made_schema / check_schema ----------------------------------------------------------------


def test_made_schema_puts_the_output_fields_in_place_of_scores_and_passes_fields_through(
        tabular: Signature) -> None:
    contract = tabular_contract(tabular, country=InputSource(("card.country",)))
    made = made_schema(load_schema(PREDICTION), contract, ["amount", "card.country"], load_schema(PURCHASE))
    fields = {f["name"]: f for f in made["fields"]}
    names = [f["name"] for f in made["fields"]]
    assert "scores" not in fields
    assert names[:4] == ["event_id", "entity_id", "label", "probabilities"]
    assert names[-2:] == ["amount", "card_country"]
    assert fields["label"]["type"] == "long"
    assert fields["probabilities"]["type"] == {"type": "array", "items": "float"}
    assert fields["amount"]["type"] == ["null", "double"] and fields["amount"]["default"] is None
    assert fields["card_country"]["type"] == ["null", "string"]
    json_made = made_schema(load_schema(PREDICTION), contract, ["amount"], None)
    assert json_made["fields"][-1]["type"] == ["null", "boolean", "long", "double", "string"]


def test_made_schema_refuses_a_name_collision(tabular: Signature) -> None:
    clash = Contract.of(tabular, {n: InputSource((n,)) for n in TABULAR}, {"event_id": OutputTarget("label")})
    with pytest.raises(ConfigError) as err:
        made_schema(load_schema(PREDICTION), clash, (), None)
    assert key_of(err) == "model.outputs.event_id"
    with pytest.raises(ConfigError) as err:
        made_schema(load_schema(PREDICTION), tabular_contract(tabular), ["amount", "entity_id"], None)
    assert key_of(err) == "output.include[1]"
    with pytest.raises(ConfigError) as err:
        made_schema(load_schema(PREDICTION), tabular_contract(tabular), ["card.city"], load_schema(PURCHASE))
    assert key_of(err) == "output.include[0]"


def test_made_schema_of_the_feature_array_contract_keeps_scores() -> None:
    plain = Contract.of(Signature.of(session(FRAUD_MLP)))
    made = made_schema(load_schema(PREDICTION), plain, ["amount"], None)
    fields = {f["name"]: f for f in made["fields"]}
    assert fields["scores"]["type"] == {"type": "array", "items": "float"}
    assert list(fields)[-1] == "amount"


def test_check_schema_accepts_the_made_schema_and_refuses_a_missing_or_retyped_field(tabular: Signature) -> None:
    made = made_schema(load_schema(PREDICTION), tabular_contract(tabular), ["amount"], load_schema(PURCHASE))
    check_schema(made, made)
    check_schema(cast(dict[str, Any], fastavro.parse_schema(copy.deepcopy(made))), made)  # parsed, as output.schema is read
    widened = copy.deepcopy(made)
    next(f for f in widened["fields"] if f["name"] == "amount")["type"] = ["null", "double", "string"]
    check_schema(widened, made)  # a union holding ours takes our values

    missing = copy.deepcopy(made)
    missing["fields"] = [f for f in missing["fields"] if f["name"] != "label"]
    with pytest.raises(ConfigError, match="has no field 'label'") as err:
        check_schema(missing, made)
    assert key_of(err) == "output.schema"
    retyped = copy.deepcopy(made)
    next(f for f in retyped["fields"] if f["name"] == "label")["type"] = "int"
    with pytest.raises(ConfigError, match=r"field 'label' is \"int\"; the model's contract writes \"long\""):
        check_schema(retyped, made)
    extra = copy.deepcopy(made)
    extra["fields"].append({"name": "region", "type": "string"})
    with pytest.raises(ConfigError, match="'region' is not written by streamer and has no default"):
        check_schema(extra, made)
    extra["fields"][-1]["default"] = "eu"
    check_schema(extra, made)


def test_model_digest_follows_model_version_and_a_users_schema_may_leave_it_out(tabular: Signature) -> None:
    made = made_schema(load_schema(PREDICTION), tabular_contract(tabular), [], None)
    names = [f["name"] for f in made["fields"]]
    assert names[names.index("model_version") + 1] == "model_digest"
    older = {**made, "fields": [f for f in made["fields"] if f["name"] != "model_digest"]}
    check_schema(older, made)  # valid: the digest is then not written
    retyped = copy.deepcopy(made)
    next(f for f in retyped["fields"] if f["name"] == "model_digest")["type"] = "bytes"
    with pytest.raises(ConfigError, match="field 'model_digest' is \"bytes\""):
        check_schema(retyped, made)


def test_a_users_schema_without_run_id_is_refused_at_start_since_every_record_carries_it(
        tabular: Signature) -> None:
    made = made_schema(load_schema(PREDICTION), tabular_contract(tabular), [], None)
    without = {**made, "fields": [f for f in made["fields"] if f["name"] != "run_id"]}
    with pytest.raises(ConfigError, match="has no field 'run_id'") as err:
        check_schema(without, made)
    assert key_of(err) == "output.schema"
    lean = {**made, "fields": [f for f in made["fields"] if f["name"] not in ("degraded", "degraded_reason")]}
    check_schema(lean, made)  # the record leaves the degraded fields out unless degraded


def test_made_schema_round_trips_a_prediction_through_avro(tabular: Signature) -> None:
    contract = tabular_contract(tabular, country=InputSource(("card.country",)))
    made = made_schema(load_schema(PREDICTION), contract, ["amount", "channel", "card.country"],
                       load_schema(PURCHASE))
    codec = AvroCodec(cast(dict[str, Any], fastavro.parse_schema(made)))
    record = {"event_id": "e-1", "entity_id": "card-9", "label": 1, "probabilities": [0.25, 0.75],
              "model_name": "tab", "model_version": "3", "model_digest": "0123456789ab",
              "source_topic": "purchases", "source_partition": 2,
              "source_offset": 41, "event_time": 1_700_000_000_000, "scored_at": 1_700_000_000_500,
              "run_id": None, "degraded": False, "degraded_reason": None,
              "amount": 12.5, "channel": "web", "card_country": None}
    assert dict(codec.decode(codec.encode(record))) == record


# ---- decision_scores / Columns -----------------------------------------------------------------


def test_decision_scores_pick_the_number_a_decision_is_made_on() -> None:
    plain = Columns({"scores": np.array([[0.1, 9.0], [0.7, 9.0]], np.float32)})
    np.testing.assert_allclose(decision_scores(plain), [0.1, 0.7], rtol=1e-6)
    two_class = Columns({"label": np.array([0, 1]), "p": np.array([[0.8, 0.2], [0.3, 0.7]], np.float32)})
    np.testing.assert_allclose(decision_scores(two_class), [0.2, 0.7], rtol=1e-6)
    scalar = Columns({"label": np.array([1, 0]), "fraud": np.array([0.9, 0.4], np.float32),
                      "p": np.array([[0.1, 0.9], [0.6, 0.4]], np.float32)})
    got = decision_scores(scalar)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, [0.9, 0.4], rtol=1e-6)
    three = Columns({"p": np.array([[0.2, 0.5, 0.3], [0.6, 0.3, 0.1]], np.float32)})
    np.testing.assert_allclose(decision_scores(three), [0.5, 0.6], rtol=1e-6)
    labels_only = decision_scores(Columns({"label": np.array([0, 1, 1])}))
    assert labels_only.shape == (3,) and np.isnan(labels_only).all()


def test_columns_slice_take_and_join_like_one_array() -> None:
    cols = Columns({"s": np.array(["a", "b", "c", "d"], object), "x": np.arange(8, dtype=np.float32).reshape(4, 2),
                    "n": np.array([10, 11, 12, 13])})
    assert len(cols) == 4 and list(cols.arrays) == ["s", "x", "n"]
    part = cols[1:3]
    assert part.arrays["s"].tolist() == ["b", "c"] and part.arrays["x"].tolist() == [[2, 3], [4, 5]]
    taken = cols[np.array([3, 0])]
    assert taken.arrays["n"].tolist() == [13, 10] and taken.arrays["s"].tolist() == ["d", "a"]
    joined = Columns.join([part, taken])
    assert joined.arrays["n"].tolist() == [11, 12, 13, 10]
    assert joined.arrays["x"].shape == (4, 2)
    assert Columns.join([part]) is part
    assert len(Columns({})) == 0


def test_columns_blank_and_put_fill_placeholders_in_place() -> None:
    cols = Columns({"f": np.array([[1.0, 2.0]], np.float32), "i": np.array([5]), "s": np.array(["x"], object),
                    "b": np.array([True])})
    blank = cols.blank(3)
    assert blank.arrays["f"].shape == (3, 2) and np.isnan(blank.arrays["f"]).all()
    assert blank.arrays["f"].dtype == np.float32
    assert blank.arrays["i"].tolist() == [0, 0, 0] and blank.arrays["i"].dtype == cols.arrays["i"].dtype
    assert blank.arrays["s"].tolist() == ["", "", ""]
    assert blank.arrays["b"].tolist() == [False, False, False]
    blank.put(1, cols)
    assert blank.arrays["f"][1].tolist() == [1.0, 2.0] and np.isnan(blank.arrays["f"][[0, 2]]).all()
    assert blank.arrays["i"].tolist() == [0, 5, 0]
    assert blank.arrays["s"].tolist() == ["", "x", ""]
    assert blank.arrays["b"].tolist() == [False, True, False]
    matrix = np.ones((2, 3), np.float32)
    assert numeric_matrix(Columns({"features": matrix})) is matrix  # one float matrix: no copy
    assert numeric_matrix(cols).tolist() == [[1.0, 2.0, 5.0]]  # strings and bools are left out


# ---- config ------------------------------------------------------------------------------------


def config_with(model: dict[str, Any] | None = None, output: dict[str, Any] | None = None) -> Any:
    doc = {"kafka": {"bootstrap.servers": "127.0.0.1:9092"},
           "input": {"topics": ["purchases"], "group_id": "g", "format": "json"},
           "model": {"path": "models/fraud_mlp.onnx", "name": "tab", "version": "1", **(model or {})},
           "output": {"topic": "predictions", **(output or {})}}
    return config_from_dict(doc, base_dir=ROOT, env={})


def test_config_parses_every_yaml_form_of_model_inputs_outputs_and_include() -> None:
    cfg = config_with({"inputs": {"amount": "order.amount", "pair": ["a", "b"], "n": {"field": "n", "fill": 0},
                                  "many": {"fields": ["c", "d"]}, "one": {"fields": "e", "fill": "none"}},
                       "outputs": {"label": "label", "fraud": {"output": "probabilities", "column": 1},
                                   "p": {"output": "probabilities"}}},
                      {"include": ["amount", "card.country"]})
    inputs, outputs = cfg.model.inputs, cfg.model.outputs
    assert inputs["amount"] == InputSource(("order.amount",))
    assert inputs["pair"] == InputSource(("a", "b"), stacked=True)
    assert inputs["n"] == InputSource(("n",), fill=0)
    assert inputs["many"] == InputSource(("c", "d"), stacked=True)
    assert inputs["one"] == InputSource(("e",), stacked=True, fill="none")
    assert outputs == {"label": OutputTarget("label"), "fraud": OutputTarget("probabilities", 1),
                       "p": OutputTarget("probabilities")}
    assert cfg.output.include == ("amount", "card.country")
    plain = config_with()
    assert plain.model.inputs is None and plain.model.outputs is None and plain.output.include == ()


@pytest.mark.parametrize(("model", "key"), [
    ({"inputs": {"x": {"field": "a", "fields": ["b"]}}}, "model.inputs.x"),
    ({"inputs": {"x": {"fill": 0}}}, "model.inputs.x"),
    ({"inputs": {"x": {"field": "a", "default": 0}}}, "model.inputs.x"),
    ({"inputs": {"x": {"field": "a", "fill": [0]}}}, "model.inputs.x.fill"),
    ({"inputs": {"x": 3}}, "model.inputs.x"),
    ({"inputs": {"x": []}}, "model.inputs.x"),
    ({"inputs": {"x": "card..country"}}, "model.inputs.x"),
    ({"inputs": ["amount"]}, "model.inputs"),
    ({"inputs": {}}, "model.inputs"),
    ({"outputs": {"fraud": {"output": "p", "column": -1}}}, "model.outputs.fraud.column"),
    ({"outputs": {"fraud": {"output": "p", "column": True}}}, "model.outputs.fraud.column"),
    ({"outputs": {"fraud": {"output": "p", "column": 1.0}}}, "model.outputs.fraud.column"),
    ({"outputs": {"fraud": {"output": "p", "col": 1}}}, "model.outputs.fraud"),
    ({"outputs": {"fraud": ""}}, "model.outputs.fraud"),
    ({"outputs": {"fraud": 1}}, "model.outputs.fraud"),
    ({"outputs": {}}, "model.outputs"),
    ({"outputs": {"fraud": "score"}, "fallback_scores": [0.5]}, "model.fallback_scores"),
])
def test_config_refuses_bad_mapping_forms_naming_the_key(model: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as err:
        config_with(model)
    assert key_of(err) == key


def test_config_refuses_a_bad_or_repeated_include() -> None:
    with pytest.raises(ConfigError) as err:
        config_with(output={"include": ["amount", "card."]})
    assert key_of(err) == "output.include[1]"
    with pytest.raises(ConfigError) as err:
        config_with(output={"include": ["amount", "amount"]})
    assert key_of(err) == "output.include"


# ---- streamer model inspect --------------------------------------------------------------------


def test_inspect_of_a_zipmap_classifier_suggests_its_outputs_and_notes_zipmap(converter_models: Path) -> None:
    report = inspect(converter_models / "logreg_zipmap.onnx")
    assert "output_probability  zipmap" in report
    assert "    label: output_label\n    probabilities: output_probability" in report
    assert "ZipMap on" in report and "'zipmap': False" in report
    assert "  inputs:" not in report  # one float input of fixed width: the default serves it
    assert '"name": "probabilities"' in report and "cannot serve" not in report


def test_inspect_of_a_column_transformer_maps_one_input_per_column(converter_models: Path) -> None:
    report = inspect(converter_models / "column_transformer.onnx")
    block = "  inputs:\n" + "".join(f"    {n}: {n}\n" for n in TABULAR)
    assert block in report
    assert "    label: label\n    probabilities: probabilities" in report
    assert "ZipMap" not in report and "cannot serve" not in report


def test_inspect_of_a_one_input_one_output_model_suggests_no_mapping() -> None:
    report = inspect(FRAUD_MLP)
    assert "features  float32  [N, 32]" in report
    assert "  inputs:" not in report and "  outputs:" not in report
    assert '"name": "scores"' in report
