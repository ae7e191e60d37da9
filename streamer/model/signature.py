"""What a model takes and gives, read from its ONNX Runtime session; and named columns that batch.

A :class:`Signature` lists every input and output with its name, element type and shape, as
Triton's model configuration does, so nothing about the model is assumed: the contract
(contract.py) is checked against it at start-up and on every hot reload.

:class:`Columns` holds a batch as named arrays of equal length (a model's inputs, or its mapped
outputs) and slices and joins like one array, so bisection, batching and revocation treat a
multi-input batch as they treat a ``[rows, n_features]`` matrix.

Worked example (skl2onnx's logistic regression, ZipMap on)::

    >>> Signature.of(session).describe()
    inputs:
      features  float32  [N, 4]
    outputs:
      output_label        int64    [N]
      output_probability  zipmap   seq(map(int64, float)): one probability per class
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# ONNX Runtime's type strings -> the element type names used in configs, errors and docs.
ELEMENTS: dict[str, str] = {
    "tensor(float)": "float32", "tensor(double)": "float64", "tensor(int64)": "int64",
    "tensor(int32)": "int32", "tensor(bool)": "bool", "tensor(string)": "string",
}
DTYPES: dict[str, Any] = {"float32": np.float32, "float64": np.float64, "int64": np.int64, "int32": np.int32,
                          "bool": np.bool_, "string": np.object_}
FLOATS = ("float32", "float64")


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """One input or output: ``element`` is a name of :data:`ELEMENTS`, 'zipmap' (a sequence of
    class -> probability maps, skl2onnx's ZipMap) or the runtime's own type string when it is
    neither; ``shape`` has an int per fixed dimension and None per free one (the batch)."""

    name: str
    element: str
    shape: tuple[int | None, ...]
    onnx_type: str

    @classmethod
    def of(cls, arg: Any) -> TensorSpec:
        """From an ONNX Runtime ``NodeArg``."""
        kind = str(arg.type)
        if kind in ELEMENTS:
            element = ELEMENTS[kind]
        elif kind.startswith("seq(map(") and kind.endswith("tensor(float)))"):
            element = "zipmap"
        else:
            element = kind
        shape = tuple(d if isinstance(d, int) else None for d in (arg.shape or []))
        return cls(str(arg.name), element, shape, kind)

    @property
    def known(self) -> bool:
        """An element type the contract can feed or read."""
        return self.element in DTYPES or self.element == "zipmap"

    @property
    def width(self) -> int | None:
        """Values per row: 1 for ``[N]`` and ``[N, 1]``, k for ``[N, k]``, None when not fixed."""
        if self.element == "zipmap" or len(self.shape) > 2:
            return None
        if len(self.shape) <= 1:
            return 1
        return self.shape[1]

    def describe(self) -> str:
        dims = ", ".join("N" if i == 0 and d is None else "?" if d is None else str(d)
                         for i, d in enumerate(self.shape))
        if self.element == "zipmap":
            key = self.onnx_type[len("seq(map("):].split(",")[0]
            return f"zipmap   seq(map({key}, float)): one probability per class"
        return f"{self.element:<8} [{dims}]"


@dataclass(frozen=True, slots=True)
class Signature:
    """A model's inputs and outputs, in the model's order."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    @classmethod
    def of(cls, session: Any) -> Signature:
        """From an ``onnxruntime.InferenceSession``."""
        return cls(tuple(TensorSpec.of(a) for a in session.get_inputs()),
                   tuple(TensorSpec.of(a) for a in session.get_outputs()))

    def input(self, name: str) -> TensorSpec | None:
        return next((s for s in self.inputs if s.name == name), None)

    def output(self, name: str) -> TensorSpec | None:
        return next((s for s in self.outputs if s.name == name), None)

    def describe(self) -> str:
        pad = max((len(s.name) for s in (*self.inputs, *self.outputs)), default=0) + 2
        lines = ["inputs:", *(f"  {s.name:<{pad}}{s.describe()}" for s in self.inputs),
                 "outputs:", *(f"  {s.name:<{pad}}{s.describe()}" for s in self.outputs)]
        return "\n".join(lines)

    def differs(self, other: Signature) -> str | None:
        """Why ``other`` cannot replace this model (None: it can): the same inputs and outputs,
        by name, element type and fixed dimensions."""
        for what, ours, theirs in (("inputs", self.inputs, other.inputs), ("outputs", self.outputs, other.outputs)):
            mine = {s.name: (s.element, s.shape[1:]) for s in ours}
            its = {s.name: (s.element, s.shape[1:]) for s in theirs}
            if mine != its:
                return f"its {what} are {_listing(theirs)}; the serving model's are {_listing(ours)}"
        return None


def _listing(specs: Sequence[TensorSpec]) -> str:
    return ", ".join(f"{s.name} {s.element} {list(s.shape)}" for s in specs)


class Columns:
    """Named arrays with one row per batch row: sliced, taken and joined like one array.

    ``columns[2:5]`` and ``columns[np.array([0, 3])]`` give Columns of those rows;
    ``Columns.join([a, b])`` stacks batches. A string column is a numpy object array.
    """

    __slots__ = ("arrays",)

    def __init__(self, arrays: Mapping[str, np.ndarray]) -> None:
        self.arrays: dict[str, np.ndarray] = dict(arrays)

    def __len__(self) -> int:
        return len(next(iter(self.arrays.values()))) if self.arrays else 0

    def __getitem__(self, idx: Any) -> Columns:
        return Columns({k: v[idx] for k, v in self.arrays.items()})

    def __repr__(self) -> str:
        return f"Columns({', '.join(f'{k}: {v.dtype}{list(v.shape)}' for k, v in self.arrays.items())})"

    @staticmethod
    def join(parts: Sequence[Columns]) -> Columns:
        if len(parts) == 1:
            return parts[0]
        return Columns({k: np.concatenate([p.arrays[k] for p in parts]) for k in parts[0].arrays})

    def blank(self, rows: int) -> Columns:
        """Columns like these with ``rows`` placeholder rows (NaN, 0, False or '')."""
        return Columns({k: _blank(v, rows) for k, v in self.arrays.items()})

    def put(self, at: int, block: Columns) -> None:
        """Write ``block``'s rows in place from row ``at``."""
        for k, v in self.arrays.items():
            v[at:at + len(block)] = block.arrays[k]


def numeric_matrix(batch: Columns) -> np.ndarray:
    """A batch's numeric input values as one float matrix, column by column in input order (what
    drift is measured on). String and bool inputs are left out; a single float matrix column (a
    one-input model's ``features``) is its own matrix."""
    arrays = list(batch.arrays.values())
    if len(arrays) == 1 and arrays[0].ndim == 2 and arrays[0].dtype.kind == "f":
        return arrays[0]
    cols = [v.reshape(len(v), -1).astype(np.float64) for v in arrays if v.dtype.kind in "fiu"]
    return np.hstack(cols) if cols else np.empty((len(batch), 0))


def _blank(like: np.ndarray, rows: int) -> np.ndarray:
    shape = (rows, *like.shape[1:])
    if like.dtype.kind == "f":
        return np.full(shape, np.nan, like.dtype)
    if like.dtype == object:
        return np.full(shape, "", object)
    return np.zeros(shape, like.dtype)
