"""Plans for l1_loss_backward on the Numba backend: the loop nest, worked out once.

From the Problem's metadata alone the plan derives each tensor's strides over
the broadcast shape B (0 on broadcast dims), drops size-1 dims, flips dims the
output walks backwards, orders dims by the output's strides, merges adjacent
dims that every tensor walks contiguously, and pads the result to the kernel's
fixed rank. Most calls coalesce to one or two dims, so the inner loop is long;
and as the kernel sees flat arrays over a fixed rank, layouts never add
compiled variants (only the dtype mix does, and whether all four buffers go to
the kernel as they are: ``_as_they_are``). It also fixes the mean coefficient,
decides whether the output is streamed past the caches (large, contiguous
inner dim) and compiles the kernel for its exact signature. ``bind`` makes flat views of
the buffers' memory (once per executor binding); ``run`` only launches.
"""
from __future__ import annotations

import functools
import math
from typing import Callable

import numba
import numpy as np
from numpy.lib.stride_tricks import as_strided

from padloss.arrays import TensorMeta, numpy_dtype
from padloss.problem import Problem
from padloss.rules import FLOATS, compute_dtype, mean_coefficient, promoted_dtype

from . import nontemporal, variants
from .convert import STORAGE_CODE, STORAGE_VIEW
from .indirect import compile_entry
from .l1_kernel import INT, NEST, RANK, chunk_body, make_kernel
from .launch import PARALLEL_MIN_ELEMENTS, caller

MAX_BLOCK = 1 << 18    # inner elements per work item, at most (shorter blocks streamed ~3% slower)
CHUNKS_PER_THREAD = 2  # work pieces per thread (the work is uniform; 2 evens out a late start)


def broadcast_strides(meta: TensorMeta, shape: tuple[int, ...]) -> tuple[int, ...]:
    """``meta``'s strides over ``shape``, right-aligned, 0 where it is broadcast."""
    lead = len(shape) - len(meta.shape)
    return (0,) * lead + tuple(s if n != 1 else 0 for n, s in zip(meta.shape, meta.strides))


def coalesce(shape: tuple[int, ...], strides: list[tuple[int, ...]], bases: list[int]):
    """The smallest loop nest visiting ``shape`` element for element like ``strides``.

    Size-1 dims go; dims the output (last of ``strides``) walks backwards are
    flipped for every tensor (moving each base to the dim's far end); dims are
    sorted by the output's stride, largest first; neighbours that every tensor
    walks as one run merge. Returns (shape, strides, bases), rank <= len(shape).
    """
    dims = [k for k, n in enumerate(shape) if n != 1]
    bases = list(bases)
    strides = [list(s) for s in strides]
    for k in dims:
        if strides[-1][k] < 0:
            for a, s in enumerate(strides):
                bases[a] += (shape[k] - 1) * s[k]
                s[k] = -s[k]
    dims.sort(key=lambda k: -strides[-1][k])       # stable: ties keep their order
    out_shape: list[int] = []
    out_strides: list[list[int]] = [[] for _ in strides]
    for k in dims:
        if out_shape and all(o[-1] == s[k] * shape[k] for o, s in zip(out_strides, strides)):
            out_shape[-1] *= shape[k]
            for o, s in zip(out_strides, strides):
                o[-1] = s[k]
            continue
        out_shape.append(shape[k])
        for o, s in zip(out_strides, strides):
            o.append(s[k])
    return tuple(out_shape), tuple(tuple(o) for o in out_strides), tuple(bases)


def storage_kind(dtype: str) -> int:
    return STORAGE_CODE[dtype] if dtype in FLOATS else INT


def _flattener(meta: TensorMeta):
    """A function giving a 1-D view of a buffer's memory from its lowest element
    address (no copy), chosen once per plan from the buffer's layout; the plan's
    bases and strides index into this view. float16, bfloat16 and bool keep their
    dtype: the kernel's compiled wrapper reads them as the integer bits it is typed for
    (``_storage``; launch.caller), with no view made a call (docs/performance.md, "Tiny
    calls and autograd")."""
    if _c_contiguous(meta):
        return np.ndarray.ravel   # the common case, without a Python frame: a view, as C order is contiguous
    reversed_dims = tuple(slice(None, None, -1) if s < 0 else slice(None) for s in meta.strides)
    span = 1 + sum((n - 1) * abs(s) for n, s in zip(meta.shape, meta.strides))
    return lambda arr: as_strided(arr[reversed_dims], (span,), (arr.itemsize,))


# The rank of the kernel's arguments where a plan's buffers go as they are: NCHW's. Higher
# ones are flattened in Python instead: each dim is two more values the kernel's wrapper
# unpacks and passes on every call (docs/performance.md, "Tiny calls and autograd").
AS_IS_RANK = 4


def _as_they_are(metas) -> bool:
    """Whether a plan's buffers go to the kernel as they are: all C-contiguous, of at most
    ``AS_IS_RANK`` dims. The kernel's entry views each flat itself (l1_kernel.make_kernel),
    and a one-shot call makes no view in Python (docs/performance.md, "Tiny calls and
    autograd"); otherwise the plan hands over the views its flatteners make."""
    return all(len(m.shape) <= AS_IS_RANK and _c_contiguous(m) for m in metas)


def _argument_type(meta: TensorMeta, writable: bool, rank: int) -> numba.types.Array:
    """The Numba type the kernel's entry is compiled for of ``meta``'s buffer: of ``rank`` 1
    (its flat view), or ``AS_IS_RANK`` (the buffer as it is, or the flat view an executor
    binds): a compiled wrapper fills in an array of that rank or lower by its data, size and
    item size, all the entry reads of it (indirect.flat; numba_internals.compiled_wrapper),
    so ranks add no compiled variants. Inputs read-only and every array possibly unaligned,
    the widest types its arrays can take, so that writable or aligned ones convert to it
    at call time (NumPy arrays from an offset buffer can be unaligned)."""
    dtype = numba.from_dtype(_storage(meta))
    return numba.types.Array(dtype, rank, "C", readonly=not writable, aligned=False)


def _as_given(buffer):
    """A buffer as it is (``bind_around``'s grad_output and output, where they go so)."""
    return buffer


def _storage(meta: TensorMeta) -> np.dtype:
    """The dtype the kernel reads ``meta``'s elements as."""
    return np.dtype(STORAGE_VIEW.get(meta.dtype, meta.dtype))


def _c_contiguous(meta: TensorMeta) -> bool:
    """Whether a buffer's elements lie in C order, one after the other."""
    return meta.strides == _c_strides(meta.shape)


def _c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """C-order element strides of ``shape`` (size-1 dims match any stride, as NumPy's flag)."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


@functools.lru_cache(maxsize=None)
def _compiled_kernel(kinds: tuple, promoted: int, parallel: bool, exact: bool, streams: bool,
                     signature: tuple):
    """The entry point for one exact signature, and the address of the body it
    calls (shared by the serial and the parallel entry), compiled now, with
    compiling on call switched off for the entry: a call whose arrays differ
    only in ways that convert safely (writable where read-only is typed,
    aligned where unaligned is) then runs this variant instead of compiling
    another; Numba's dispatcher converts only when it may not compile. One
    dispatcher per signature, so that switch is never flipped back while
    another thread calls."""
    flat = tuple(t.copy(ndim=1) if isinstance(t, numba.types.Array) else t for t in signature)   # the body's
    compiled = compile_entry(make_kernel(parallel), chunk_body(kinds, promoted, exact, streams),
                             signature, flat)
    names = [variants.KIND_NAME.get(k) or str(array.dtype) for k, array in zip(kinds, signature)]
    body = ("exact" if exact else "rounded") + (" streamed" if streams else "")   # its store
    variants.record("l1_loss_backward", "{}, {}, {} -> {}".format(*names), body, parallel)
    return compiled


class L1LossBackwardPlan:
    """Loop nest, coefficient and kernel for one Problem; holds no arrays."""

    workspace_size = 0

    def __init__(self, problem: Problem, threads: int):
        (reduction,) = problem.params
        metas = problem.tensors
        shape = problem.output.shape
        promoted = promoted_dtype(m.dtype for m in metas[:-1])
        compute = np.dtype(compute_dtype(promoted)).type
        # element 0's offset from each tensor's lowest address (negative strides start high)
        bases = [sum((n - 1) * -s for n, s in zip(m.shape, m.strides) if s < 0) for m in metas]
        strides = [broadcast_strides(m, shape) for m in metas]
        loop_shape, loop_strides, starts = coalesce(shape, strides, bases)
        self.loop_shape = loop_shape          # what the kernel walks (1 or 2 dims, mostly)
        pad = RANK - len(loop_shape)
        dims = (1,) * pad + loop_shape
        steps = sum(((0,) * pad + s for s in loop_strides), ())
        coef = mean_coefficient(shape, compute_dtype(promoted)) if reduction == 1 else compute(1.0)
        self._flatten = tuple(_flattener(m) for m in metas)
        self._as_is = _as_they_are(metas)
        self._parallel = problem.output.size >= PARALLEL_MIN_ELEMENTS
        self.context_free = not self._parallel   # a serial run uses no threads
        self.reports_context = self._parallel    # a threaded runner returns its thread count
        chunks = CHUNKS_PER_THREAD * threads if self._parallel else 1
        # a row longer than a chunk's share is cut into blocks, so one long row still splits
        block = max(1, min(MAX_BLOCK, -(-dims[-1] // chunks)))
        items = math.prod(dims[:-1]) * -(-dims[-1] // block)   # work items: (row, block)
        chunks = max(1, min(items, chunks))
        # an output far larger than the caches, walked contiguously (steps[-1]: its inner
        # stride), is streamed past them
        self.streams = nontemporal.streams(problem.output.size * _storage(metas[3]).itemsize, self._parallel,
                                           dims[-1] > 1 and steps[-1] == 1)
        # the loop nest, and a slot for the body's address (set below)
        nest = NEST.pack(dims=dims, steps=steps, starts=starts, block=block, chunks=chunks, body=0)
        self._constants = (nest, coef)
        kinds = tuple(storage_kind(m.dtype) for m in metas)
        rank = AS_IS_RANK if self._as_is else 1
        signature = (tuple(_argument_type(m, i == 3, rank) for i, m in enumerate(metas))
                     + tuple(numba.typeof(c) for c in self._constants))
        # sign * grad_output, unscaled (none, sum) and in the output's own dtype, is a value that
        # dtype holds: +-grad_output, or a zero or NaN
        exact = reduction != 1 and metas[0].dtype == metas[3].dtype
        self._kernel, nest[NEST.body] = _compiled_kernel(kinds, STORAGE_CODE[promoted], self._parallel, exact,
                                                    self.streams, signature)
        self._call = caller(self._kernel, self._parallel)

    def bind(self, buffers: tuple) -> tuple:
        """The kernel's arguments for these buffers: their flat views, then the plan's. The
        views are new arrays, so an executor keeps them as they are (no ``bind_kept``)."""
        g, x, t, o = self._flatten
        grad_output, self_, target, out = buffers
        return (g(grad_output), x(self_), t(target), o(out), *self._constants)

    def bind_around(self, middle: tuple):
        """``bind`` for runs whose self and target are always ``middle``: their flat views
        made here, once; grad_output and the output, new arrays of the planned layout each
        run (padloss.fastpath.Prepared), go as they are where the plan's buffers do."""
        g, x, t, o = self._flatten
        if self._as_is:
            g = o = _as_given
        self_, target = middle
        fixed, constants = (x(self_), t(target)), self._constants
        return lambda grad_output, out: (g(grad_output), *fixed, o(out), *constants)

    def launcher(self, args: tuple):
        """``run(args, None, None)`` as a call of no arguments (padloss.backend.Plan)."""
        return functools.partial(self._call, *args)

    def runner(self):
        """``run(bind(buffers), None, None)`` as one call of the buffers (padloss.backend.Plan)."""
        return _runner(self._call, None if self._as_is else self._flatten, self._constants)

    def run(self, args: tuple, workspace, stream) -> None:
        self._call(*args)


def _runner(call, flatten: tuple | None, constants: tuple) -> Callable[[tuple], int | None]:
    """A plan's kernel ``call`` on the buffers, as they are (``flatten`` None: the one-shot
    call's buffers, checked in the same call) or as its ``bind`` flattens them, as one function
    of them, written out here (a Python call less) with the plan's flatteners and constants
    in its cells: a closure reads them cheaper than a partial passes them (docs/performance.md,
    "Tiny calls and autograd"). It returns what the kernel does (a threaded one: the thread
    count it ran under)."""
    nest, coef = constants
    if flatten is None:
        def run_as_they_are(buffers: tuple) -> int | None:
            grad_output, self_, target, out = buffers
            return call(grad_output, self_, target, out, nest, coef)
        return run_as_they_are
    g, x, t, o = flatten

    def run_on(buffers: tuple) -> int | None:
        grad_output, self_, target, out = buffers
        return call(g(grad_output), x(self_), t(target), o(out), nest, coef)

    return run_on


class OpApiL1Plan:
    """The op-api model (CANN's op_api around its kernel, the product targets'): the
    result computed into P, in the workspace, then cast to grad_input's dtype, where
    that differs from P (padloss.reference, ``numerics="op-api"``)."""

    def __init__(self, problem: Problem, threads: int):
        metas = problem.tensors
        out = metas[-1]
        self._promoted = promoted_dtype(m.dtype for m in metas[:-1])
        staged = TensorMeta(self._promoted, out.shape, _c_strides(out.shape))
        self._inner = L1LossBackwardPlan(problem._replace(tensors=(*metas[:-1], staged)), threads)
        self.context_free = self._inner.context_free
        self.workspace_size = math.prod(out.shape) * _storage(staged).itemsize

    def bind(self, buffers: tuple) -> tuple:
        return buffers

    def run(self, buffers: tuple, workspace, stream) -> None:
        *inputs, out = buffers
        staged = workspace[:self.workspace_size].view(numpy_dtype(self._promoted)).reshape(out.shape)
        self._inner.run(self._inner.bind((*inputs, staged)), None, stream)
        np.copyto(out, staged, casting="unsafe")   # P to the output: exact, or one rounding to even


def op_api_plan(problem: Problem, threads: int):
    """The plan of the op-api model: the spec's own where the output's dtype is P."""
    promoted = promoted_dtype(m.dtype for m in problem.tensors[:-1])
    if problem.output.dtype == promoted or problem.is_empty:
        return L1LossBackwardPlan(problem, threads)
    return OpApiL1Plan(problem, threads)
