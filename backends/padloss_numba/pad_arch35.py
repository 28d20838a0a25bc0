"""circular_pad2d_backward with Ascend 950's numerics (the ``arch35-simt`` model, target
``ascend-950``): one float32 accumulator from +0.0 per element, its terms row by row
(centre row, its top-band copy, its bottom-band copy), within a row column by column
(centre, left band, right band), one rounding to nearest even; non-negative pads.
padloss.reference models it; docs/targets.md gives its source.

A plain element-by-element kernel, compiled only when a call under that target first
needs it (one per storage kind and threading mode), cached on disk as the others.
"""
from __future__ import annotations

import functools

import numba
import numpy as np

from padloss.problem import Problem

from . import variants
from .building import jit, with_globals
from .convert import STORAGE_CODE, STORAGE_VIEW, load, store_nearest_even
from .launch import PARALLEL_MIN_ELEMENTS, caller


def _row_of(kind: int):
    """One output row's elements (``index``: its place among the N*C*H rows)."""
    def row(go, gi, pads, index):
        top, left, bottom, right = pads[0], pads[1], pads[2], pads[3]
        n, c, height, width = gi.shape
        i, h = divmod(np.int64(index), height)   # prange's index is unsigned
        b, p = divmod(i, c)
        for w in range(width):
            col = w + left
            lead, trail = w >= width - left, w < right   # its copies in the left/right bands
            total = np.float32(0.0)
            for band in range(3):                        # centre row, top band, bottom band
                if band == 0:
                    r = h + top
                elif band == 1:
                    if h < height - top:
                        continue
                    r = h + top - height
                else:
                    if h >= bottom:
                        continue
                    r = h + top + height
                total += np.float32(load(kind, go[b, p, r, col]))
                if lead:
                    total += np.float32(load(kind, go[b, p, r, col - width]))
                if trail:
                    total += np.float32(load(kind, go[b, p, r, col + width]))
            gi[b, p, h, w] = store_nearest_even(kind, total)

    return numba.njit(inline="always")(row)


@functools.lru_cache(maxsize=None)
def _kernel(kind: int, parallel: bool):
    """The entry for one storage kind and threading mode, named for both (its machine
    code's symbol and its cache index are its own)."""
    if parallel:
        def kernel(go, gi, pads):
            for index in numba.prange(gi.shape[0] * gi.shape[1] * gi.shape[2]):
                ROW(go, gi, pads, index)
    else:
        def kernel(go, gi, pads):
            for index in range(gi.shape[0] * gi.shape[1] * gi.shape[2]):
                ROW(go, gi, pads, index)
    kernel.__qualname__ = f"arch35_{variants.KIND_NAME[kind]}_{'parallel' if parallel else 'serial'}"
    compiled = jit(parallel=parallel)(with_globals(kernel, ROW=_row_of(kind)))
    variants.record("circular_pad2d_backward", variants.KIND_NAME[kind], "arch35-simt (ascend-950)", parallel)
    return compiled


ROW = None   # an entry's global: its kind's row function (_kernel, with_globals)


class Arch35PadPlan:
    """The kernel for one Problem under the arch35-simt model; holds no arrays."""

    workspace_size = 0

    def __init__(self, problem: Problem, threads: int):
        left, right, top, bottom = problem.params
        grad_input = problem.output
        kind = STORAGE_CODE[grad_input.dtype]
        if kind > STORAGE_CODE["float32"] or min(problem.params) < 0:
            raise ValueError("the arch35-simt model takes float16, bfloat16 or float32 and non-negative pads")
        self._view = STORAGE_VIEW.get(grad_input.dtype)      # float16/bfloat16 travel as uint16 bits
        self._rank3 = len(grad_input.shape) == 3
        self._parallel = grad_input.size >= PARALLEL_MIN_ELEMENTS
        self.context_free = not self._parallel   # a serial run uses no threads
        self._pads = np.array([top, left, bottom, right], np.int64)
        self._kernel = _kernel(kind, self._parallel)
        self._call = caller(self._kernel, self._parallel, dispatched=True)   # compiled on call

    def bind(self, buffers: tuple) -> tuple:
        go, gi = buffers
        if self._view is not None:
            go, gi = go.view(self._view), gi.view(self._view)
        if self._rank3:
            go, gi = go[None], gi[None]
        return go, gi

    def launcher(self, arrays: tuple):
        """``run(arrays, None, None)`` as a call of no arguments (padloss.backend.Plan)."""
        go, gi = arrays
        return functools.partial(self._call, go, gi, self._pads)

    def run(self, arrays: tuple, workspace, stream) -> None:
        go, gi = arrays
        self._call(go, gi, self._pads)
