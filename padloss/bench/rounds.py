"""What one bench run times, in which order, and how its candidates share rounds; used
by the parent process and by each peer's child alike."""
from __future__ import annotations

import argparse
from typing import Callable

from ..catalogue import BENCHED
from ..errors import PadlossError
from . import timing
from .workloads import AUTOGRAD_PADLOSS, Workload


def workloads(args: argparse.Namespace) -> list[tuple[str, str, str]]:
    """(op's short name, size, dtype) of every workload the bench times, in order."""
    return [(op, size, dtype) for size in args.sizes for dtype in args.dtypes for op in BENCHED]


def time_candidates(w: Workload, found: dict, refused: dict[str, str], args: argparse.Namespace,
                    not_measured: dict[str, str], group: str, compiles: bool = True
                    ) -> dict[str, timing.Result]:
    """Interleaved rounds of ``found``; ``compiles=False`` for callables that compile
    nothing on a first call (the peers': torch's, and JAX's already compiled), which then
    make no untimed calls."""
    not_measured.update({f"{name}, {w.label}": why for name, why in refused.items()})
    if not compiles:
        return timing.sized_rounds(found, args.rounds, args.round_s, group=group)
    calls = {name: timing.calls_per_round(fn, args.round_s) for name, (fn, _) in found.items()}
    return timing.interleaved(found, rounds=args.rounds, calls=calls, warmup=0, group=group)


def peer_sizes(args: argparse.Namespace) -> list[str]:
    """The sizes the peer frameworks are timed at: every size asked for; with --quick all but
    large (torch's autograd takes most of a second a call on the large pad, and the peers' large
    rows were most of the quick run: docs/performance.md; `padloss bench` times them)."""
    return [s for s in args.sizes if s != "large" or not args.quick]


def autograd_sizes(args: argparse.Namespace) -> list[str]:
    """The sizes of the through-autograd rows: every size asked for; tiny alone with --quick
    (torch's autograd takes seconds a call on the large pad)."""
    return [s for s in args.sizes if s == "tiny" or not args.quick]


def autograd_rows(op: str, size: str | None, shape: tuple[int, ...], dtype: str,
                  runs: dict[str, Callable[[], object]], args: argparse.Namespace) -> list[dict]:
    """Time the candidates (padloss's first, torch's last) in interleaved rounds;
    x torch is over the last one."""
    calls = {name: timing.calls_per_round(fn, args.round_s) for name, fn in runs.items()}
    timed = timing.interleaved({name: (fn, 0) for name, fn in runs.items()}, args.rounds, calls, warmup=0)
    peer = timed[list(timed)[-1]]
    return [dict(op=op, size=size, shape=list(shape), dtype=dtype, impl=name, median_s=r.median_s,
                 speedup_vs_torch=timing.speedup(r, peer), seconds=r.seconds) for name, r in timed.items()]


def autograd_backward_rows(w: Workload, size: str, dtype: str, args: argparse.Namespace,
                           not_measured: dict[str, str]) -> list[dict]:
    """``w``'s backward through padloss.torch and through torch's own autograd, timed."""
    from .peers import autograd_backward

    try:
        runs = autograd_backward(w)
    except PadlossError as exc:
        not_measured[f"{AUTOGRAD_PADLOSS}, {w.label}, {size}, {dtype}"] = str(exc)
        return []
    return autograd_rows(w.label, size, w.out.shape, dtype, runs, args)
