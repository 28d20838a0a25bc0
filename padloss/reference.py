"""Naive NumPy reference model ("oracle") of padloss's operator numerics.

This module is the bit-exact oracle that the fast kernels are checked against
(``padloss check`` and the test-suite).  It shares no code with the kernels and
computes every rule itself (the mean's factor included); from padloss it reads one
switch only, ``padloss.rules.PAD_FINAL_ROUNDING`` (which rounding mode the pad's last
step uses, unconfirmed on hardware), so that flipping it moves oracle and kernels
together. Otherwise it imports numpy and the standard library (bfloat16 arrays come
from ml_dtypes, which their caller has imported), and every rounding step is
spelled out with exact float64 arithmetic instead of bit tricks.

Contracts: docs/circular_pad2d_backward.md and docs/l1_loss_backward.md.

Public API
----------
circular_pad2d_forward(x, padding)
circular_pad2d_backward(grad_output, self_shape, padding)
pad_final_round(acc, dtype)                      # the ONE place the pad rounding mode lives
l1_loss_backward(grad_output, self, target, reduction, out_dtype=None)
promote(*dtypes)
mean_coefficient(shape, compute_dtype)
compute_dtype_for(dtype)
round_half_to_even(x, dtype)
round_half_away_from_zero(x, dtype)

Inputs are never mutated; every result is a new array.
"""

from __future__ import annotations

import numpy as np

from . import rules

__all__ = [
    "circular_pad2d_forward",
    "circular_pad2d_backward",
    "pad_final_round",
    "l1_loss_backward",
    "promote",
    "mean_coefficient",
    "compute_dtype_for",
    "round_half_to_even",
    "round_half_away_from_zero",
]

F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
# The float formats by name: bfloat16 (ml_dtypes) is never imported here, since an
# array of that dtype means ml_dtypes is loaded already, and its import is slow.
FLOAT_NAMES = ("float16", "bfloat16", "float32", "float64")

# Number of significand bits (including the implicit one) of each float format.
_SIGNIFICAND_BITS = {"float16": 11, "bfloat16": 8, "float32": 24, "float64": 53}
# e with 2**e just past each format's largest finite value (finfo's maxexp).
_MAX_EXPONENT = {"float16": 16, "bfloat16": 128, "float32": 128, "float64": 1024}
# Unsigned integer type of the same width, used only to read the last significand bit
# when breaking a tie to even.
_BITS_VIEW = {"float16": np.uint16, "bfloat16": np.uint16, "float32": np.uint32, "float64": np.uint64}


# --------------------------------------------------------------------------------------
# Rounding to a storage format
# --------------------------------------------------------------------------------------

def _round_float64_to(x: np.ndarray, dtype: np.dtype, ties: str) -> np.ndarray:
    """Round float64 values ``x`` to ``dtype`` (f16/bf16/f32), to nearest, ties as asked.

    ``ties`` is "even" (IEEE round-to-nearest-even) or "away" (round half away from zero).

    Method (no bit tricks on the value itself):
      1. r0 = the library cast of x (numpy / ml_dtypes).  It may be imperfect
         (ml_dtypes double-rounds float64 -> bfloat16 through float32) but it is always
         one of the two ``dtype`` neighbours lo <= x <= hi.
      2. get the other neighbour with np.nextafter in ``dtype``.
      3. compare x with the midpoint (lo + hi) / 2, computed exactly in float64 (lo and hi
         have at most 24 significand bits, so their mean is exact in float64).
         Below -> lo, above -> hi, equal -> tie rule.
    Infinity as a neighbour stands for 2**(emax+1), the value whose selection means overflow
    (so finite values past max + half an ulp become inf, both tie rules agree there).
    Exactly representable values (including +-0.0, +-inf) and NaN pass through the cast
    unchanged.
    """
    dtype = np.dtype(dtype)
    x = np.asarray(x, dtype=F64)
    if dtype == F64:
        return x.copy()
    with np.errstate(over="ignore", invalid="ignore"):
        r0 = x.astype(dtype)
    result = r0.copy()
    r0_64 = r0.astype(F64)
    inexact = np.isfinite(x) & (r0_64 != x)
    if not inexact.any():
        return result

    xs = x[inexact]
    r = r0[inexact]
    r64 = r0_64[inexact]
    # The neighbour on the other side of x.
    towards_x = np.where(r64 < xs, np.inf, -np.inf).astype(dtype)
    with np.errstate(over="ignore"):
        other = np.nextafter(r, towards_x)
    lo = np.where(r64 < xs, r, other).astype(dtype)
    hi = np.where(r64 < xs, other, r).astype(dtype)

    beyond_max = 2.0 ** _MAX_EXPONENT[dtype.name]  # 2**(emax+1), exact in float64

    def as_f64(v):
        v64 = v.astype(F64)
        return np.where(np.isinf(v64), np.copysign(beyond_max, v64), v64)

    lo64, hi64 = as_f64(lo), as_f64(hi)
    mid = (lo64 + hi64) / 2.0  # exact

    if ties == "even":
        lo_is_even = (lo.view(_BITS_VIEW[dtype.name]) & 1) == 0  # +-inf and 2**k patterns are even
        tie_pick = np.where(lo_is_even, lo, hi)
    elif ties == "away":
        tie_pick = np.where(np.abs(hi64) > np.abs(lo64), hi, lo)
    else:
        raise ValueError(f"unknown tie rule {ties!r}")

    picked = np.where(xs < mid, lo, np.where(xs > mid, hi, tie_pick)).astype(dtype)
    result[inexact] = picked
    return result


def round_half_to_even(x, dtype) -> np.ndarray:
    """Round (float32 or float64) values to ``dtype`` to nearest, ties to even, once."""
    dtype = np.dtype(dtype)
    x = np.asarray(x)
    if x.dtype == dtype:
        return x.copy()
    return _round_float64_to(x.astype(F64), dtype, ties="even")


def round_half_away_from_zero(x, dtype) -> np.ndarray:
    """Round (float32 or float64) values to ``dtype`` to nearest, ties away from zero, once."""
    dtype = np.dtype(dtype)
    x = np.asarray(x)
    if x.dtype == dtype:
        return x.copy()
    return _round_float64_to(x.astype(F64), dtype, ties="away")


def pad_final_round(acc: np.ndarray, dtype) -> np.ndarray:
    """The final cast of circular_pad2d_backward: float32 accumulator -> storage dtype,
    in the mode ``padloss.rules.PAD_FINAL_ROUNDING`` names (CANN's CAST_ROUND, half
    away from zero; unconfirmed on hardware)."""
    if rules.PAD_FINAL_ROUNDING == "half_to_even":
        return round_half_to_even(acc, dtype)
    return round_half_away_from_zero(acc, dtype)


# --------------------------------------------------------------------------------------
# circular_pad2d
# --------------------------------------------------------------------------------------

def _circular_source(size: int, before: int, after: int) -> np.ndarray:
    """For one padded dim: the index in the original (uncropped) dim that each of the
    ``size + before + after`` padded positions copies, with F.pad(mode="circular") meaning.

    Negative pads crop first; positive pads then wrap around the cropped range.
    """
    crop_lo = max(-before, 0)
    cropped = size - crop_lo - max(-after, 0)
    pad_lo, pad_hi = max(before, 0), max(after, 0)
    out_size = cropped + pad_lo + pad_hi
    if cropped < 1 or out_size != size + before + after or pad_lo > cropped or pad_hi > cropped:
        raise ValueError(f"invalid circular padding ({before}, {after}) for size {size}")
    src = []
    for i in range(out_size):
        if i < pad_lo:                       # leading wrap band (left / top)
            c = cropped - pad_lo + i
        elif i < pad_lo + cropped:           # centre band
            c = i - pad_lo
        else:                                # trailing wrap band (right / bottom)
            c = i - pad_lo - cropped
        src.append(c + crop_lo)
    return np.array(src, dtype=np.int64)


def _contributors(size: int, before: int, after: int):
    """For one padded dim: for every original index, the padded position that holds it in
    the centre band, the leading wrap band and the trailing wrap band (-1 = no such term).
    A cropped index has no centre term (and hence no term at all)."""
    src = _circular_source(size, before, after)
    pad_lo = max(before, 0)
    cropped = len(src) - pad_lo - max(after, 0)
    center = np.full(size, -1, dtype=np.int64)
    lead = np.full(size, -1, dtype=np.int64)
    trail = np.full(size, -1, dtype=np.int64)
    for i, s in enumerate(src):
        if i < pad_lo:
            lead[s] = i
        elif i < pad_lo + cropped:
            center[s] = i
        else:
            trail[s] = i
    return center, lead, trail


def circular_pad2d_forward(x, padding) -> np.ndarray:
    """Circular pad of the last two dims, padding = [left, right, top, bottom]; negative pads
    crop (torch.nn.functional.pad(x, padding, mode="circular") semantics)."""
    x = np.asarray(x)
    left, right, top, bottom = (int(p) for p in padding)
    rows = _circular_source(x.shape[-2], top, bottom)
    cols = _circular_source(x.shape[-1], left, right)
    return x[..., rows[:, None], cols[None, :]].copy()


# inf - inf -> NaN and float32 overflow -> inf are expected results here, not errors.
@np.errstate(invalid="ignore", over="ignore")
def circular_pad2d_backward(grad_output, self_shape, padding, numerics: str = "spec") -> np.ndarray:
    """Gradient of circular_pad2d_forward w.r.t. its input, with the spec's numerics
    (``numerics="arch35-simt"``: Ascend 950's, :func:`_circular_pad2d_backward_arch35`).

    grad_output: (C, H', W') or (N, C, H', W'), dtype f16 / bf16 / f32 / f64.
    Returns a new array of shape ``self_shape`` and grad_output's dtype.

    Per input element (h, w), accumulating in float32 (float64 for float64):
        rowsum(j) = (g[centre_row, j] + g[top_wrap_row, j]) + g[bottom_wrap_row, j]
        result    = (rowsum(centre_col) + rowsum(left_wrap_col)) + rowsum(right_wrap_col)
    Missing terms are skipped (never "+ 0.0"); cropped elements are +0.0; then one rounding
    to the storage dtype by pad_final_round.
    """
    g = np.asarray(grad_output)
    dtype = g.dtype
    if not _is_float(dtype):
        raise TypeError(f"unsupported dtype {dtype}")
    self_shape = tuple(int(d) for d in self_shape)
    left, right, top, bottom = (int(p) for p in padding)
    H, W = self_shape[-2], self_shape[-1]
    expected = self_shape[:-2] + (H + top + bottom, W + left + right)
    if g.shape != expected:
        raise ValueError(f"grad_output shape {g.shape} != expected {expected}")

    acc_dtype = F64 if dtype == F64 else F32
    g = g.astype(acc_dtype)  # f16 / bf16 -> f32 is exact; always a fresh copy
    if numerics == "arch35-simt":
        return _circular_pad2d_backward_arch35(g, self_shape, (left, right, top, bottom), dtype)
    if numerics != "spec":
        raise ValueError(f"unknown numerics model {numerics!r}")

    row_c, row_t, row_b = _contributors(H, top, bottom)
    col_c, col_l, col_r = _contributors(W, left, right)

    # Step 1, rows: rowsum[..., h, j] for every padded column j.
    rowsum = np.zeros(self_shape[:-2] + (H, g.shape[-1]), dtype=acc_dtype)
    for h in range(H):
        if row_c[h] < 0:
            continue  # cropped row: stays +0.0
        s = g[..., row_c[h], :]
        if row_t[h] >= 0:
            s = s + g[..., row_t[h], :]
        if row_b[h] >= 0:
            s = s + g[..., row_b[h], :]
        rowsum[..., h, :] = s

    # Step 2, columns.
    acc = np.zeros(self_shape, dtype=acc_dtype)  # +0.0 for cropped positions
    for w in range(W):
        if col_c[w] < 0:
            continue  # cropped column: stays +0.0
        s = rowsum[..., :, col_c[w]]
        if col_l[w] >= 0:
            s = s + rowsum[..., :, col_l[w]]
        if col_r[w] >= 0:
            s = s + rowsum[..., :, col_r[w]]
        acc[..., :, w] = s

    if dtype == acc_dtype:
        return acc
    return pad_final_round(acc, dtype)


def _circular_pad2d_backward_arch35(g: np.ndarray, self_shape: tuple, padding: tuple,
                                    dtype: np.dtype) -> np.ndarray:
    """Ascend 950's kernel (ops-math pad_v3_grad_circular_simt.h), non-negative pads: per
    element one float32 accumulator from +0.0 (so a lone -0.0 term gives +0.0), adding the
    terms row by row (the centre row, then its copy in the top band, then in the bottom
    band), within a row column by column (centre, left band, right band); one rounding to
    nearest even (``__float2half_rn_sat`` / ``__float2bfloat16_rn_sat``, whose saturation
    the kernel never enables: unverified, docs/targets.md)."""
    left, right, top, bottom = padding
    if min(padding) < 0:
        raise ValueError("the arch35-simt model takes non-negative pads")
    H, W = self_shape[-2], self_shape[-1]
    acc = np.zeros(self_shape, dtype=g.dtype)
    for rows in _contributors(H, top, bottom):            # centre, top band, bottom band
        for cols in _contributors(W, left, right):        # centre, left band, right band
            there = (rows >= 0)[:, None] & (cols >= 0)[None, :]
            term = g[..., np.maximum(rows, 0)[:, None], np.maximum(cols, 0)[None, :]]
            acc = np.where(there, acc + term, acc)
    if dtype == acc.dtype:
        return acc
    return round_half_to_even(acc, dtype)


# --------------------------------------------------------------------------------------
# l1_loss_backward
# --------------------------------------------------------------------------------------

_REDUCTIONS = {0: "none", 1: "mean", 2: "sum", "none": "none", "mean": "mean", "sum": "sum"}


def _is_float(dt: np.dtype) -> bool:
    return dt.isnative and dt.name in FLOAT_NAMES


def _is_int_or_bool(dt: np.dtype) -> bool:
    return dt == np.dtype(bool) or np.issubdtype(dt, np.integer)


def _promote_floats(a: np.dtype, b: np.dtype) -> np.dtype:
    if a == b:
        return a
    if F64 in (a, b):
        return F64
    # any two different formats among f16 / bf16 / f32 -> f32 (including f16 + bf16)
    return F32


def promote(*dtypes) -> np.dtype:
    """The spec's dtype-only promotion (0-d tensors do not lose priority).

    same -> same; f16+f32 -> f32; bf16+f32 -> f32; f16+bf16 -> f32; anything+f64 -> f64;
    float + integer/bool -> that float (integers and bools never change a float result).
    Raises TypeError when no float is involved (P undefined) or a dtype is not supported.
    """
    result = None
    for d in dtypes:
        dt = np.dtype(d)
        if _is_float(dt):
            result = dt if result is None else _promote_floats(result, dt)
        elif not _is_int_or_bool(dt):
            raise TypeError(f"unsupported dtype {dt}")
    if result is None:
        raise TypeError(f"no float among {[str(np.dtype(d)) for d in dtypes]}: P undefined")
    return result


def compute_dtype_for(dtype) -> np.dtype:
    """float32 for f16 / bf16 / f32, float64 for f64."""
    dt = np.dtype(dtype)
    if dt == F64:
        return F64
    if _is_float(dt):   # float16, bfloat16 or float32
        return F32
    raise TypeError(f"no compute dtype for {dt}")


def mean_coefficient(shape, compute_dtype):
    """1.0 / d0 / d1 / ... / dk, one division per dim of ``shape``, in ``compute_dtype``
    (each dim converted to compute_dtype with round-to-nearest-even). 1.0 for a 0-d shape.

    Computed here on its own, not with padloss.rules.mean_coefficient (which the kernels
    use), so that the tests check that rule: each quotient of two float32 values is
    divided in float64 and rounded to float32, a second rounding that cannot change the
    result (53 >= 2 * 24 + 2 bits: Figueroa, "When is double rounding innocuous?", 1995)."""
    scalar = np.dtype(compute_dtype).type
    coef = 1.0
    with np.errstate(divide="ignore", invalid="ignore"):   # a zero-sized dim: nothing uses it
        for d in shape:
            coef = float(scalar(np.float64(coef) / np.float64(scalar(int(d)))))
    return scalar(coef)


def _round_int_to_significand(n: int, bits: int) -> int:
    """Round integer n to ``bits`` significant bits, ties to even (exact, Python ints)."""
    a = abs(n)
    extra = a.bit_length() - bits
    if extra <= 0:
        return n
    q, r = divmod(a, 1 << extra)
    half = 1 << (extra - 1)
    if r > half or (r == half and q & 1):
        q += 1
    return (q << extra) if n >= 0 else -(q << extra)


def _int_to_float(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Convert an integer / bool array to float ``dtype`` with ONE rounding to nearest even
    (overflow -> inf).  numpy / ml_dtypes casts can double-round for large values."""
    x = np.asarray(x)
    if x.dtype == np.dtype(bool):
        return x.astype(dtype)  # exactly 0.0 / 1.0
    flat = x.reshape(-1)
    as_f64 = np.empty(flat.shape, dtype=F64)
    small = np.abs(flat.astype(F64)) < 2.0 ** 53  # these are exact in float64
    as_f64[small] = flat[small].astype(F64)
    bits = _SIGNIFICAND_BITS[dtype.name]
    for i in np.flatnonzero(~small):
        # Round to the target's significand width first; the result then has <= 53
        # significant bits, so float() is exact, and the cast below only handles overflow.
        as_f64[i] = float(_round_int_to_significand(int(flat[i]), bits))
    return _round_float64_to(as_f64, dtype, ties="even").reshape(x.shape)


def _to_compute(x: np.ndarray, P: np.dtype, compute: np.dtype) -> np.ndarray:
    """Integers / bools -> P (one RNE rounding) -> compute (exact); floats -> compute (exact)."""
    if _is_int_or_bool(x.dtype):
        x = _int_to_float(x, P)
    if not _is_float(x.dtype):
        raise TypeError(f"unsupported dtype {x.dtype}")
    if x.dtype.itemsize > compute.itemsize:
        raise TypeError(f"{x.dtype} input cannot widen exactly to {compute}")
    return x.astype(compute)


def l1_loss_backward(grad_output, self, target, reduction, out_dtype=None,
                     numerics: str = "spec") -> np.ndarray:
    """d L1(self, target) / d self, with the spec's numerics.

    P = promote(target, promote(grad_output, self)); compute type = f32 (f64 for P = f64).
    Over the broadcast shape B of the three inputs:
        sign   = +1 if self > target, -1 if self < target, else 0 (equal or NaN)
        coef   = mean_coefficient(B, compute) for mean, 1 otherwise
        result = sign * (grad_output * coef)        # in the compute type
    then one round-to-nearest-even cast to ``out_dtype`` (default P).

    ``numerics="op-api"``: CANN's op_api around its kernel (the product targets'): the
    result rounded to P, then cast to ``out_dtype`` (a second rounding, or P's precision
    widened, where P is 16-bit and the output another dtype).
    """
    if numerics == "op-api":
        in_p = l1_loss_backward(grad_output, self, target, reduction)
        out = in_p.dtype if out_dtype is None else np.dtype(out_dtype)
        return in_p if out == in_p.dtype else in_p.astype(out)
    if numerics != "spec":
        raise ValueError(f"unknown numerics model {numerics!r}")
    g = np.asarray(grad_output)
    s = np.asarray(self)
    t = np.asarray(target)
    try:
        if isinstance(reduction, (bool, np.bool_)):
            raise KeyError(reduction)
        mode = _REDUCTIONS[reduction]
    except (KeyError, TypeError):
        raise ValueError(f"invalid reduction {reduction!r}") from None

    # All three at once: promote(int, int) alone has no float and would raise, yet the spec
    # accepts e.g. int16 grad + uint8 self + float16 target (integers never change P).
    P = promote(g.dtype, s.dtype, t.dtype)
    compute = compute_dtype_for(P)
    out = P if out_dtype is None else np.dtype(out_dtype)
    if not _is_float(out):
        raise TypeError(f"out_dtype must be a float dtype, got {out}")

    B = np.broadcast_shapes(g.shape, s.shape, t.shape)
    gc = np.broadcast_to(_to_compute(g, P, compute), B)
    sc = np.broadcast_to(_to_compute(s, P, compute), B)
    tc = np.broadcast_to(_to_compute(t, P, compute), B)

    one = np.asarray(1.0, dtype=compute)
    sign = np.where(sc > tc, one, np.where(sc < tc, -one, np.zeros((), dtype=compute)))
    coef = mean_coefficient(B, compute) if mode == "mean" else compute.type(1.0)

    with np.errstate(invalid="ignore", over="ignore"):
        scaled = gc * coef  # coef == 1 is an exact identity (NaN, inf, -0.0 kept)
        result = np.asarray(sign * scaled, dtype=compute)

    if out == compute:
        return result.copy()
    if out.itemsize > compute.itemsize:
        return result.astype(out)  # widening (f32 -> f64) is exact
    return round_half_to_even(result, out)
