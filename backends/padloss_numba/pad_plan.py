"""Plans for circular_pad2d_backward on the Numba backend."""
from __future__ import annotations

import functools
from typing import Callable

import numba
import numpy as np

from padloss.arrays import TensorMeta
from padloss.geometry import circular_axis
from padloss.problem import Problem

from . import variants
from .convert import BF16, F16, F32, F64, STORAGE_CODE
from .indirect import compile_called, compile_entry
from .launch import PARALLEL_MIN_ELEMENTS, caller
from .pad_kernel import (
    AXES,
    ROW_STACK_BYTES,
    STREAMED_GEOMETRY,
    WINDOWED_KINDS,
    accumulator_dtype,
    chunk_body,
    columns_fit_windows,
    make_kernel,
    streamed_rows,
    streams,
)


def c_contiguous(meta: TensorMeta) -> bool:
    """NumPy's C_CONTIGUOUS flag from metadata (size-1 dims take any stride), which
    decides whether Numba types the array as layout "C"."""
    step = 1
    for n, s in zip(reversed(meta.shape), reversed(meta.strides)):
        if n != 1 and s != step:
            return False
        step *= n
    return True


def interleaved_channels(metas: tuple[TensorMeta, ...]) -> int:
    """C, where every one of ``metas`` (..., C, H, W) keeps its C channels inside each
    row's pixels (the W stride is C times the C stride: channels-last), else 1.

    Such rows are folded as rows of W*C elements with the width's pads times C: the
    same sums in the same order (each element's column moves by C per pixel, and a
    wrapped band by C times its pixels), where the planes of (H, W) stride by C
    elements on every column."""
    channels = metas[0].shape[-3]
    if channels > 1 and all(m.strides[-1] == channels * m.strides[-3] for m in metas):
        return channels
    return 1


def _rows_of_pixels(a: np.ndarray) -> np.ndarray:
    """(N, C, H, W) with interleaved channels as the view (N, 1, H, W*C)."""
    n, c, h, w = a.shape
    return a.transpose(0, 2, 3, 1).reshape(n, h, w * c)[:, None]


def _merged(meta: TensorMeta, channels: int) -> TensorMeta:
    """``meta`` as ``_rows_of_pixels`` views it (with ``channels`` interleaved)."""
    if channels == 1:
        return meta
    *lead, c, h, w = meta.shape
    *lead_strides, sc, sh, _ = meta.strides
    return TensorMeta(meta.dtype, (*lead, 1, h, w * c), (*lead_strides, 0, sh, sc))


# What the kernel reads each storage kind's elements as (float16/bfloat16 as uint16 bits).
_ELEMENT = {F16: numba.uint16, BF16: numba.uint16, F32: numba.float32, F64: numba.float64}


# How ``padloss info`` names a kernel's layout (variants.record), and a body without windows.
LAYOUT_NAME = {"C": "C-contiguous", "A": "any layout"}
WINDOWLESS_NAME = " without windows"


def _arrays(kind: int, layout: str) -> tuple:
    """The entry's argument types: grad_output typed read-only and every array possibly
    unaligned, so writable or aligned buffers convert to it at call time and no
    writability, alignment or strided layout adds a compiled variant (there were up to
    10 per kind and threading mode)."""
    element = _ELEMENT[kind]
    return (numba.types.Array(element, 4, layout, readonly=True, aligned=False),
            numba.types.Array(element, 4, layout, aligned=False),
            numba.types.Array(numba.int64, 1, "C"), numba.types.Array(numba.uint8, 1, "C"))


def _windowed_body(kind: int, columns_fit: bool) -> bool:
    """Whether a plan's body is the one with windows (pad_kernel.chunk_body's ``windowed``):
    for the kinds that have them, where the plan's columns fit them. Rows too narrow for
    windows run the body without them, whatever else was compiled before: it runs them
    faster (docs/performance.md, "Compiled bodies and entry points")."""
    return kind in WINDOWED_KINDS and columns_fit


@functools.lru_cache(maxsize=None)
def _kernel(kind: int, parallel: bool, layout: str, windowed: bool):
    """The entry point for one storage kind, threading mode and layout ("C" when
    both buffers are C-contiguous, else "A"), and the address of the body it
    calls, with or without windows (shared by the serial and the parallel entry),
    each compiled for that one signature (``_arrays``; indirect.compile_entry). One
    dispatcher per signature, as in l1_plan."""
    compiled = compile_entry(make_kernel(kind, parallel), chunk_body(kind, windowed), _arrays(kind, layout))
    variants.record("circular_pad2d_backward", variants.KIND_NAME[kind],
                    LAYOUT_NAME[layout] + ("" if windowed else WINDOWLESS_NAME), parallel)
    return compiled


@functools.lru_cache(maxsize=None)
def _streamed_rows(kind: int, layout: str) -> int:
    """The address of ``streamed_rows(kind)`` compiled for the body's planes in ``layout``
    (one (N, C) plane of each array: ``go[n, ch]``), which a streaming plan's body calls
    (pad_kernel.streams says which plans stream)."""
    planes = tuple(a.copy(ndim=2) for a in _arrays(kind, layout)[:2])
    geometry = numba.types.UniTuple(numba.int64, STREAMED_GEOMETRY)
    compiled = compile_called(streamed_rows(kind), planes + (geometry,))
    variants.record("circular_pad2d_backward", variants.KIND_NAME[kind], LAYOUT_NAME[layout] + " streamed",
                    True)
    return compiled


# The workspace argument of a plan whose row buffers are on the kernel's stack.
NO_WORKSPACE = np.empty(0, np.uint8)


def _runner(call, axes: np.ndarray, bind) -> Callable[[tuple], int | None]:
    """A plan's kernel ``call`` on the buffers (through ``bind``, unless None), its rows on the
    stack, as one function of them: the plan's parts in its cells, which a closure reads
    cheaper than a partial passes them (docs/performance.md, "Tiny calls and autograd").
    It returns what the kernel does (a threaded one: the thread count it ran under)."""
    workspace = NO_WORKSPACE

    def run_on(buffers: tuple) -> int | None:
        go, gi = buffers if bind is None else bind(buffers)
        return call(go, gi, axes, workspace)

    return run_on


# Row chunks per thread: enough to balance uneven chunks (band rows cost ~3x a copy).
CHUNKS_PER_THREAD = 4


class CircularPadPlan:
    """Geometry and kernel for one Problem; ``bind`` views the buffers, ``run`` launches.

    Each chunk of rows has a float32 (float64) row buffer of W' elements (W'*C for
    channels-last rows of pixels): the sums of wrapped rows, before the column fold.
    Rows of up to pad_kernel.ROW_STACK_BYTES live on the kernel's stack, and the plan
    needs no workspace (each run would otherwise take one and give it back); the
    workspace holds longer ones, one per chunk.
    """

    def __init__(self, problem: Problem, threads: int):
        self._channels = interleaved_channels(problem.tensors)   # rows of W*C elements, if > 1
        grad_output, grad_input = (_merged(m, self._channels) for m in problem.tensors)
        left, right, top, bottom = problem.params
        height, width = grad_input.shape[-2:]
        h = circular_axis(height, top, bottom)
        w = circular_axis(width // self._channels, left, right)
        kind = STORAGE_CODE[grad_input.dtype]
        self._rank3 = len(grad_input.shape) == 3
        self._parallel = grad_output.size >= PARALLEL_MIN_ELEMENTS
        self.context_free = not self._parallel   # a serial run uses no threads
        self.reports_context = self._parallel    # a threaded runner returns its thread count
        layout = "C" if c_contiguous(grad_output) and c_contiguous(grad_input) else "A"
        out_nbytes = grad_input.size * _ELEMENT[kind].bitwidth // 8
        w_axes = [self._channels * n for n in (w.crop, w.kept, w.before, w.after)]
        windowed = _windowed_body(kind, columns_fit_windows(w_axes))
        self.streams = streams(windowed, out_nbytes, self._parallel, layout == "C")   # past the caches
        self._kernel, body = _kernel(kind, self._parallel, layout, windowed)
        self._call = caller(self._kernel, self._parallel)
        rows = grad_input.size // width
        # pieces of the rows for the threads, each with a row buffer in the workspace
        chunks = max(1, min(rows, CHUNKS_PER_THREAD * threads)) if self._parallel else 1
        rows_address = _streamed_rows(kind, layout) if self.streams else 0   # 0: the body folds them
        row_bytes = w.padded * self._channels * np.dtype(accumulator_dtype(kind)).itemsize
        self._row_on_stack = row_bytes <= ROW_STACK_BYTES
        self._axes = AXES.pack(height=(h.crop, h.kept, h.before, h.after), width=w_axes, body=body,
                               chunks=chunks, streamed_rows=rows_address, row_on_stack=self._row_on_stack)
        self.workspace_size = 0 if self._row_on_stack else chunks * row_bytes

    def bind(self, buffers: tuple) -> tuple:
        """The kernel's arrays for these buffers, once per binding (an Executor's runs
        reuse them): 4-D. float16/bfloat16 arrays go as they are: the kernel's compiled
        wrapper reads them as the uint16 bits it is typed for (launch.caller), with no view
        made a call (docs/performance.md, "Tiny calls and autograd")."""
        go, gi = buffers
        if self._rank3:
            go, gi = go[None], gi[None]
        if self._channels > 1:
            go, gi = _rows_of_pixels(go), _rows_of_pixels(gi)
        return go, gi

    def bind_kept(self, buffers: tuple) -> tuple:
        """``bind`` for buffers an executor keeps: where ``bind`` handed a caller's array on
        as it is (rank 4, rows of one channel, any dtype), a view of its own, so that the array
        changed in place after it was validated (another rank, say) never reaches the
        kernel's compiled wrapper, which trusts its type (launch.caller)."""
        go, gi = self.bind(buffers)
        return go.view() if go is buffers[0] else go, gi.view() if gi is buffers[1] else gi

    def launcher(self, arrays: tuple):
        """``run(arrays, None, None)`` as a call of no arguments (padloss.backend.Plan), for a
        plan whose rows are on the stack; None for one that needs a workspace."""
        if not self._row_on_stack:
            return None
        go, gi = arrays
        return functools.partial(self._call, go, gi, self._axes, NO_WORKSPACE)

    def runner(self):
        """``run(bind(buffers), None, None)`` as one call of the buffers (padloss.backend.Plan),
        for a plan whose rows are on the stack; None for one that needs a workspace."""
        if not self._row_on_stack:
            return None
        plain = not self._rank3 and self._channels == 1   # bind changes nothing
        return _runner(self._call, self._axes, None if plain else self.bind)

    def run(self, arrays: tuple, workspace: np.ndarray | None, stream) -> None:
        go, gi = arrays
        if self._row_on_stack:
            workspace = NO_WORKSPACE   # the kernel's rows are on its stack; it reads none
        self._call(go, gi, self._axes, workspace)

