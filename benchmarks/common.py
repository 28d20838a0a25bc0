"""The grid of the asv suite and the workloads it times.

asv runs this suite against old commits too, so a workload calls padloss's public
API only (it has not changed since the first commit); the timers and the ceilings,
which are not public, come from where each commit has them (``timers``,
``Workload.ceiling``), and what a commit lacks (an op, a backend, the ceiling
kernel) is skipped rather than failed. ``padloss bench`` (padloss/bench/) times
the same sizes for the current code only.
"""
from __future__ import annotations

import importlib.util

import ml_dtypes
import numpy as np

import padloss

try:   # the catalogue's dtypes and the bench's sizes, on every commit that has them
    from padloss.bench.workloads import SIZES
    from padloss.catalogue import BENCH_DTYPES
    DTYPES = list(BENCH_DTYPES)
except ImportError:   # a commit before them: the same values
    SIZES = {"tiny": (2, 3, 8, 8), "medium": (4, 16, 128, 128), "large": (8, 64, 256, 256)}
    DTYPES = ["float32", "float16", "bfloat16"]
PEER = "pytorch-autograd"
IMPLS = ["numba", "torch", "ascend", PEER]   # padloss backends by name, then the peer
PADDING = (3, 3, 3, 3)


def _dtype(name: str) -> np.dtype:
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def _random(shape: tuple[int, ...], dtype: str, seed: int) -> np.ndarray:
    """Normal values, a block of 2**20 repeated (speed does not depend on them)."""
    block = np.random.default_rng(seed).standard_normal(1 << 20, dtype=np.float32).astype(_dtype(dtype))
    return np.resize(block, shape)


def _as_torch(a: np.ndarray):
    import torch

    if a.dtype == _dtype("bfloat16"):
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


class Workload:
    """One op on one size and dtype: its buffers, the bytes a call reads and
    writes, and the number of streams the matching ceiling reads."""

    def __init__(self, op: str, reduction: str | None, size: str, dtype: str):
        self.op, self.reduction = op, reduction
        self.fn = getattr(padloss, op, None)
        if self.fn is None:
            raise NotImplementedError(f"this commit has no padloss.{op}")
        shape = SIZES[size]
        if op == "circular_pad2d_backward":
            left, right, top, bottom = PADDING
            go = _random(shape[:-2] + (shape[-2] + top + bottom, shape[-1] + left + right), dtype, 0)
            self.out = np.empty(shape, go.dtype)
            self.args = (go, self.out, PADDING)   # self: only its shape and dtype are read
            self.streams_read = 1
            self.nbytes = go.nbytes + self.out.nbytes
        else:
            go = _random(shape if reduction == "none" else (), dtype, 0)
            self.out = np.empty(shape, go.dtype)
            self.args = (go, _random(shape, dtype, 1), _random(shape, dtype, 2), reduction)
            self.streams_read = 3 if reduction == "none" else 2
            self.nbytes = sum(a.nbytes for a in self.args[:3]) + self.out.nbytes

    def call(self, impl: str):
        """A zero-argument callable computing the op with ``impl``, called once
        (compiled or loaded, pages touched); NotImplementedError if it cannot run."""
        fn = self._torch_autograd() if impl == PEER else self._padloss(impl)
        fn()
        return fn

    def _padloss(self, backend: str):
        info = {b.name: b for b in padloss.available_backends()}.get(backend)
        if info is None or not info.available:
            why = info.reason if info else "unknown"
            raise NotImplementedError(f"backend {backend!r} unavailable: {why}")
        fn, args, out = self.fn, self.args, self.out

        def run():
            return fn(*args, out=out, backend=backend)

        try:
            run()
        except padloss.PadlossError as exc:
            raise NotImplementedError(str(exc)) from exc
        return run

    def _torch_autograd(self):
        if importlib.util.find_spec("torch") is None:
            raise NotImplementedError("torch is not installed")
        import torch

        if self.op == "circular_pad2d_backward":
            go = _as_torch(self.args[0])
            x = torch.zeros(self.out.shape, dtype=go.dtype, requires_grad=True)
            y = torch.nn.functional.pad(x, PADDING, mode="circular")
            return lambda: torch.autograd.grad(y, x, go, retain_graph=True)
        go, x, t, reduction = self.args
        x = _as_torch(x).clone().requires_grad_()
        loss = torch.nn.functional.l1_loss(x, _as_torch(t), reduction=reduction)
        go = _as_torch(go)
        return lambda: torch.autograd.grad(loss, x, go, retain_graph=True)

    def ceiling(self):
        """({name: callable}, bytes each moves) of the streaming kernels with this op's
        read/write mix that store normally (padloss.bench.ceilings; before it,
        padloss_numba.stream.ceilings, and before that ``make_stream``), or None on
        a commit without any."""
        streams = self.streams_read + 1
        words = max(1, self.nbytes // (4 * streams))
        try:
            from padloss.bench import ceilings
        except ImportError:
            pass
        else:
            inputs = tuple(np.ones(words, np.float32) for _ in range(self.streams_read))
            found = ceilings.ceilings_over(inputs, np.zeros(words, np.float32))
            return {name: fn for name, fn in found.items() if name != ceilings.STREAMED}, 4 * words * streams
        try:
            from padloss_numba import stream
        except ImportError:
            return None
        if hasattr(stream, "ceilings"):
            found = stream.ceilings(self.streams_read, words)
            fns = {name: found[name] for name in stream.NORMAL_STORES if name in found}
        else:
            fns = {"prange": stream.make_stream(self.streams_read, words)}
        return fns, 4 * words * streams


def timers(*names: str) -> tuple:
    """padloss's timing functions by name: padloss.bench.timing's, or on a commit
    before it, padloss.benchmark's."""
    try:
        from padloss.bench import timing
    except ImportError:
        from padloss import benchmark as timing
    return tuple(getattr(timing, name) for name in names)


def ratio_to_ceiling(fn, nbytes: int, ceiling) -> float:
    """Median over interleaved rounds of (fn's bandwidth / the best ceiling's in that round)."""
    import statistics

    interleaved, time_round = timers("interleaved", "time_round")
    fns, ceiling_bytes = ceiling
    calls = max(1, min(200, int(0.01 / time_round(fn, 1))))   # about 10 ms a round
    results = interleaved({"op": (fn, nbytes), **{name: (f, ceiling_bytes) for name, f in fns.items()}},
                          rounds=7, calls=calls, warmup=1)
    best = [min(times) for times in zip(*(results[name].seconds for name in fns))]
    return statistics.median((nbytes / t) / (ceiling_bytes / b) for t, b in zip(results["op"].seconds, best))
