"""Test helper: the same values laid out in memory in different ways.

Kernels must give the same bits whatever the strides, so property tests draw
a layout for every input and output: C-contiguous, Fortran order, a strided
slice of a larger buffer, reversed axes (negative strides) or a permuted
buffer viewed back into the logical order.
"""
from __future__ import annotations

import numpy as np

LAYOUTS = ("contiguous", "fortran", "sliced", "reversed", "permuted")


def with_layout(values: np.ndarray, layout: str) -> np.ndarray:
    """An array equal to ``values`` (same dtype and shape) stored in ``layout``."""
    if layout == "contiguous":
        out = np.empty(values.shape, values.dtype)
    elif layout == "fortran":
        out = np.empty(values.shape, values.dtype, order="F")
    elif layout == "sliced":
        big = np.empty(tuple(2 * d + 1 for d in values.shape), values.dtype)
        out = big[tuple(slice(1, None, 2) for _ in values.shape)]
    elif layout == "reversed":
        out = np.empty(values.shape, values.dtype)[tuple(slice(None, None, -1) for _ in values.shape)]
    elif layout == "permuted":
        order = tuple(reversed(range(values.ndim)))
        out = np.empty(tuple(values.shape[i] for i in order), values.dtype).transpose(order)
    else:
        raise ValueError(layout)
    out[...] = values
    return out


def bits(a: np.ndarray) -> np.ndarray:
    """The raw bit patterns of ``a`` (NaN payloads and signed zeros compare exactly)."""
    return np.ascontiguousarray(a).view(f"u{a.itemsize}")
