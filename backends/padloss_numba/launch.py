"""Launching Numba kernels safely from any number of Python threads.

Numba's parallel regions are thread-safe under the ``omp`` and ``tbb``
threading layers but not under ``workqueue`` (concurrent launches abort the
process). The first launch runs under a lock and reads the layer (Numba picks
it when its threads start, which the backend does when it loads); from then
on launches are serialised only when the layer is ``workqueue``. Tiny problems
run a serial twin of each kernel: a parallel region costs about 2 us to start.
"""
from __future__ import annotations

import functools
import threading

import numba

# Below this many output elements a serial kernel beats starting threads.
PARALLEL_MIN_ELEMENTS = 1 << 15

_lock = threading.Lock()
_serialize: bool | None = None   # None until the first parallel launch


def caller(kernel, parallel: bool):
    """``kernel`` as a plan calls it, chosen once: through :func:`launch_parallel` where it
    runs threads (a ``functools.partial``, which calls with no Python frame of its own), else
    itself. A plan's ``run`` calls it on the kernel's arguments, and its ``launcher``
    (padloss.backend.Plan) is ``functools.partial(call, *args)``, which CPython flattens into
    one partial."""
    return functools.partial(launch_parallel, kernel) if parallel else kernel


def launch_parallel(kernel, *args) -> None:
    global _serialize
    if _serialize is False:
        kernel(*args)
        return
    with _lock:
        kernel(*args)
        _serialize = numba.threading_layer() == "workqueue"

