"""The Numba CPU backend: which Problems it takes and how it builds their plans.

Each op contributes a ``compile_<op>(problem, threads)`` function; this module
only routes to them. Plans hold compiled kernels and geometry, never arrays.
"""
from __future__ import annotations

import importlib.util

import numba

from padloss.backend import Backend
from padloss.problem import Problem

from .pad_plan import compile_circular_pad2d_backward

COMPILERS = {
    "circular_pad2d_backward": compile_circular_pad2d_backward,
}
DTYPES = frozenset({"float16", "bfloat16", "float32", "float64"})


class NumbaBackend(Backend):
    name = "numba"
    priority = 100
    devices = frozenset({"cpu"})

    def availability(self) -> tuple[bool, str]:
        if importlib.util.find_spec("numba") is None:
            return False, "numba is not installed"
        return True, ""

    def supports(self, problem: Problem) -> str | None:
        if problem.device_type != "cpu":
            return f"computes on the CPU only, the data is on {problem.device}"
        if problem.op not in COMPILERS:
            return f"does not implement {problem.op}"
        return None

    def cache_context(self) -> tuple:
        return (numba.get_num_threads(),)

    def compile(self, problem: Problem):
        return COMPILERS[problem.op](problem, numba.get_num_threads())
