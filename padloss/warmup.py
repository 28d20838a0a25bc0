"""Compile (or load from the disk cache) the kernels that common calls need.

The first call of each kernel variant pays its compilation (about 2-3 s cold)
or a load from the on-disk cache (well under a second, most of it Numba's own
start-up). ``padloss.warmup()`` pays that up front, for each op and dtype, in
the serial variant (small tensors; the pad's rows there too narrow for its vector
windows, which its body for them leaves out), the parallel one (large tensors), and
the one for outputs far larger than the caches, which both ops stream past them (L1
through a body of its own, the pad through its streamed rows). It
plans each call (phase 1, which compiles) on unfilled buffers and runs none:
nothing of the large ones is touched.
"""
from __future__ import annotations

import logging
import time
from typing import Iterable

from .arrays import numpy_dtype

# Sides of square tensors that select the serial, the parallel and the streaming kernel
# variants (a 4096 x 4096 output is 32 MiB even in float16; the Numba backend streams from 16).
_SIDES = (4, 256, 4096)


def warmup(ops: Iterable[str] | None = None, dtypes: Iterable[str] | None = None, *,
           backend: str | None = None) -> float:
    """Prepare the kernels for ``ops`` x ``dtypes`` (default: every op of padloss.catalogue,
    its WARM_DTYPES); returns the seconds it took. Quiet: the backend's note on a slow
    first call (logger "padloss") is for calls that did not ask for the compile."""
    from .catalogue import OPS, WARM_DTYPES  # here: ``import padloss`` need not load the catalogue

    t0 = time.perf_counter()
    ops = OPS if ops is None else ops
    dtypes = WARM_DTYPES if dtypes is None else dtypes
    log = logging.getLogger("padloss")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        for op in ops:
            for name in dtypes:
                for side in _SIDES:
                    OPS[op].warm(numpy_dtype(name), side, backend)
    finally:
        log.setLevel(level)
    return time.perf_counter() - t0
