"""Skipping re-validation of calls whose metadata was validated before.

Validation is a pure function of metadata (dtypes, shapes, strides and the op's
parameters), so a call with plain NumPy arguments whose signature matches an
earlier, valid one gets the same verdict: the Problem that full validation
built. What depends on the buffers themselves (the output's writability, and
overlap between output and inputs) is still checked on every call. This keeps
a tiny call at a few microseconds; anything unusual (torch tensors, lists,
a first-time signature) takes the full path.

Each op keeps two memos: one for calls given an output, keyed on every buffer,
and one for calls that allocate it, keyed on the inputs alone (the new output
is always a C-ordered NumPy array, so its metadata follows from the Problem).
An entry also keeps the plan its last one-shot call ran (see executor.run_once).
"""
from __future__ import annotations

from typing import Any, Hashable

import numpy as np

from .arrays import Tensor, TensorMeta, numpy_dtype
from .errors import invalid_argument
from .executor import check_output_overlap
from .problem import Problem

MAX_SIGNATURES = 1024
_make_tensor = Tensor._make


class Known:
    """A validated signature's Problem, and what its last one-shot call ran
    (an executor.Ready, or None), kept for the next call to check and reuse."""

    __slots__ = ("problem", "ready")

    def __init__(self, problem: Problem):
        self.problem = problem
        self.ready = None


class ValidatedCalls:
    """Signature -> Known for one op; cleared when full (a cheap, safe bound)."""

    def __init__(self, op: str):
        self.op = op
        self._known: dict[Hashable, Known] = {}

    @staticmethod
    def signature(arrays: tuple, params: Any) -> tuple | None:
        """The memo key, or None (never remembered) when an argument is not a plain
        ndarray or the op's parameters are not known exactly (``params`` None)."""
        if params is None:
            return None
        key: list = [params]
        append = key.append
        for a in arrays:
            if type(a) is not np.ndarray:
                return None
            append(a.dtype)
            append(a.shape)
            append(a.strides)
        return tuple(key)

    def remember(self, key: tuple | None, problem: Problem) -> None:
        if key is None:
            return
        if len(self._known) >= MAX_SIGNATURES:
            self._known.clear()
        self._known[key] = Known(problem)

    def known(self, key: tuple | None) -> Known | None:
        """The entry of a known signature (calls that allocate their output)."""
        return self._known.get(key) if key is not None else None

    def checked(self, key: tuple | None, buffers: tuple, names: tuple[str, ...]) -> Known | None:
        """The entry of a known signature once the output (last of ``buffers``)
        passed the per-call checks; None for an unknown signature."""
        known = self._known.get(key) if key is not None else None
        if known is None:
            return None
        *inputs, out = buffers
        if not out.flags.writeable:
            raise invalid_argument(self.op, names[-1], "is read-only; the output must be writable")
        for b in inputs:
            if np.may_share_memory(out, b):
                check_output_overlap(self.op, names, as_tensors(known.problem, buffers))   # names the input
        return known


def as_tensors(problem: Problem, buffers: tuple) -> tuple[Tensor, ...]:
    """NumPy ``buffers`` of a validated signature as Tensors (their own native views)."""
    return tuple([_make_tensor((meta, "cpu", b, b)) for meta, b in zip(problem.tensors, buffers)])


def new_output(meta: TensorMeta) -> np.ndarray:
    """A C-ordered NumPy output for ``meta``, as an allocating call makes it."""
    return np.empty(meta.shape, numpy_dtype(meta.dtype))
