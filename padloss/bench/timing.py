"""Timing memory-bound kernels honestly on a shared, noisy machine.

Bandwidth on small machines shifts between levels every few seconds, so a
kernel and its ceiling must be timed in the same rounds: each round times
every candidate once (median of a few calls), and ratios are taken per round,
then their median is quoted. Effective bandwidth counts bytes read + written
by the op (each input once, the output once), divided by time.
"""
from __future__ import annotations

import os
import random
import statistics
import time
from typing import Callable, Mapping, NamedTuple


class Result(NamedTuple):
    """Per-round seconds of one candidate (median over the calls of each round),
    and which set of interleaved rounds (``group``: one per process) they are from."""

    name: str
    nbytes: int
    seconds: list[float]
    group: str = ""

    @property
    def median_s(self) -> float:
        return statistics.median(self.seconds)

    @property
    def gbps(self) -> float:
        return self.nbytes / self.median_s / 1e9


def time_round(fn: Callable[[], object], calls: int) -> float:
    """Median wall time of ``calls`` back-to-back calls."""
    samples = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def calls_per_round(fn: Callable[[], object], round_s: float, max_calls: int = 20_000,
                    first_s: float | None = None) -> int:
    """How many back-to-back calls of ``fn`` fill about ``round_s`` seconds (at
    least one), from the fastest of a few timed calls (one when a call is
    slow); they double as a warm-up. A first, untimed call may compile: timed,
    it made a microsecond call look slow, so each round held one cold call.
    ``first_s``, the time of a call already made, stands for that call and the
    first timed one, for a callable that never compiles (a peer's: see
    ``sized_rounds``)."""
    if first_s is None:
        fn()
        first_s = time_round(fn, 1)
    fastest = first_s
    if fastest < round_s / 10:
        fastest = min(fastest, *(time_round(fn, 1) for _ in range(5)))
    return max(1, min(max_calls, int(round_s / max(fastest, 1e-7))))


def interleaved(candidates: dict[str, tuple[Callable[[], object], int]], rounds: int = 7,
                calls: int | Mapping[str, int] = 5, warmup: int = 2, group: str = "",
                seed: int = 0) -> dict[str, Result]:
    """Time every candidate (name -> (fn, bytes moved)) once per round, each round
    in a new order (drawn from ``seed``, so a run repeats its orders): a candidate's
    speed depends on what ran just before it (docs/performance.md, "Interleaving order").

    ``calls`` per round is one number for all, or one per name (fast and slow
    candidates then each fill a round of similar length)."""
    for fn, _ in candidates.values():
        for _ in range(warmup):
            fn()
    per_round = calls if isinstance(calls, Mapping) else dict.fromkeys(candidates, calls)
    seconds: dict[str, list[float]] = {name: [] for name in candidates}
    names, orders = list(candidates), random.Random(seed)
    for _ in range(rounds):
        for name in orders.sample(names, len(names)):
            seconds[name].append(time_round(candidates[name][0], per_round[name]))
    return {name: Result(name, nbytes, seconds[name], group) for name, (_, nbytes) in candidates.items()}


def sized_rounds(candidates: dict[str, tuple[Callable[[], object], int]], rounds: int, round_s: float,
                 group: str = "") -> dict[str, Result]:
    """``interleaved`` rounds of callables that never compile (the peers'), with no untimed
    call: a first round of one call each sizes the rounds (``calls_per_round``). Where
    one call fills a round for every candidate, that round is the first of ``rounds``:
    torch's large pad backward, 0.4-0.6 s a call, then runs ``rounds`` calls, not one more."""
    first = interleaved(candidates, rounds=1, calls=1, warmup=0, group=group)
    calls = {name: calls_per_round(fn, round_s, first_s=first[name].seconds[0])
             for name, (fn, _) in candidates.items()}
    if any(n > 1 for n in calls.values()):
        return interleaved(candidates, rounds=rounds, calls=calls, warmup=0, group=group)
    rest = interleaved(candidates, rounds=rounds - 1, calls=1, warmup=0, group=group)
    return {name: r._replace(seconds=r.seconds + rest[name].seconds) for name, r in first.items()}


def _pairs(a: Result, b: Result) -> list[tuple[float, float]]:
    """(a's, b's) seconds round by round when they were timed in the same rounds, else
    their medians, the one pair that compares across processes."""
    return list(zip(a.seconds, b.seconds)) if a.group == b.group else [(a.median_s, b.median_s)]


def ratio(a: Result, b: Result) -> float:
    """Median over rounds of (a's bandwidth / b's bandwidth), i.e. how close a gets to b."""
    return statistics.median((a.nbytes / ta) / (b.nbytes / tb) for ta, tb in _pairs(a, b))


def speedup(a: Result, b: Result) -> float:
    """Median over rounds of (b's time / a's time): how many times faster a is."""
    return statistics.median(tb / ta for ta, tb in _pairs(a, b))


def cpu_seconds() -> tuple[float, float, float] | None:
    """(wall clock, CPU seconds used by all processes, by this one and its
    children), or None where /proc/stat is missing (not Linux). Two samples
    tell how busy other processes kept the machine in between: on 2 cores,
    one busy core makes every parallel call wait for the scheduler."""
    import resource

    try:
        with open("/proc/stat") as f:
            ticks = [int(v) for v in f.readline().split()[1:9]]
    except OSError:
        return None
    own = sum(getattr(resource.getrusage(who), field) for who in
              (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN) for field in ("ru_utime", "ru_stime"))
    busy = sum(ticks) - ticks[3] - ticks[4]   # all but idle and iowait
    return time.perf_counter(), busy / os.sysconf("SC_CLK_TCK"), own


def others_busy_cores(start: tuple | None, end: tuple | None) -> float | None:
    """Cores other processes kept busy, on average, between two cpu_seconds()."""
    if start is None or end is None:
        return None
    wall, everyone, own = (b - a for a, b in zip(start, end))
    return max(0.0, (everyone - own) / wall)
