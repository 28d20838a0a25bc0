"""``padloss bench --cold``: how long padloss takes to start on an empty compile cache.

Each figure is the wall time of fresh processes given a compile-cache folder of
their own, empty (``PADLOSS_CACHE_DIR``): each op's first call (tiny, every bench
dtype: ``import padloss`` to the result), ``padloss check`` and the main job
``padloss``. A compile's time is the machine's more than padloss's, so each is
also given in reference units: the seconds this machine takes to compile
:data:`REFERENCE` (a small parallel Numba loop; its cache off), the median of three
fresh processes, measured in the same run.
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time

from ..catalogue import BENCH_DTYPES

REFERENCE = """
import time, numba, numpy as np
t0 = time.perf_counter()
@numba.njit(parallel=True, cache=False)
def reference(a, b):
    total = 0.0
    for i in numba.prange(a.size):
        d = a[i] - b[i]
        total += abs(d) if d == d else 0.0
    return total
reference(np.ones(64, np.float32), np.zeros(64, np.float32))
print(time.perf_counter() - t0)
"""

FIRST_CALLS = {
    "circular_pad2d_backward": "padloss.circular_pad2d_backward(np.ones((2, 3, 14, 14), D), "
                               "np.empty((2, 3, 8, 8), D), (3, 3, 3, 3))",
    "l1_loss_backward": "padloss.l1_loss_backward(np.ones((), D), np.ones((2, 3, 8, 8), D), "
                        "np.zeros((2, 3, 8, 8), D), 'mean')",
}
FIRST_CALL = """
import time, numpy as np
from padloss.arrays import numpy_dtype
D = numpy_dtype({dtype!r})
t0 = time.perf_counter()
import padloss
{call}
print(time.perf_counter() - t0)
"""
COMMANDS = {"padloss check": ["check"], "padloss (the main job)": []}


def reference_unit_s(runs: int = 3) -> float:
    """Seconds to compile :data:`REFERENCE` here: the median of ``runs`` fresh processes."""
    return statistics.median(float(_run([sys.executable, "-c", REFERENCE], None)) for _ in range(runs))


def _run(argv: list[str], cache_dir: str | None) -> str:
    env = dict(os.environ)
    if cache_dir is not None:
        env["PADLOSS_CACHE_DIR"] = cache_dir
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    if done.returncode:
        raise RuntimeError(f"{' '.join(argv[:3])} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return done.stdout


def _cold(argv: list[str]) -> float:
    """Wall seconds of ``argv`` on an empty compile cache of its own."""
    with tempfile.TemporaryDirectory(prefix="padloss-cold-") as folder:
        t0 = time.perf_counter()
        _run(argv, folder)
        return time.perf_counter() - t0


def _first_call_s(op: str, dtype: str) -> float:
    with tempfile.TemporaryDirectory(prefix="padloss-cold-") as folder:
        script = FIRST_CALL.format(dtype=dtype, call=FIRST_CALLS[op])
        return float(_run([sys.executable, "-c", script], folder).split()[-1])


def measure() -> list[tuple[str, float]]:
    """(what, seconds) for each cold figure, the reference unit first."""
    rows = [("reference unit (compile of a small parallel Numba loop)", reference_unit_s())]
    for op in FIRST_CALLS:
        for dtype in BENCH_DTYPES:
            rows.append((f"first call {op} {dtype}", _first_call_s(op, dtype)))
    for name, args in COMMANDS.items():
        rows.append((name, _cold([sys.executable, "-m", "padloss", *args])))
    return rows


def report(rows: list[tuple[str, float]]) -> str:
    unit = rows[0][1]
    width = max(len(name) for name, _ in rows)
    lines = ["cold start, each on an empty compile cache of its own (fresh processes):",
             f"  {'':{width}}  {'seconds':>8}  {'units':>6}"]
    lines += [f"  {name:{width}}  {s:8.2f}  {s / unit:6.1f}" for name, s in rows]
    return "\n".join(lines)


def main() -> int:
    print(report(measure()))
    return 0
