"""Streaming ceiling kernels: moving a given read/write mix and nothing else.

Both ops are memory-bound, so their speed is judged against a kernel that does
nothing but stream the same kind of traffic, measured in the same run:
``stream(inputs, out, pieces)`` reads every input once and writes ``out`` once
(``out[i] = inputs[0][i] + inputs[1][i] + ...``). One input is a copy; three
inputs are L1's none-reduction mix (self, target, grad_output -> grad_input).

No one implementation is the fastest on every CPU (measured on an AVX2 EPYC:
a prange loop streamed a copy at 25.7 GB/s where this kernel's first version
managed 17.5 and NumPy's one thread 20.5), so ``ceilings`` offers several of
the same mix, to be timed in the same rounds and the best taken per round:
this kernel with normal stores (``prange``), NumPy's own where one NumPy call
makes the same single pass (``numpy``: a copy, a sum of two), and this kernel
streaming its output past the caches (``nt``, non-temporal stores, as the L1
kernel does for large outputs): the stronger yardstick for an op that streams.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange

from .disk_cache import jit
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


@jit(parallel=True)
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


NORMAL_STORES = ("prange", "numpy")   # the ceilings that write through the caches


def _mix(n_inputs: int, n_elements: int, dtype=np.float32) -> tuple[tuple, np.ndarray]:
    """The inputs and the output of a stream, allocated and touched."""
    return tuple(np.ones(n_elements, dtype) for _ in range(n_inputs)), np.zeros(n_elements, dtype)


def _streamed_pieces(out: np.ndarray) -> int:
    """``stream``'s ``pieces`` that stream ``out`` past the caches, as the ops would (0, normal
    stores, below the size they stream from)."""
    return 2 * numba.get_num_threads() if out.nbytes >= STREAM_MIN_BYTES else 0


def ceilings(n_inputs: int, n_elements: int) -> dict:
    """Zero-argument callables streaming ``n_inputs`` reads + 1 write of ``n_elements``
    float32 words each, by name: ``prange`` and ``numpy`` (where one NumPy call makes
    that single pass) in normal stores, ``nt`` streaming an output as large as the
    ops stream (normal stores below that). They share buffers, allocated, touched
    and compiled here."""
    inputs, out = _mix(n_inputs, n_elements)
    pieces = _streamed_pieces(out)
    found = {"prange": lambda: stream(inputs, out, 0)}
    if n_inputs == 1:
        found["numpy"] = lambda: np.copyto(out, inputs[0])
    elif n_inputs == 2:
        found["numpy"] = lambda: np.add(inputs[0], inputs[1], out=out)
    found["nt"] = lambda: stream(inputs, out, pieces)
    for fn in found.values():
        fn()
    return found


def make_stream(n_inputs: int, n_elements: int, dtype=np.float32, nontemporal: bool = False):
    """A zero-argument callable streaming ``n_inputs`` reads + 1 write of
    ``n_elements`` each (buffers allocated and touched once, here); with
    ``nontemporal``, an output as large as the ops stream is streamed too."""
    inputs, out = _mix(n_inputs, n_elements, dtype)
    pieces = _streamed_pieces(out) if nontemporal else 0
    stream(inputs, out, pieces)   # compile (or load) and fault the pages in
    return lambda: stream(inputs, out, pieces)
