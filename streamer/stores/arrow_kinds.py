"""An Arrow column as hash fields: the kind a reader decodes it by, and whether it holds bytes.

A string column (dictionary-encoded too) is written as it is (kind ``str``), anything else as
JSON (kind ``json``: stores/values.py). Bytes have no text form a hash field can keep, in a
column or nested in one: the precompute and the feature load refuse such a column by name.
"""

from __future__ import annotations

import pyarrow as pa

from streamer.stores.values import Kind


def kind_of_column(kind: pa.DataType) -> Kind:
    """``str`` for a string column (dictionary-encoded too), ``json`` for anything else."""
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    return "str" if pa.types.is_string(kind) or pa.types.is_large_string(kind) else "json"


def holds_bytes(kind: pa.DataType) -> bool:
    """Whether values of ``kind`` are, or hold, bytes (binary, large or fixed-size)."""
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_fixed_size_binary(kind):
        return True
    return any(holds_bytes(kind.field(i).type) for i in range(kind.num_fields))
