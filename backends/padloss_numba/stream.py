"""The Numba backend's yardsticks: kernels that move a given read/write mix and nothing else.

Both ops are memory-bound, so ``padloss bench`` (padloss.bench.ceilings) judges them
against kernels that only stream the same kind of traffic, in the same rounds:
each reads every input once and writes ``out`` once
(``out[i] = inputs[0][i] + inputs[1][i] + ...``). One input is a copy; three
inputs are L1's none-reduction mix (self, target, grad_output -> grad_input).
``prange`` stores normally; ``nt`` streams its output past the caches in whole
lines summed straight from the inputs, with the ops' own non-temporal stores:
the stronger yardstick for an op that streams (docs/performance.md, "Ceilings").
"""
from __future__ import annotations

import functools

import numba
import numpy as np
from numba import njit, prange

from . import nontemporal as nt
from .building import jit
from .indirect import call_body, compile_entry
from .nontemporal import LINE, fence, item_bytes, lead_in, stream_lines
from .scalars import lesser


@njit(inline="always")
def _sums(inputs, start, dst, d0, count):
    """dst[d0 + i] = the inputs' sum at start + i, for i < count (unsigned indices: no
    negative-index wraparound, so LLVM vectorizes)."""
    for i in range(count):
        acc = inputs[0][np.uint64(start + i)]
        for k in range(1, len(inputs)):
            acc += inputs[k][np.uint64(start + i)]
        dst[np.uint64(d0 + i)] = acc


# Slots of a stream's ``plan``: the piece's compiled address, how many pieces, streamed or not.
BODY, PIECES, STREAMED = 0, 1, 2


def _piece(inputs, out, plan, piece, pieces):
    """Piece ``piece`` of ``pieces`` of the sums into ``out``: normal stores, or with
    ``plan[STREAMED]`` each whole aligned line of ``out`` summed from the inputs and
    streamed in one non-temporal store, straight, with no stage (the piece's ends in
    normal stores; all of it when ``out`` is not aligned to its item size)."""
    n = out.shape[0]
    s, end = piece * n // pieces, (piece + 1) * n // pieces
    if plan[STREAMED]:
        lead = lead_in(out, s)
        d = end if lead < 0 else lesser(end, s + lead)   # the first line boundary
        _sums(inputs, s, out, s, d - s)
        per_line = LINE // item_bytes(out)
        while d + per_line <= end:
            stream_lines(out, d, inputs, d, 1)
            d += per_line
        _sums(inputs, d, out, d, end - d)
        fence()
    else:
        _sums(inputs, s, out, s, end - s)


def _entry(inputs, out, plan):
    for piece in prange(plan[PIECES]):
        call_body(plan[BODY], (inputs, out, plan, np.int64(piece), plan[PIECES]))


@functools.lru_cache(maxsize=None)
def _kernel(n_inputs: int, dtype: np.dtype) -> tuple:
    """The parallel entry for ``n_inputs`` 1-D C-contiguous ``dtype`` inputs and the
    address of the piece it calls, built as the ops' kernels are (padloss_numba.indirect):
    it compiles faster than inlined pieces (docs/performance.md, "Ceilings")."""
    array = numba.types.Array(numba.from_dtype(dtype), 1, "C")
    signature = (numba.types.UniTuple(array, n_inputs), array, numba.types.Array(numba.int64, 1, "C"))
    return compile_entry(*dispatchers(), signature)


def dispatchers() -> tuple:
    """New dispatchers of the entry and the piece (compile_entry pins each to one signature)."""
    return jit(parallel=True)(_entry), jit(_nrt=False)(_piece)


def _plan(inputs: tuple, out: np.ndarray, pieces: int, streamed: bool):
    """A zero-argument callable: the sums of ``inputs`` into ``out`` in ``pieces``
    contiguous runs, in parallel (as Numba splits a ``prange`` over the elements),
    with normal stores or, ``streamed``, non-temporal ones."""
    entry, body = _kernel(len(inputs), out.dtype)
    plan = np.array([body, pieces, streamed], np.int64)
    return lambda: entry(inputs, out, plan)


def _mix(n_inputs: int, n_elements: int, dtype=np.float32) -> tuple[tuple, np.ndarray]:
    """The inputs and the output of a stream, allocated and touched."""
    return tuple(np.ones(n_elements, dtype) for _ in range(n_inputs)), np.zeros(n_elements, dtype)


def _pieces(out: np.ndarray, nontemporal: bool) -> tuple[int, bool]:
    """``_plan``'s (pieces, streamed): one normal-store run per thread, or, with
    ``nontemporal`` and an output as large as the ops stream past the caches, two
    streamed runs per thread, as the ops would."""
    threads = numba.get_num_threads()
    if nontemporal and nt.streams(out.nbytes, True, True):
        return 2 * threads, True
    return threads, False


def ceilings_over(inputs: tuple, out: np.ndarray) -> dict:
    """Zero-argument callables streaming ``inputs`` (1-D C-contiguous float32 arrays as
    long as ``out``) into ``out``, by name: ``prange`` in normal stores, ``nt`` streaming
    an output as large as the ops stream (normal stores below that). Compiled, and each
    called once, here."""
    found = {"prange": _plan(inputs, out, *_pieces(out, False)),
             "nt": _plan(inputs, out, *_pieces(out, True))}
    for fn in found.values():
        fn()
    return found


def make_stream(n_inputs: int, n_elements: int, dtype=np.float32, nontemporal: bool = False):
    """A zero-argument callable streaming ``n_inputs`` reads + 1 write of
    ``n_elements`` each (buffers allocated and touched once, here); with
    ``nontemporal``, an output as large as the ops stream is streamed too."""
    inputs, out = _mix(n_inputs, n_elements, dtype)
    run = _plan(inputs, out, *_pieces(out, nontemporal))
    run()   # compile (or load) and fault the pages in
    return run
