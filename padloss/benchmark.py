"""Measuring memory-bound kernels honestly on a shared, noisy machine.

Bandwidth on small machines shifts between levels every few seconds, so a
kernel and its ceiling must be timed in the same rounds: each round times
every candidate once (median of a few calls), and ratios are taken per round,
then their median is quoted. Effective bandwidth counts bytes read + written
by the op (each input once, the output once), divided by time.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable, NamedTuple


class Result(NamedTuple):
    """Per-round seconds of one candidate (median over the calls of each round)."""

    name: str
    nbytes: int
    seconds: list[float]

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


def interleaved(candidates: dict[str, tuple[Callable[[], object], int]], rounds: int = 7,
                calls: int = 5, warmup: int = 2) -> dict[str, Result]:
    """Time every candidate (name -> (fn, bytes moved)) once per round, in turn."""
    for fn, _ in candidates.values():
        for _ in range(warmup):
            fn()
    seconds: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(rounds):
        for name, (fn, _) in candidates.items():
            seconds[name].append(time_round(fn, calls))
    return {name: Result(name, nbytes, seconds[name]) for name, (_, nbytes) in candidates.items()}


def ratio(a: Result, b: Result) -> float:
    """Median over rounds of (a's bandwidth / b's bandwidth), i.e. how close a gets to b."""
    return statistics.median((a.nbytes / ta) / (b.nbytes / tb) for ta, tb in zip(a.seconds, b.seconds))


def speedup(a: Result, b: Result) -> float:
    """Median over rounds of (b's time / a's time): how many times faster a is."""
    return statistics.median(tb / ta for ta, tb in zip(a.seconds, b.seconds))
