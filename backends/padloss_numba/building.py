"""How padloss's kernels are made: :func:`jit`, Numba's njit with padloss's cache and
a name of each variant's own, :func:`with_globals`, which builds a kernel body
around helpers chosen for it in Python, and :func:`collector_paused`, the state its
compiles run in."""
from __future__ import annotations

import contextlib
import gc
import hashlib
from types import FunctionType

import numba

from . import disk_cache


def _named_for_its_variant(py_func):
    """``py_func`` with its closure's constants (the variant: dtypes, flags) in its
    qualified name. Numba names a function's machine code after its qualified name, the
    signature and a per-process counter, so two variants of one kernel body compiled in
    two processes can get the same symbol; a process that loads both from the cache
    then finds one address for both (indirect.address), and ran L1's "none" body for a
    "mean" call. The name also gives each variant its own cache index."""
    cells = tuple(cell.cell_contents for cell in py_func.__closure__ or ())
    if cells:
        digest = hashlib.sha256(repr(cells).encode()).hexdigest()[:16]
        py_func.__qualname__ = f"{py_func.__qualname__}.variant_{digest}"
    return py_func


def jit(**options):
    """``numba.njit`` for a padloss kernel: named for its variant, cached on disk unless
    the ``numba_cache`` setting is off, its cache guarded and its entries locked
    (padloss_numba.disk_cache).

    Only a threaded kernel (``parallel=True``) releases the GIL while it runs. A serial
    entry runs a small problem (below launch.PARALLEL_MIN_ELEMENTS, microseconds): the
    release and retake would be a tenth of a tiny call, and with another Python thread
    busy the call's return would wait for that thread to hand the GIL back
    (docs/performance.md, "Serial entries keep the GIL"). Bodies and the pieces they call
    are called from compiled code only, where the GIL plays no part."""
    def decorate(py_func):
        named = _named_for_its_variant(py_func)
        dispatcher = numba.njit(cache=disk_cache.ENABLED, nogil=options.get("parallel", False),
                                **options)(named)
        if disk_cache.ENABLED:
            disk_cache.adopt(dispatcher)
        return dispatcher
    return decorate


def with_globals(function, **names):
    """``function`` with ``names`` added to its globals: how a kernel body refers to a
    helper chosen for it in Python. Numba inlines a helper it finds as a global or a
    closure constant, and keys its disk cache on the code and the closure's constants
    (the choice follows from those); a jitted function held in the closure would change
    that key in every process."""
    built = FunctionType(function.__code__, {**function.__globals__, **names}, function.__name__,
                         function.__defaults__, function.__closure__)
    built.__qualname__ = function.__qualname__   # Python 3.10 would take the bare name
    return built


@contextlib.contextmanager
def collector_paused():
    """Python's cyclic garbage collector off inside the block, where padloss compiles a
    kernel, then as it was. A body's compile makes Numba IR by the hundred thousand
    objects, which set off collections, the full ones walking every object the process
    holds (a training process's, torch's included), and frees most of it only at the end:
    what the collector would find waits a few seconds (docs/performance.md, "The
    collector paused while a kernel compiles"). Left off where the caller turned it off."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
