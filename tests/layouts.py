"""Test helper: the same values laid out in memory in different ways.

Kernels must give the same bits whatever the strides, so property tests draw
a layout for every input and output: C-contiguous, Fortran order, a strided
slice of a larger buffer, reversed axes (negative strides), a permuted
buffer viewed back into the logical order, channels-last ((..., C, H, W)
stored as (..., H, W, C), torch's channels_last), or C order at an address
that is not a multiple of the item size (NumPy allows it; kernels must too).
"""
from __future__ import annotations

import numpy as np

LAYOUTS = ("contiguous", "fortran", "sliced", "reversed", "permuted", "channels_last", "unaligned")


def with_layout(values: np.ndarray, layout: str) -> np.ndarray:
    """An array equal to ``values`` (same dtype and shape) stored in ``layout``."""
    if layout == "contiguous":
        out = np.empty(values.shape, values.dtype)
    elif layout == "fortran":
        out = np.empty(values.shape, values.dtype, order="F")
    elif layout == "sliced":
        big = np.empty(tuple(2 * d + 1 for d in values.shape), values.dtype)
        out = big[tuple(slice(1, None, 2) for _ in values.shape)]
    elif layout == "reversed":
        out = np.empty(values.shape, values.dtype)[tuple(slice(None, None, -1) for _ in values.shape)]
    elif layout == "permuted":
        order = tuple(reversed(range(values.ndim)))
        out = np.empty(tuple(values.shape[i] for i in order), values.dtype).transpose(order)
    elif layout == "channels_last":   # C order below rank 3
        n = values.ndim
        order = tuple(range(n - 3)) + (n - 2, n - 1, n - 3) if n >= 3 else tuple(range(n))
        out = np.empty(tuple(values.shape[i] for i in order), values.dtype).transpose(np.argsort(order))
    elif layout == "unaligned":
        raw = np.empty(values.nbytes + 1, np.uint8)[1:]
        out = raw.view(values.dtype).reshape(values.shape)
    else:
        raise ValueError(layout)
    out[...] = values
    return out


def output_at(shape: tuple[int, ...], dtype, skip: int, boundary: int = 64) -> np.ndarray:
    """An uninitialised C-order array whose first element lies ``skip`` bytes past a
    ``boundary`` (by default a 64-byte cache line: an odd ``skip`` misaligns 2- and
    4-byte elements, for kernels that stream whole aligned lines; a 4 KiB page for
    kernels that mind where arrays lie relative to one another modulo a page)."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    raw = np.empty(nbytes + boundary + skip, np.uint8)   # room for any alignment, and the skip
    start = -raw.ctypes.data % boundary + skip
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def bits(a: np.ndarray) -> np.ndarray:
    """The bit patterns of ``a``, for exact comparison: signed zeros, infinities and
    every rounding compare exactly. NaNs all become one pattern: their sign and
    payload are not part of the contract (IEEE leaves them to the hardware, and
    LLVM may swap the operands of an add, which picks which NaN survives)."""
    a = np.ascontiguousarray(a)
    raw = a.view(f"u{a.itemsize}").copy()
    if a.dtype.kind == "f" or a.dtype.name == "bfloat16":
        raw[np.isnan(a)] = np.iinfo(raw.dtype).max
    return raw


class Guarded:
    """C-ordered arrays placed against an inaccessible page (Linux): one whose last byte
    is the last before the page, and one whose first byte is the first after it. A kernel
    that reads past the array there stops the process with a segmentation fault, where
    elsewhere the stray read would go unseen (its lanes are thrown away). Keep the object
    alive while the arrays are in use."""

    def __init__(self, values: np.ndarray):
        import ctypes
        import mmap

        page = mmap.PAGESIZE
        span = -(-values.nbytes // page) * page
        self._map = mmap.mmap(-1, 2 * span + page)           # [span | guard page | span]
        base = ctypes.addressof(ctypes.c_char.from_buffer(self._map))
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.mprotect(ctypes.c_void_p(base + span), page, 0) != 0:   # PROT_NONE
            raise OSError(ctypes.get_errno(), "mprotect failed")
        raw = np.frombuffer(self._map, np.uint8)
        self.ending = raw[span - values.nbytes:span].view(values.dtype).reshape(values.shape)
        self.starting = raw[span + page:span + page + values.nbytes].view(values.dtype).reshape(values.shape)
        self.ending[...] = values
        self.starting[...] = values
