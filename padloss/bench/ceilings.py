"""The ceilings a workload is held against: streaming the op's read/write mix and nothing else.

No one implementation is the fastest on every CPU (docs/performance.md, "Ceilings"), so
several stream the same mix in the same rounds and the best is taken per round
(:data:`CEILING`): NumPy's own where one NumPy call makes that single pass (a copy, a
sum of two), and each available backend's yardsticks (``Backend.yardsticks``), which
use that backend's own stores. A yardstick named ``nt`` streams its output past the
caches, as the ops stream large outputs: :data:`CEILING_NT`.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from .. import dispatch
from .timing import Result

CEILING = "ceiling"          # per round, the best of the normal-store ceilings' times
CEILING_NT = "ceiling nt"    # the same mix with its output streamed past the caches
CEILING_PART = "ceiling: "   # + a normal-store ceiling's name: the parts CEILING is the best of
STREAMED = "nt"              # the yardstick that streams its stores


def _numpy(inputs: tuple, out: np.ndarray) -> dict[str, Callable[[], object]]:
    if len(inputs) == 1:
        return {"numpy": lambda: np.copyto(out, inputs[0])}
    if len(inputs) == 2:
        return {"numpy": lambda: np.add(inputs[0], inputs[1], out=out)}
    return {}


def _yardsticks(inputs: tuple, out: np.ndarray) -> dict[str, Callable[[], object]]:
    """Every available backend's yardsticks of the mix (each compiled and called once)."""
    found = {}
    for backend in dispatch.registry.by_priority():
        if backend.availability()[0]:
            found.update(backend.yardsticks(inputs, out))
    return found


def ceilings_over(inputs: tuple, out: np.ndarray) -> dict[str, Callable[[], object]]:
    """Zero-argument callables streaming ``inputs`` (1-D C-contiguous float32 arrays as
    long as ``out``) into ``out``, by name (``STREAMED`` for the one streaming its stores)."""
    return {**_yardsticks(inputs, out), **_numpy(inputs, out)}


def prepare(n_inputs: int) -> None:
    """Compile (or load) the yardsticks of an ``n_inputs``-read mix, on a few elements."""
    _yardsticks(tuple(np.zeros(64, np.float32) for _ in range(n_inputs)), np.zeros(64, np.float32))


def best_ceiling(results: dict[str, Result]) -> Result:
    """:data:`CEILING`: per round, the fastest normal-store ceiling in ``results``
    (each round's best, as the machine's bandwidth moves between rounds)."""
    parts = [r for name, r in results.items() if name.startswith(CEILING_PART)]
    return Result(CEILING, parts[0].nbytes, [min(times) for times in zip(*(p.seconds for p in parts))],
                  parts[0].group)
