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

from .convert import F64, F32, load, store_half_away

@njit(inline="always")
def _fold_columns(src, src_kind, out, out_kind, crop, kept, before, after):
    """out[crop + c] = (src[before+c] + src[before+c-kept]) + src[before+c+kept],
    each wrapped term only where it exists; cropped columns get 0."""
    zero = store_half_away(out_kind, load(F32, np.float32(0.0)))
    for w in range(crop):
        out[w] = zero
    for w in range(crop + kept, out.shape[0]):
        out[w] = zero
    # Segment bounds: right-wrap columns are c < after, left-wrap ones c >= kept - before.
    right_end = min(after, kept)
    left_start = max(kept - before, 0)
    plain_lo = right_end
    plain_hi = max(left_start, right_end)
    for c in range(0, min(right_end, left_start)):          # right wrap only
        out[crop + c] = store_half_away(out_kind, load(src_kind, src[before + c])
                                        + load(src_kind, src[before + c + kept]))
    for c in range(plain_lo, plain_hi):                       # centre only: the copy
        out[crop + c] = store_half_away(out_kind, load(src_kind, src[before + c]))
    for c in range(left_start, right_end):                    # both wraps
        out[crop + c] = store_half_away(out_kind, (load(src_kind, src[before + c])
                                                   + load(src_kind, src[before + c - kept]))
                                        + load(src_kind, src[before + c + kept]))
    for c in range(max(left_start, right_end), kept):         # left wrap only
        out[crop + c] = store_half_away(out_kind, load(src_kind, src[before + c])
                                        + load(src_kind, src[before + c - kept]))


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
        zero = store_half_away(kind, load(F32, np.float32(0.0)))
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
                if not (has_top or has_bottom):
                    _fold_columns(src[centre], kind, out, kind, w_crop, w_kept, w_before, w_after)
                    continue
                for j in range(acc.shape[0]):
                    v = load(kind, src[centre, j])
                    if has_top:
                        v = v + load(kind, src[centre - h_kept, j])
                    if has_bottom:
                        v = v + load(kind, src[centre + h_kept, j])
                    acc[j] = v
                _fold_columns(acc, acc_kind, out, kind, w_crop, w_kept, w_before, w_after)

    return njit(parallel=parallel, cache=True, nogil=True)(kernel)
