"""The circular-pad backward kernel: one source for every dtype, row by row.

Gather formulation: each gradInput row is produced by exactly one thread from
the gradOutput rows that wrap onto it, so there are no atomics and the bits
do not depend on the thread count. Per row, in the spec's order:

1. rows: ``(centre + top_wrap) + bottom_wrap`` over every gradOutput column,
   into a per-thread float32 (float64) row buffer; a row with no wrapped
   partner skips the buffer and reads gradOutput directly (the common case:
   a plain copy with conversion);
2. columns: ``(centre + left_wrap) + right_wrap``, then one rounding to the
   storage dtype (half away from zero, spec's CAST_ROUND).

Terms that do not exist are skipped, never added as zero (so -0.0 survives).
``make_kernel(kind, parallel)`` instantiates the source for one storage kind
(float16/bfloat16 arrive as uint16 bits) and one threading mode; ``kind`` and
``parallel`` are closure constants, which Numba folds and keys its on-disk
cache on.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from .convert import F64, F32, load, store_half_away, store_nearest_even

# The spec's final cast (CANN's CAST_ROUND, half away from zero). Unconfirmed on
# hardware: a finding there is a change of this one line (and reference.pad_final_round).
final_round = store_half_away


@njit(inline="always")
def _sum1(dst, a, src_kind, out_kind):
    if src_kind == out_kind:
        # One term read straight from storage is representable: every rounding
        # mode returns it unchanged, and nearest-even is the cheapest cast.
        for i in range(dst.shape[0]):
            dst[i] = store_nearest_even(out_kind, load(src_kind, a[i]))
    else:
        for i in range(dst.shape[0]):
            dst[i] = final_round(out_kind, load(src_kind, a[i]))


@njit(inline="always")
def _sum2(dst, a, b, src_kind, out_kind):
    for i in range(dst.shape[0]):
        dst[i] = final_round(out_kind, load(src_kind, a[i]) + load(src_kind, b[i]))


@njit(inline="always")
def _sum3(dst, a, b, c, src_kind, out_kind):
    for i in range(dst.shape[0]):
        dst[i] = final_round(out_kind, (load(src_kind, a[i]) + load(src_kind, b[i]))
                                 + load(src_kind, c[i]))


@njit(inline="always")
def _fold_columns(src, src_kind, out, out_kind, crop, kept, before, after):
    """out[crop + c] = (src[before+c] + src[before+c-kept]) + src[before+c+kept] for the kept
    columns, each wrapped term only where it exists; cropped columns get 0.

    Loops run over aligned slices from index 0 so that LLVM sees plain streams
    (no negative-index wraparound to check) and vectorises them.
    """
    out[:crop] = final_round(out_kind, np.float32(0.0))
    out[crop + kept:] = final_round(out_kind, np.float32(0.0))
    dst = out[crop:crop + kept]
    centre = src[before:before + kept]
    left = src[:before]                       # wraps onto columns kept-before .. kept-1
    right = src[before + kept:]               # wraps onto columns 0 .. after-1
    left_start = kept - before
    lo, hi = min(after, left_start), max(after, left_start)
    _sum2(dst[:lo], centre[:lo], right[:lo], src_kind, out_kind)            # right wrap only
    if after <= left_start:
        _sum1(dst[lo:hi], centre[lo:hi], src_kind, out_kind)                # centre only: the copy
    else:
        _sum3(dst[lo:hi], centre[lo:hi], left[:hi - lo], right[lo:hi], src_kind, out_kind)  # both
    _sum2(dst[hi:], centre[hi:], left[hi - left_start:], src_kind, out_kind)  # left wrap only


def make_kernel(kind: int, parallel: bool):
    """Compile-on-first-call kernel ``kernel(grad_output, grad_input, h_axis, w_axis, chunks)``.

    Arrays are 4-D (N, C, H', W') and (N, C, H, W); an axis is the tuple
    (crop, kept, before, after) of padloss.geometry.CircularAxis; ``chunks``
    is how many pieces the rows are split into for the threads (the serial
    twin always runs one). The thread count is read by the caller, not here:
    reading it inside a kernel makes Numba refuse to cache it on disk.
    """
    acc_kind = F64 if kind == F64 else F32
    acc_dtype = np.float64 if kind == F64 else np.float32

    def kernel(go, gi, h_axis, w_axis, chunks):
        h_crop, h_kept, h_before, h_after = h_axis
        w_crop, w_kept, w_before, w_after = w_axis
        n_planes, n_chan, height = gi.shape[0], gi.shape[1], gi.shape[2]
        rows = n_planes * n_chan * height
        chunks = min(rows, chunks) if parallel else 1
        zero = final_round(kind, np.float32(0.0))
        for chunk in prange(chunks):
            acc = np.empty(go.shape[3], acc_dtype)
            for row in range(chunk * rows // chunks, (chunk + 1) * rows // chunks):
                plane, h = divmod(row, height)
                n, ch = divmod(plane, n_chan)
                out = gi[n, ch, h]
                c = h - h_crop
                if c < 0 or c >= h_kept:                      # cropped row
                    out[:] = zero
                    continue
                src = go[n, ch]
                centre = h_before + c
                has_top = c >= h_kept - h_before
                has_bottom = c < h_after
                if has_top and has_bottom:
                    _sum3(acc, src[centre], src[centre - h_kept], src[centre + h_kept], kind, acc_kind)
                elif has_top:
                    _sum2(acc, src[centre], src[centre - h_kept], kind, acc_kind)
                elif has_bottom:
                    _sum2(acc, src[centre], src[centre + h_kept], kind, acc_kind)
                else:   # no wrapped partner: fold the gradOutput row directly
                    _fold_columns(src[centre], kind, out, kind, w_crop, w_kept, w_before, w_after)
                    continue
                _fold_columns(acc, acc_kind, out, kind, w_crop, w_kept, w_before, w_after)

    return njit(parallel=parallel, cache=True, nogil=True)(kernel)
