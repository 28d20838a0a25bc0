"""The Numba CPU backend: which Problems it takes and how it builds their plans.

Each op contributes a ``compile_<op>(problem, threads)`` function; this module
only routes to them. Plans hold compiled kernels and geometry, never arrays.
"""
from __future__ import annotations

import functools
import importlib.util
import logging
import sys
import time

import numba
from numba.core import event

from padloss import rules
from padloss.backend import Backend
from padloss.problem import Problem

from .disk_cache import ENABLED as CACHE
from .disk_cache import cache_dir
from .l1_plan import compile_l1_loss_backward
from .pad_plan import compile_circular_pad2d_backward

log = logging.getLogger("padloss")
# A plan whose kernels compiled (not loaded from disk) for this long says so once.
SLOW_PLAN_S = 1.0


def _start_threads() -> None:
    """Start Numba's thread pool, keeping torch's thread count: starting the omp
    layer sets OpenMP's count, which a loaded torch shares (torch.set_num_threads(1)
    read back 2 after padloss's first call, on 2 cores)."""
    torch = sys.modules.get("torch")
    torch_threads = torch.get_num_threads() if torch is not None else None
    numba.get_num_threads()
    if torch_threads is not None and torch.get_num_threads() != torch_threads:
        torch.set_num_threads(torch_threads)


def _thread_count_reader():
    """numba.get_num_threads() takes two locks a call (0.75 us, 17% of a tiny
    call, which reads it once); after it has started the threads once, Numba's
    private lock-free reader gives the same (per-thread) value in 0.14 us. No
    fallback: if Numba drops the name, importing this backend fails, and
    test_engine's test of the reader names it."""
    _start_threads()
    return numba.np.ufunc.parallel._get_num_threads


thread_count = _thread_count_reader()

COMPILERS = {
    "circular_pad2d_backward": compile_circular_pad2d_backward,
    "l1_loss_backward": compile_l1_loss_backward,
}
DTYPES = frozenset(rules.FLOATS)
# Integer and bool inputs (l1_loss_backward converts them to the promoted float in the kernel).
INPUT_ONLY_DTYPES = frozenset(rules.INTEGERS)


class NumbaBackend(Backend):
    name = "numba"
    priority = 100
    devices = frozenset({"cpu"})

    @functools.cache  # noqa: B019  (one instance, alive as long as the process)
    def availability(self) -> tuple[bool, str]:
        if importlib.util.find_spec("numba") is None:
            return False, "numba is not installed"
        return True, ""

    def supports(self, problem: Problem) -> str | None:
        if problem.device_type != "cpu":
            return f"computes on the CPU only, the data is on {problem.device}"
        if problem.op not in COMPILERS:
            return f"does not implement {problem.op}"
        for meta in problem.tensors[:-1]:
            if meta.dtype not in DTYPES and meta.dtype not in INPUT_ONLY_DTYPES:
                return f"cannot read dtype {meta.dtype}"
        if problem.output.dtype not in DTYPES:
            return f"cannot write dtype {problem.output.dtype}"
        return None

    def cache_context(self) -> tuple:
        return (thread_count(),)

    def compile(self, problem: Problem):
        start = time.perf_counter()
        # Numba's "numba:compile" event fires for a compile only, never for a disk-cache load:
        # on a busy machine a load alone can take past SLOW_PLAN_S
        with event.install_recorder("numba:compile") as compiles:
            plan = COMPILERS[problem.op](problem, thread_count())
        seconds = time.perf_counter() - start
        if compiles.buffer and seconds >= SLOW_PLAN_S:   # say once why the first call was slow
            kept = (f"cached in {cache_dir()} for later processes" if CACHE
                    else "kept in memory only (PADLOSS_NUMBA_CACHE=0)")
            log.warning("padloss: compiled the %s kernels for %s in %.1f s, once: %s; "
                        "`padloss warmup` compiles all of them ahead", problem.op,
                        "/".join(sorted({m.dtype for m in problem.tensors})), seconds, kept)
        return plan
