"""Launching Numba kernels safely from any number of Python threads.

Numba's parallel regions are thread-safe under the ``omp`` and ``tbb``
threading layers but not under ``workqueue`` (concurrent launches abort the
process). The layer is fixed once Numba's threads start, which the backend makes
them do as it loads, before any plan exists: a plan under ``workqueue`` launches its
threaded kernel under a lock; under the others it calls the kernel directly.
Tiny problems run a serial twin of each kernel: a parallel region costs about 2 us
to start.
"""
from __future__ import annotations

import functools
import threading

import numba

from .numba_internals import compiled_wrapper

# Below this many output elements a serial kernel beats starting threads.
PARALLEL_MIN_ELEMENTS = 1 << 15

_lock = threading.Lock()


def caller(kernel, parallel: bool, dispatched: bool = False):
    """``kernel`` as a plan calls it, chosen once: the compiled wrapper of an entry point of
    one signature (indirect.compile_entry), without Numba's dispatch
    (``numba_internals.compiled_wrapper``: a plan's binder makes its arguments, of that
    signature's types, from validated buffers); a kernel that compiles on call for the
    arrays it meets (``dispatched``) through its dispatcher. A threaded kernel under the
    ``workqueue`` layer goes through :func:`launch_locked` (a ``functools.partial``, which
    calls with no Python frame of its own). A plan's ``run`` calls it on the kernel's
    arguments, and its ``launcher`` (padloss.backend.Plan) is ``functools.partial(call,
    *args)``, which CPython flattens into one partial."""
    call = kernel if dispatched else compiled_wrapper(kernel)
    if parallel and numba.threading_layer() == "workqueue":   # raises if the threads never started
        return functools.partial(launch_locked, call)
    return call


def launch_locked(kernel, *args):
    """``kernel(*args)`` with no other threaded kernel running (the ``workqueue`` layer)."""
    with _lock:
        return kernel(*args)
