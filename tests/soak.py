"""Soak and fuzz padloss at scale (not collected by pytest; CI runs a small slice).

    python tests/soak.py soak [--threads 16] [--calls 100000] [--plans 16]
    python tests/soak.py fuzz [--examples 100000]

soak: threads making mixed calls of both ops (every dtype, shapes and pads that need
more plans than the plan cache holds, so it evicts all the while), every result compared
bit for bit with padloss.reference, and the process's resident memory before and after.
fuzz: hypothesis draws malformed arguments (wrong ranks, dtypes, pads, reductions,
outputs, non-arrays); every call must raise PadlossError, TypeError or ValueError, or
give the reference's bits, and a refused call must leave its output untouched.
Each prints one JSON line and exits 1 on any failure.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time

import ml_dtypes
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "backends"))

import padloss  # noqa: E402
from padloss import reference  # noqa: E402
from padloss.geometry import axis_rule_violation  # noqa: E402

DTYPES = (np.float16, ml_dtypes.bfloat16, np.float32, np.float64)


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        kb = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    return kb / 1024


def _valid_pads(rng, size: int) -> tuple[int, int]:
    valid = [(a, b) for a in range(-size, size) for b in range(-size, size)
             if axis_rule_violation(size, a, b) is None]
    return valid[int(rng.integers(len(valid)))]


def soak_cases(count: int, seed: int = 0) -> list:
    """``count`` distinct calls, half of each op: (function, args, out, expected bits)."""
    rng = np.random.default_rng(seed)
    cases = []
    for i in range(count):
        dtype = DTYPES[i % len(DTYPES)]
        if i % 2 == 0:
            h, w = int(rng.integers(2, 9)), int(rng.integers(2, 9))
            (top, bottom), (left, right) = (_valid_pads(rng, n) for n in (h, w))
            shape, pads = (2, 3, h, w), (left, right, top, bottom)
            go = rng.standard_normal((2, 3, h + top + bottom, w + left + right)).astype(dtype)
            expected = reference.circular_pad2d_backward(go, shape, pads)
            cases.append((padloss.circular_pad2d_backward, (go, np.empty(shape, dtype), pads), shape,
                          expected))
        else:
            shape = (int(rng.integers(1, 6)), int(rng.integers(1, 40)))
            x = rng.standard_normal(shape).astype(dtype)
            t = rng.standard_normal(shape[1:]).astype(DTYPES[(i // 2) % len(DTYPES)])
            reduction = ("none", "mean", "sum")[i % 3]
            g = rng.standard_normal(shape if reduction == "none" else ()).astype(dtype)
            expected = reference.l1_loss_backward(g, x, t, reduction)
            cases.append((padloss.l1_loss_backward, (g, x, t, reduction), shape, expected))
    return cases


def soak(threads: int, calls: int, plans: int) -> dict:
    padloss.plan_cache.clear()
    padloss.plan_cache.max_size = plans
    cases = soak_cases(2 * plans)          # twice what the cache holds: it evicts all the time
    for fn, args, _, _ in cases:           # compile every variant before measuring memory
        fn(*args)
    start_rss, start = rss_mb(), time.perf_counter()
    counts = {"calls": 0, "wrong": 0, "errors": 0}
    lock = threading.Lock()
    first_failure: list = []

    def worker(seed: int) -> None:
        chooser = random.Random(seed)
        done = wrong = errors = 0
        for _ in range(calls // threads):
            fn, args, shape, expected = chooser.choice(cases)
            try:
                result = fn(*args) if fn is padloss.l1_loss_backward else \
                    fn(args[0], args[1], args[2], out=np.empty(shape, expected.dtype))
                wrong += not (result.dtype == expected.dtype and result.shape == expected.shape
                              and result.tobytes() == np.ascontiguousarray(expected).tobytes())
            except Exception as exc:  # noqa: BLE001  (counted and reported)
                errors += 1
                first_failure.append(repr(exc))
            done += 1
        with lock:
            counts["calls"] += done
            counts["wrong"] += wrong
            counts["errors"] += errors

    pool = [threading.Thread(target=worker, args=(seed,)) for seed in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    cache = padloss.plan_cache
    return {**counts, "threads": threads, "distinct_calls": len(cases), "plan_cache_max": plans,
            "plan_cache_misses": cache.misses, "seconds": round(time.perf_counter() - start, 1),
            "rss_start_mb": round(start_rss, 1), "rss_growth_mb": round(rss_mb() - start_rss, 1),
            "first_failure": first_failure[:1]}


def _as_weak_scalar(grad_output, self, target):
    """A Python float or int grad_output as l1_loss_backward takes it (docs/l1_loss_backward.md):
    the 0-d of P of self and target (float32 where neither is a float), rounded once; the
    reference takes arrays. Anything else as it is."""
    if type(grad_output) not in (float, int):
        return grad_output
    try:
        dtype = reference.promote(self.dtype, target.dtype)
    except TypeError:   # no float among them
        dtype = np.dtype(np.float32)
    with np.errstate(over="ignore"):   # past the dtype's range: infinity, as a cast gives
        return np.asarray(float(grad_output), dtype)


def fuzz(examples: int) -> dict:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    counts = {"examples": 0, "refused": 0, "computed": 0, "bad": 0}
    bad: list = []
    anything = st.one_of(st.none(), st.integers(-3, 3), st.floats(allow_nan=True), st.text(max_size=3),
                         st.lists(st.integers(-4, 4), max_size=5), st.booleans())
    dtypes = st.sampled_from([np.float16, ml_dtypes.bfloat16, np.float32, np.float64, np.int32, np.int64,
                              np.bool_, np.complex64, np.uint8, object])
    shapes = st.lists(st.integers(0, 5), max_size=9).map(tuple)

    def arrays(draw_shape, draw_dtype):
        return np.zeros(draw_shape, draw_dtype) if draw_dtype is not object else np.empty(draw_shape, object)

    array = st.builds(arrays, shapes, dtypes)
    argument = st.one_of(array, anything)

    @settings(max_examples=examples, deadline=None, database=None, derandomize=False,
              suppress_health_check=list(HealthCheck))
    @given(st.booleans(), argument, argument, argument, st.one_of(anything, st.sampled_from(
        ["none", "mean", "sum", 0, 1, 2, 3, "avg"])), st.one_of(st.none(), array))
    def one(pad, a, b, c, extra, out):
        counts["examples"] += 1
        sentinel = None
        if isinstance(out, np.ndarray) and out.dtype != object and out.size:
            out.fill(7)
            sentinel = out.copy()
        padding = c if extra is None else extra
        try:
            if pad:
                result = padloss.circular_pad2d_backward(a, b, padding, out=out)
            else:
                result = padloss.l1_loss_backward(a, b, c, extra, out=out)
        except (padloss.PadlossError, TypeError, ValueError):
            counts["refused"] += 1
            if sentinel is not None and out.tobytes() != sentinel.tobytes():
                counts["bad"] += 1
                bad.append("a refused call wrote its output")
            return
        except Exception as exc:  # noqa: BLE001  (any other exception is a finding)
            counts["bad"] += 1
            bad.append(f"{type(exc).__name__}: {exc}")
            return
        counts["computed"] += 1
        try:
            expected = reference.circular_pad2d_backward(a, b.shape, padding) if pad else \
                reference.l1_loss_backward(_as_weak_scalar(a, b, c), b, c, extra,
                                           out.dtype if out is not None else None)
        except Exception as exc:  # noqa: BLE001
            counts["bad"] += 1
            bad.append(f"padloss computed a call its reference refuses ({type(exc).__name__}: {exc})")
            return
        result, expected = np.asarray(result), np.asarray(expected)
        if result.dtype != expected.dtype or not np.array_equal(result, expected, equal_nan=True):
            counts["bad"] += 1
            bad.append("a computed call differs from padloss.reference")

    one()
    return {**counts, "first_bad": bad[:3]}


def main() -> int:
    top = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = top.add_subparsers(dest="what", required=True)
    s = sub.add_parser("soak")
    s.add_argument("--threads", type=int, default=16)
    s.add_argument("--calls", type=int, default=100_000)
    s.add_argument("--plans", type=int, default=16)
    s.add_argument("--max-rss-growth-mb", type=float, default=64.0)
    f = sub.add_parser("fuzz")
    f.add_argument("--examples", type=int, default=100_000)
    args = top.parse_args()
    if args.what == "soak":
        report = soak(args.threads, args.calls, args.plans)
        failed = report["wrong"] or report["errors"] or report["rss_growth_mb"] > args.max_rss_growth_mb
    else:
        report = fuzz(args.examples)
        failed = report["bad"] > 0
    print(json.dumps(report))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
