"""The Numba CPU backend: which Problems it takes and how it builds their plans.

Each op's plan class (``plans``) is built from the Problem and the thread count;
plans hold compiled kernels and geometry, never arrays.
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

from . import disk_cache, numba_internals

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


_start_threads()
thread_count = numba_internals.thread_count_reader()
"""The calling thread's Numba thread count: numba.get_num_threads() takes two locks a
call (docs/performance.md, "Thread count"), this lock-free reader none."""

DTYPES = frozenset(rules.FLOATS)
# Integer and bool inputs (l1_loss_backward converts them to the promoted float in the kernel).
INPUT_ONLY_DTYPES = frozenset(rules.INTEGERS)


class NumbaBackend(Backend):
    name, priority, devices = "numba", 100, frozenset({"cpu"})
    availability_fixed = True   # numba imported with this module: installed for good
    plans = {"circular_pad2d_backward": "padloss_numba.pad_plan:CircularPadPlan",
             "l1_loss_backward": "padloss_numba.l1_plan:L1LossBackwardPlan",
             ("circular_pad2d_backward", "arch35-simt"): "padloss_numba.pad_arch35:Arch35PadPlan",
             ("l1_loss_backward", "op-api"): "padloss_numba.l1_plan:op_api_plan"}

    @functools.cache  # noqa: B019  (one instance, alive as long as the process)
    def availability(self) -> tuple[bool, str]:
        if importlib.util.find_spec("numba") is None:
            return False, "numba is not installed"
        return True, ""

    def refuses(self, problem: Problem) -> str | None:
        if problem.device_type != "cpu":
            return f"computes on the CPU only, the data is on {problem.device}"
        for meta in problem.tensors[:-1]:
            if meta.dtype not in DTYPES and meta.dtype not in INPUT_ONLY_DTYPES:
                return f"cannot read dtype {meta.dtype}"
        if problem.output.dtype not in DTYPES:
            return f"cannot write dtype {problem.output.dtype}"
        return None

    cache_context = staticmethod(thread_count)   # the thread count, as a threaded kernel returns it

    def describe(self) -> list[str]:
        from . import describe

        return describe.lines()

    def compiled_for(self, calls) -> bool:
        from . import describe

        return describe.compiled_for(calls)

    def yardsticks(self, inputs: tuple, out) -> dict:
        from . import stream

        return stream.ceilings_over(inputs, out)

    def cache_admin(self):
        """The module behind ``padloss cache`` (info, verify, clear)."""
        from . import cache_admin

        return cache_admin

    def compile(self, problem: Problem):
        start = time.perf_counter()
        # Numba's "numba:compile" event fires for a compile only, never for a disk-cache load:
        # on a busy machine a load alone can take past SLOW_PLAN_S
        with event.install_recorder("numba:compile") as compiles:
            plan = self.plan_builder(problem.op, problem.numerics)(problem, thread_count())
        seconds = time.perf_counter() - start
        if compiles.buffer and seconds >= SLOW_PLAN_S:   # say once why the first call was slow
            kept = (f"cached in {disk_cache.cache_dir()} for later processes" if disk_cache.ENABLED
                    else "kept in memory only (PADLOSS_NUMBA_CACHE=0)")
            log.warning("padloss: compiled the %s kernels for %s in %.1f s, once: %s; "
                        "`padloss warmup` compiles all of them ahead", problem.op,
                        "/".join(sorted({m.dtype for m in problem.tensors})), seconds, kept)
        return plan
