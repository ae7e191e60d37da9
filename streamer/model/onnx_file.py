"""A model's file: the signature it declares (read from its protobuf without ONNX Runtime), its digest, and the file ``model.path`` serves.

For the commands that read a model's outputs but never score (``streamer tail`` makes the
prediction schema from them): no session, no provider probing, no CUDA messages. The result is
the :class:`Signature` an ``onnxruntime.InferenceSession`` of the same file reports (a test holds
the two equal for every model the project ships or builds): the graph's inputs less its
initializers (ONNX Runtime lists those as overridable, not as inputs), and its outputs, each with
ONNX Runtime's type string (``tensor(float)``, ``seq(map(int64,tensor(float)))``) and a shape with
an int per fixed dimension and None per named or unknown one.

Only the fields on the way are decoded (ModelProto.graph 7; GraphProto.initializer 5, input 11,
output 12, sparse_initializer 15; ValueInfoProto and TypeProto); weights are skipped by their
length, so a large model costs one pass over its bytes.
"""

from __future__ import annotations

import hashlib
import mmap
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import cast

from streamer.config import ModelConfig, model_versions
from streamer.errors import InferenceError
from streamer.model.signature import Signature, TensorSpec

DIGEST_HEX = 12  # of the SHA-256: enough to tell files apart, short enough to read in a header
# TensorProto.DataType -> ONNX Runtime's element type names.
_ELEMENT = {1: "float", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 8: "string",
            9: "bool", 10: "float16", 11: "double", 12: "uint32", 13: "uint64", 14: "complex64",
            15: "complex128", 16: "bfloat16"}
Field = tuple[int, int, int | memoryview]  # (field number, wire type, a varint's value or the bytes)


class _Bad(Exception):
    """The bytes are not a protobuf message (read_signature names the file)."""


def read_signature(path: str | Path) -> Signature:
    """The inputs and outputs ``path`` declares, as an ONNX Runtime session reports them.

    Raises:
        InferenceError: the file cannot be read or is not an ONNX model (what loading it says too).
    """
    path = Path(path)
    try:
        with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            view = memoryview(data)
            try:
                return _signature(view)
            finally:
                view.release()
    except OSError as exc:
        raise InferenceError(f"cannot load model {path}: {exc.strerror or exc}") from exc
    except (_Bad, ValueError) as exc:  # ValueError: mmap of an empty file
        raise InferenceError(f"cannot load model {path}: not an ONNX model ({exc})") from exc


def _signature(data: memoryview) -> Signature:
    graphs = [v for n, _, v in _fields(data) if n == 7 and isinstance(v, memoryview)]
    if not graphs:
        raise _Bad("it has no graph")
    inputs: list[TensorSpec] = []
    outputs: list[TensorSpec] = []
    initializers: set[str] = set()
    for n, _, v in _fields(graphs[-1]):  # protobuf: the last occurrence of a message field wins
        if not isinstance(v, memoryview):
            continue
        if n == 5:
            initializers.add(_string(v, 8))  # TensorProto.name
        elif n == 15:  # SparseTensorProto.values (a TensorProto) holds the name
            initializers.update(_string(t, 8) for k, _, t in _fields(v) if k == 1 and isinstance(t, memoryview))
        elif n in (11, 12):
            (inputs if n == 11 else outputs).append(_value_info(v))
    return Signature(tuple(s for s in inputs if s.name not in initializers), tuple(outputs))


def _value_info(data: memoryview) -> TensorSpec:
    name, kind = _string(data, 1), ""
    shape: tuple[int | None, ...] = ()
    for n, _, v in _fields(data):
        if n == 2 and isinstance(v, memoryview):
            kind, shape = _type(v)
    # A NodeArg's three attributes, so the element type and shape are read as for a session's.
    return TensorSpec.of(SimpleNamespace(name=name, type=kind, shape=list(shape)))


def _type(data: memoryview) -> tuple[str, tuple[int | None, ...]]:
    """A TypeProto as ONNX Runtime's type string, and its tensor shape (empty for other kinds)."""
    for n, _, v in _fields(data):
        if not isinstance(v, memoryview):
            continue
        if n in (1, 8):  # tensor_type, sparse_tensor_type: elem_type 1, shape 2
            elem, shape = 0, cast(tuple[int | None, ...], ())
            for k, _, w in _fields(v):
                if k == 1 and isinstance(w, int):
                    elem = w
                elif k == 2 and isinstance(w, memoryview):
                    shape = _shape(w)
            wrapper = "tensor" if n == 1 else "sparse_tensor"
            return f"{wrapper}({_ELEMENT.get(elem, f'type{elem}')})", shape
        if n in (4, 9):  # sequence_type, optional_type: elem_type 1 (a TypeProto)
            inner = next((_type(w)[0] for k, _, w in _fields(v) if k == 1 and isinstance(w, memoryview)), "")
            return f"{'seq' if n == 4 else 'optional'}({inner})", ()
        if n == 5:  # map_type: key_type 1 (an element type), value_type 2 (a TypeProto)
            key, value = 0, ""
            for k, _, w in _fields(v):
                if k == 1 and isinstance(w, int):
                    key = w
                elif k == 2 and isinstance(w, memoryview):
                    value = _type(w)[0]
            return f"map({_ELEMENT.get(key, f'type{key}')},{value})", ()
    return "", ()


def _shape(data: memoryview) -> tuple[int | None, ...]:
    """TensorShapeProto: a dimension's dim_value (1) is fixed; a dim_param (2) or nothing is free."""
    dims: list[int | None] = []
    for n, _, v in _fields(data):
        if n == 1 and isinstance(v, memoryview):
            values = [w for k, _, w in _fields(v) if k == 1 and isinstance(w, int)]
            dims.append(_signed(values[-1]) if values else None)
    return tuple(dims)


def _string(data: memoryview, number: int) -> str:
    found = [v for n, _, v in _fields(data) if n == number and isinstance(v, memoryview)]
    return bytes(found[-1]).decode("utf-8", "replace") if found else ""


def _signed(value: int) -> int:
    """An int64 field's varint as the signed number (protobuf writes negatives in 10 bytes)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _fields(data: memoryview) -> Iterator[Field]:
    """Every field of one message in order: varints as ints, length-delimited fields as views."""
    pos, end = 0, len(data)
    while pos < end:
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            yield number, wire, value
        elif wire == 2:
            size, pos = _varint(data, pos)
            if pos + size > end:
                raise _Bad(f"a field of {size} bytes runs past the end at byte {pos}")
            yield number, wire, data[pos:pos + size]
            pos += size
        elif wire in (1, 5):  # fixed 64 or 32 bits: no field on the way is one, skipped
            pos += 8 if wire == 1 else 4
        else:
            raise _Bad(f"wire type {wire} at byte {pos}")
    if pos != end:
        raise _Bad("the last field runs past the end")


def _varint(data: memoryview, pos: int) -> tuple[int, int]:
    """Protobuf's unsigned varint (7 bits a byte, low group first; not Avro's zigzag, varint.py)."""
    acc = shift = 0
    for i in range(pos, min(pos + 10, len(data))):
        byte = data[i]
        acc |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return acc, i + 1
    raise _Bad(f"a truncated or overlong varint at byte {pos}")


def file_digest(file: Path, strict: bool = False) -> str:
    """The first :data:`DIGEST_HEX` hex digits of ``file``'s SHA-256. A file that cannot be read:
    ``""`` (a runner that is not a file's: no digest travels), or with ``strict`` (a reload) the
    OSError, so the candidate is refused rather than served under a digest it does not have."""
    try:
        return hashlib.sha256(file.read_bytes()).hexdigest()[:DIGEST_HEX]
    except OSError:
        if strict:
            raise
        return ""


def served_file(m: ModelConfig) -> tuple[Path, str | None]:
    """The file to load for ``model.path`` and the version its place gives (a folder's number)."""
    versions = model_versions(m.path)
    if versions:
        n = max(versions)
        return versions[n], str(n)
    return m.path, None
