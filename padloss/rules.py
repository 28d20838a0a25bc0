"""The numeric rules more than one layer applies, each written once.

The front end validates with them (circular_pad, l1_loss), padloss.reference
models them and every backend builds its plans from them, so a finding on the
hardware is a change of one line here. docs/ states the contract they implement.
"""
from __future__ import annotations

from typing import Iterable

import numpy as np

# Storage dtypes, by padloss's names. float64 is an extension of the CPU and torch
# backends; the Ascend kernels take the other three.
FLOATS = ("float16", "bfloat16", "float32", "float64")
NPU_FLOATS = ("float16", "bfloat16", "float32")
# What l1_loss_backward also reads (converted to the promoted float in the kernel).
INTEGERS = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")

# The circular pad's one rounding of its float32 sums to float16/bfloat16: CANN's
# CAST_ROUND, which its documents call half away from zero. Unconfirmed on hardware;
# if a device shows ties to even, this line becomes "half_to_even" (every
# implementation, and the Numba backend's compile cache, follow it).
PAD_FINAL_ROUNDING = "half_away_from_zero"
ROUNDINGS = ("half_away_from_zero", "half_to_even")


def promoted_dtype(dtypes: Iterable[str]) -> str | None:
    """P, l1_loss_backward's dtype-only promotion; None when no dtype is a float (P undefined).

    Equal floats keep their type, float64 wins over any other float, and two
    different formats among float16/bfloat16/float32 give float32 (so float16 +
    bfloat16 is float32). Integer and bool dtypes never change the result.
    """
    result = None
    for dtype in dtypes:
        if dtype not in FLOATS or dtype == result:
            continue
        if result is None:
            result = dtype
        elif "float64" in (result, dtype):
            result = "float64"
        else:
            result = "float32"
    return result


def compute_dtype(promoted: str) -> str:
    """The dtype L1's arithmetic runs in: float64 for float64, float32 for the others."""
    return "float64" if promoted == "float64" else "float32"


def mean_coefficient(shape: Iterable[int], compute: str) -> np.floating:
    """The "mean" factor: ``1 / d0 / d1 / ... / dk``, one division per dim of the
    broadcast shape in the compute dtype (not ``1 / numel``); 1 for a 0-d shape."""
    scalar = np.dtype(compute).type
    coef = scalar(1.0)
    with np.errstate(divide="ignore", invalid="ignore"):   # a zero-sized dim: nothing uses it
        for d in shape:
            coef = scalar(coef / scalar(int(d)))
    return coef
