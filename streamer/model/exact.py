"""The bounds of exact conversion into a model input's element type: one table that the
contract's per-row conversion (contract.exact) and the columnar fast paths both read.

    element   holds exactly
    float32   every integer up to 2^24 in magnitude; finite values up to float32's max
    float64   every integer up to 2^53 in magnitude
    int64     integers in [-2^63, 2^63 - 1]
    int32     integers in [-2^31, 2^31 - 1]
"""

from __future__ import annotations

import numpy as np

EXACT_INT = {"float32": 2 ** 24, "float64": 2 ** 53}  # every int up to this is a float exactly
INT_RANGE = {"int64": (-2 ** 63, 2 ** 63 - 1), "int32": (-2 ** 31, 2 ** 31 - 1)}
F32_MAX = float(np.finfo(np.float32).max)  # the largest finite float32
