"""Streaming ceiling kernels: moving a given read/write mix and nothing else.

Both ops are memory-bound, so their speed is judged against a kernel that does
nothing but stream the same kind of traffic, measured in the same run:
each reads every input once and writes ``out`` once
(``out[i] = inputs[0][i] + inputs[1][i] + ...``). One input is a copy; three
inputs are L1's none-reduction mix (self, target, grad_output -> grad_input).

No one implementation is the fastest on every CPU (measured on an AVX2 EPYC:
a prange loop streamed a copy at 25.7 GB/s where this kernel's first version
managed 17.5 and NumPy's one thread 20.5), so ``ceilings`` offers several of
the same mix, to be timed in the same rounds and the best taken per round:
this kernel with normal stores (``prange``), NumPy's own where one NumPy call
makes the same single pass (``numpy``: a copy, a sum of two), and this kernel
streaming its output past the caches (``nt``, non-temporal stores of whole lines
summed straight from the inputs, where the L1 kernel stages its runs): the
stronger yardstick for an op that streams.
"""
from __future__ import annotations

import functools

import numba
import numpy as np
from numba import njit, prange

from . import nontemporal as nt
from .disk_cache import jit
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
    address of the piece it calls. Built as the ops' kernels are (padloss_numba.indirect):
    two ``prange`` loops that inlined the piece's work took 2.5-3.6 s to compile on a
    first call, this 1.6-1.9 s (alternating fresh processes, empty cache); the same
    speed, interleaved."""
    array = numba.types.Array(numba.from_dtype(dtype), 1, "C")
    signature = (numba.types.UniTuple(array, n_inputs), array, numba.types.Array(numba.int64, 1, "C"))
    return compile_entry(*dispatchers(), signature)


def prepare(n_inputs: int) -> None:
    """Compile (or load) the kernel of ``ceilings(n_inputs, ...)``, without buffers."""
    _kernel(n_inputs, np.dtype(np.float32))


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


NORMAL_STORES = ("prange", "numpy")   # the ceilings that write through the caches


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


def ceilings(n_inputs: int, n_elements: int) -> dict:
    """``ceilings_over`` buffers of ``n_inputs`` reads + 1 write of ``n_elements`` float32
    words each, allocated and touched here."""
    return ceilings_over(*_mix(n_inputs, n_elements))


def ceilings_over(inputs: tuple, out: np.ndarray) -> dict:
    """Zero-argument callables streaming ``inputs`` (1-D C-contiguous float32 arrays as
    long as ``out``) into ``out``, by name: ``prange`` and ``numpy`` (where one NumPy
    call makes that single pass) in normal stores, ``nt`` streaming an output as large
    as the ops stream (normal stores below that). Compiled, and each called once, here."""
    found = {"prange": _plan(inputs, out, *_pieces(out, False))}
    if len(inputs) == 1:
        found["numpy"] = lambda: np.copyto(out, inputs[0])
    elif len(inputs) == 2:
        found["numpy"] = lambda: np.add(inputs[0], inputs[1], out=out)
    found["nt"] = _plan(inputs, out, *_pieces(out, True))
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
