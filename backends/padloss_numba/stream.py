"""Streaming ceiling kernels: moving a given read/write mix and nothing else.

Both ops are memory-bound, so their speed is judged against a kernel that does
nothing but stream the same kind of traffic, measured in the same run:
``stream(inputs, out, pieces)`` reads every input once and writes ``out`` once
(``out[i] = inputs[0][i] + inputs[1][i] + ...``). One input is a copy; three
inputs are L1's none-reduction mix (self, target, grad_output -> grad_input).

The ceiling the ops' bars are set against uses normal stores. With
``nontemporal=True`` it streams its output past the caches (``nontemporal``),
as the L1 kernel does for large outputs: the stronger yardstick, and the one
to beat for an op that streams.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange

from .disk_cache import ENABLED as CACHE
from .nontemporal import STAGE_BYTES, STREAM_MIN_BYTES, drain, fence, lead_in


@njit(inline="always")
def _sums(inputs, start, dst, d0, count):
    """dst[d0 + i] = the inputs' sum at start + i, for i < count (unsigned indices: no
    negative-index wraparound, so LLVM vectorizes)."""
    for i in range(count):
        acc = inputs[0][np.uint64(start + i)]
        for k in range(1, len(inputs)):
            acc += inputs[k][np.uint64(start + i)]
        dst[np.uint64(d0 + i)] = acc


@njit(parallel=True, cache=CACHE, nogil=True)
def stream(inputs, out, pieces):
    """The sums into ``out``: normal stores with ``pieces`` 0, else ``pieces`` staged,
    non-temporal runs (all normal stores when ``out`` is not aligned to its item size)."""
    n = out.shape[0]
    if pieces == 0:
        for i in prange(n):
            acc = inputs[0][i]
            for k in range(1, len(inputs)):
                acc += inputs[k][i]
            out[i] = acc
        return
    stage_len = STAGE_BYTES // out.itemsize
    for piece in prange(pieces):
        stage = np.empty(stage_len, out.dtype)
        s, end = piece * n // pieces, (piece + 1) * n // pieces
        e = min(end, s + max(lead_in(out, s), 0))   # runs after the first start on a line
        while s < end:
            _sums(inputs, s, stage, 0, e - s)
            drain(out, s, stage, e - s)
            s, e = e, min(end, e + stage_len)
        fence()


def make_stream(n_inputs: int, n_elements: int, dtype=np.float32, nontemporal: bool = False):
    """A zero-argument callable streaming ``n_inputs`` reads + 1 write of
    ``n_elements`` each (buffers allocated and touched once, here); with
    ``nontemporal``, an output as large as the ops stream is streamed too."""
    inputs = tuple(np.ones(n_elements, dtype) for _ in range(n_inputs))
    out = np.zeros(n_elements, dtype)
    pieces = 2 * numba.get_num_threads() if nontemporal and out.nbytes >= STREAM_MIN_BYTES else 0
    stream(inputs, out, pieces)   # compile (or load) and fault the pages in
    return lambda: stream(inputs, out, pieces)
