"""Plans for circular_pad2d_backward on the Numba backend."""
from __future__ import annotations

import functools

import numpy as np

from padloss.geometry import circular_axis
from padloss.problem import Problem

from .convert import STORAGE_CODE, STORAGE_VIEW
from .launch import PARALLEL_MIN_ELEMENTS, launch_parallel
from .pad_kernel import accumulator_dtype, make_kernel

_kernel = functools.lru_cache(maxsize=None)(make_kernel)

# Row chunks per thread: enough to balance uneven chunks (band rows cost ~3x a copy).
CHUNKS_PER_THREAD = 4


class CircularPadPlan:
    """Geometry and kernel for one Problem; ``run`` views the buffers and launches.

    The workspace holds one float32 (float64) row buffer of W' elements per
    chunk of rows: the sums of wrapped rows, before the column fold.
    """

    def __init__(self, problem: Problem, threads: int):
        grad_output, grad_input = problem.tensors
        left, right, top, bottom = problem.params
        height, width = grad_input.shape[-2:]
        h, w = circular_axis(height, top, bottom), circular_axis(width, left, right)
        self._axes = np.array([h.crop, h.kept, h.before, h.after, w.crop, w.kept, w.before, w.after],
                              np.int64)
        kind = STORAGE_CODE[grad_input.dtype]
        self._view = STORAGE_VIEW.get(grad_input.dtype)   # float16/bfloat16 travel as uint16 bits
        self._rank3 = len(grad_input.shape) == 3
        self._parallel = grad_output.size >= PARALLEL_MIN_ELEMENTS
        self._kernel = _kernel(kind, self._parallel)
        rows = CHUNKS_PER_THREAD * threads if self._parallel else 1
        self.workspace_size = rows * w.padded * np.dtype(accumulator_dtype(kind)).itemsize

    def run(self, buffers: tuple, workspace: np.ndarray, stream) -> None:
        go, gi = buffers
        if self._view is not None:
            go, gi = go.view(self._view), gi.view(self._view)
        if self._rank3:
            go, gi = go[None], gi[None]
        if self._parallel:
            launch_parallel(self._kernel, go, gi, self._axes, workspace)
        else:
            self._kernel(go, gi, self._axes, workspace)


def compile_circular_pad2d_backward(problem: Problem, threads: int) -> CircularPadPlan:
    return CircularPadPlan(problem, threads)
