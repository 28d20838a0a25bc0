"""Skipping re-validation of calls whose metadata was validated before.

Validation is a pure function of metadata (dtypes, shapes, strides and the op's
parameters), so a call with plain NumPy arguments whose signature matches an
earlier, valid one gets the same verdict: the Problem that full validation
built. What depends on the buffers themselves (the output's writability, and
overlap between output and inputs) is still checked on every call. This keeps
a tiny call at a few microseconds; anything unusual (torch tensors, lists,
a first-time signature) takes the full path.
"""
from __future__ import annotations

from typing import Any, Hashable

import numpy as np

from .arrays import Tensor
from .errors import invalid_argument
from .executor import check_output_overlap
from .problem import Problem

MAX_SIGNATURES = 1024
_make_tensor = Tensor._make


class ValidatedCalls:
    """Signature -> Problem for one op; cleared when full (a cheap, safe bound)."""

    def __init__(self, op: str):
        self.op = op
        self._problems: dict[Hashable, Problem] = {}

    @staticmethod
    def signature(arrays: tuple, params: Any) -> tuple | None:
        """The memo key, or None (never remembered) when an argument is not a plain
        ndarray or the op's parameters are not known exactly (``params`` None)."""
        if params is None:
            return None
        key: list = [params]
        for a in arrays:
            if type(a) is not np.ndarray:
                return None
            key += (a.dtype, a.shape, a.strides)
        return tuple(key)

    def remember(self, key: tuple | None, problem: Problem) -> None:
        if key is None:
            return
        if len(self._problems) >= MAX_SIGNATURES:
            self._problems.clear()
        self._problems[key] = problem

    def tensors(self, key: tuple | None, buffers: tuple, names: tuple[str, ...]
                ) -> tuple[Problem, tuple[Tensor, ...]] | None:
        """(Problem, adapted buffers) for a known signature, after the per-buffer
        checks; None for an unknown one."""
        problem = self._problems.get(key) if key is not None else None
        if problem is None:
            return None
        out = buffers[-1]
        if not out.flags.writeable:
            raise invalid_argument(self.op, names[-1], "is read-only; the output must be writable")
        tensors = self._adapt(problem, buffers)
        if any([np.may_share_memory(out, b) for b in buffers[:-1]]):
            check_output_overlap(self.op, names, tensors)   # names the input, and raises
        return problem, tensors

    @staticmethod
    def _adapt(problem: Problem, buffers: tuple) -> tuple[Tensor, ...]:
        return tuple([_make_tensor((meta, "cpu", b, b)) for meta, b in zip(problem.tensors, buffers)])
