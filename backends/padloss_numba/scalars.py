"""The lesser and the greater of two integers, for kernels.

Numba's own ``min`` and ``max`` are overloads, each compiled as a function of its own
for its argument types on a kernel's first compile (18-25 ms apiece); these are
inlined into the kernel's IR, so nothing is compiled for them.
"""
from numba import njit


@njit(inline="always")
def lesser(a, b):
    return a if a < b else b


@njit(inline="always")
def greater(a, b):
    return a if a > b else b
