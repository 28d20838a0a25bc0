"""Rounding results once to their storage dtype, in torch ops.

torch's casts from float32 round once to nearest, ties to even. Two cases need
their own few lines:

- The circular-pad backward rounds ties away from zero (CANN's ``CAST_ROUND``,
  docs/circular_pad2d_backward.md), or as ``padloss.rules.PAD_FINAL_ROUNDING``
  says: :func:`pad_final_round` follows it.
- float64 -> float16/bfloat16 (and integer -> bfloat16) goes through float32
  inside torch, rounding twice; :func:`round_nearest_even` rounds once.
"""
from __future__ import annotations

import torch

from padloss import rules


def round_half_away_from_zero(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """float32 ``x`` rounded once to ``dtype`` (float16 or bfloat16), ties away from zero.

    torch's cast gives ``nearest`` (ties to even). It is wrong only for an exact tie
    that went toward zero: ``|x|`` exactly halfway between ``|nearest|`` and the next
    value up. Both neighbours have at most 11 significant bits, so that midpoint is
    exact in float32. Past the largest finite value the next value up is inf (or NaN
    above inf and NaN), which never matches a finite ``|x|``; NaN stays NaN.
    """
    nearest = x.to(dtype)
    magnitude = nearest.abs()
    up = (magnitude.view(torch.int16) + 1).view(dtype)   # one unit in the last place further out
    low, high = magnitude.float(), up.float()
    tie_toward_zero = x.abs() == low + (high - low) / 2
    return torch.where(tie_toward_zero, torch.where(x < 0, -up, up), nearest)


def pad_final_round(total: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The circular pad's one rounding of its float32 sums to the storage ``dtype``.

    The mode is ``padloss.rules.PAD_FINAL_ROUNDING`` (CANN's CAST_ROUND, half away
    from zero; unconfirmed on hardware). Sums already in ``dtype`` (float32,
    float64, or a plain copy) pass through.
    """
    if total.dtype == dtype:
        return total
    if rules.PAD_FINAL_ROUNDING == "half_to_even":
        return total.to(dtype)
    return round_half_away_from_zero(total, dtype)


def round_to_odd_float32(x: torch.Tensor) -> torch.Tensor:
    """float64 -> float32, an inexact result taking the neighbour whose last bit is odd.

    A value rounded to odd with at least two spare bits rounds correctly to any
    narrower format afterwards (Boldo and Melquiond): truncate toward zero (undo a
    rounding away), then mark inexactness in the last bit. Overflow gives the
    largest float32, which still narrows to inf; NaN stays NaN.
    """
    nearest = x.to(torch.float32)
    back = nearest.to(torch.float64)
    bits = nearest.view(torch.int32)
    bits = bits - (back.abs() > x.abs()).to(torch.int32)
    bits = bits | (back != x).to(torch.int32)
    return bits.view(torch.float32)


def round_nearest_even(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x`` (float32 or float64) rounded once to ``dtype``, ties to even."""
    if x.dtype == dtype:
        return x
    if x.dtype == torch.float64 and dtype in (torch.float16, torch.bfloat16):
        x = round_to_odd_float32(x)
    return x.to(dtype)
