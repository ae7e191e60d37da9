"""The served model as the Open Inference Protocol sees it: the model's input tensors in, the
contract's prediction fields out, scored by the stream's serving.

Inputs are the model's own tensors, by name, with their element types (a string input takes
BYTES, UTF-8) and fixed dimensions; the batch dimension is free. Outputs are the prediction
fields of ``model.outputs`` (or ``scores``, the one output unmapped), named and shaped as the
predictions carry them: ``label`` [N], ``fraud_probability`` [N] for ``{output: probabilities,
column: 1}``, a row [N, k]. So an online answer and the prediction of the same event hold the
same values, through the same serving: breaker, fallback, challengers (each row's event id is
its request's id), hot reload, the model's version and digest, and the drift of its features.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from streamer.errors import BadRequest
from streamer.model.signature import DTYPES, Columns
from streamer.observe.drift import DriftGauges
from streamer.online.tensors import DATATYPE, datatype_of
from streamer.pipeline.records import Messages, Rows, Scored
from streamer.pipeline.serving import Serving


class RequestRow:
    """An online request's row as the origin of a row (records.Origin): ``online``, 0, and its
    number among the rows served."""

    __slots__ = ("_offset",)

    def __init__(self, offset: int) -> None:
        self._offset = offset

    def topic(self) -> str:
        return "online"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def key(self) -> None:
        return None

    def value(self) -> bytes:
        return b""

    def timestamp(self) -> tuple[int, int]:
        return (0, 0)


class ServedModel:
    """One config's model, served online through its serving (``name``: ``model.name``)."""

    def __init__(self, name: str, serving: Serving, drift: DriftGauges | None = None) -> None:
        """``drift``: the online batches' feature drift, when the model has a reference profile."""
        self.name, self.serving, self.drift = name, serving, drift
        self.readiness = threading.Event()  # set once warmed up and listening; cleared at the stop
        self._rows = 0

    @property
    def version(self) -> str:
        return self.serving.model.version

    def ready(self) -> bool:
        return self.readiness.is_set()

    def set_ready(self, ready: bool) -> None:
        if ready:
            self.readiness.set()
        else:
            self.readiness.clear()

    def metadata(self) -> dict[str, Any]:
        contract = self.serving.runner.contract
        inputs = [{"name": s.name, "datatype": DATATYPE.get(s.element, s.element),
                   "shape": [-1 if d is None else d for d in s.shape]} for s in contract.signature.inputs]
        outputs = []
        for plan in contract.outputs:
            shape = [-1] if plan.scalar else [-1, plan.spec.width or -1]
            outputs.append({"name": plan.field, "datatype": DATATYPE.get(plan.element, plan.element), "shape": shape})
        return {"name": self.name, "versions": [self.version], "platform": "onnx_onnxv1",
                "inputs": inputs, "outputs": outputs}

    def columns(self, inputs: dict[str, np.ndarray]) -> Columns:
        contract = self.serving.runner.contract
        specs = {s.name: s for s in contract.signature.inputs}
        missing, unknown = sorted(set(specs) - set(inputs)), sorted(set(inputs) - set(specs))
        if missing or unknown:
            raise BadRequest(f"the model takes {', '.join(sorted(specs))}"
                             + (f"; missing {', '.join(missing)}" if missing else "")
                             + (f"; unknown {', '.join(unknown)}" if unknown else ""))
        arrays: dict[str, np.ndarray] = {}
        rows: set[int] = set()
        for name, spec in specs.items():
            arrays[name] = _tensor(name, inputs[name], spec.element, spec.shape)
            rows.add(len(arrays[name]))
        if len(rows) != 1:
            raise BadRequest(f"the inputs hold different numbers of rows: {sorted(rows)}")
        if contract.feature_column is not None:
            (only,) = arrays.values()
            return Columns({contract.feature_column: only})
        return Columns(arrays)

    def score(self, features: Columns, ids: list[str]) -> Scored:
        """One batch through the serving (the dispatcher's scoring); ``ids``: its rows' event ids,
        which the challengers' shadow predictions carry, timed at the call. Rows the model fails
        on alone are its poison: their requests get the model's error, the others their scores."""
        n = len(features)
        messages = Messages.of([RequestRow(self._rows + i) for i in range(n)])
        self._rows += n
        rows = Rows(messages, ids, [""] * n, np.full(n, int(time.time() * 1000), np.int64), features)
        out = self.serving.score(rows, urgent=True)
        if self.drift is not None:
            self.drift.add(features)
        return out


def _tensor(name: str, array: np.ndarray, element: str, shape: Sequence[int | None]) -> np.ndarray:
    want = DTYPES.get(element)
    if want is None:
        raise BadRequest(f"input {name!r}: the model's {element} input is not served online")
    if want is np.object_:
        if array.dtype != object:
            raise BadRequest(f"input {name!r} takes BYTES (UTF-8 strings), got {array.dtype}")
        try:
            array = np.vectorize(lambda v: v.decode() if isinstance(v, bytes) else v, otypes=[object])(array)
        except UnicodeDecodeError as exc:
            raise BadRequest(f"input {name!r}: a string that is not UTF-8: {exc}") from None
    elif array.dtype != np.dtype(want):
        raise BadRequest(f"input {name!r} takes {DATATYPE[element]}, got {_kind(array)}")
    expected = [-1 if d is None else d for d in shape]
    fixed_ok = len(array.shape) == len(shape) and all(d is None or d == a for d, a in zip(shape[1:], array.shape[1:],
                                                                                        strict=True))
    if not fixed_ok:
        raise BadRequest(f"input {name!r} takes shape {expected}, got {list(array.shape)}")
    return array


def _kind(array: np.ndarray) -> str:
    try:
        return datatype_of(array)
    except ValueError:
        return str(array.dtype)
