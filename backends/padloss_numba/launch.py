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

from .numba_internals import compiled_wrapper

# Below this many output elements a serial kernel beats starting threads.
PARALLEL_MIN_ELEMENTS = 1 << 15

_lock = threading.Lock()
_serialize: bool | None = None   # None until the first parallel launch


def caller(kernel, parallel: bool, dispatched: bool = False):
    """``kernel`` as a plan calls it, chosen once: the compiled wrapper of an entry point of
    one signature (indirect.compile_entry), without Numba's dispatch
    (``numba_internals.compiled_wrapper``: a plan's binder makes its arguments, of that
    signature's types, from validated buffers); a kernel that compiles on call for the
    arrays it meets (``dispatched``) through its dispatcher. Through :func:`launch_parallel`
    where it runs threads (a ``functools.partial``, which calls with no Python frame of its
    own). A plan's ``run`` calls it on the kernel's arguments, and its ``launcher``
    (padloss.backend.Plan) is ``functools.partial(call, *args)``, which CPython flattens into
    one partial."""
    call = kernel if dispatched else compiled_wrapper(kernel)
    return functools.partial(launch_parallel, call) if parallel else call


def launch_parallel(kernel, *args) -> None:
    global _serialize
    if _serialize is False:
        kernel(*args)
        return
    with _lock:
        kernel(*args)
        _serialize = numba.threading_layer() == "workqueue"

