"""Measuring memory-bound kernels honestly on a shared, noisy machine.

Bandwidth on small machines shifts between levels every few seconds, so a
kernel and its ceiling must be timed in the same rounds: each round times
every candidate once (median of a few calls), and ratios are taken per round,
then their median is quoted. Effective bandwidth counts bytes read + written
by the op (each input once, the output once), divided by time.

The second half holds what ``padloss bench`` measures: a :class:`Workload` is
one op on one dtype and shape, with the callables that compute it (each
padloss backend, PyTorch CPU autograd and the NumPy reference as peers) and
the streaming ceiling of its read/write mix.
"""
from __future__ import annotations

import importlib.util
import os
import random
import statistics
import subprocess
import sys
import time
from typing import Callable, Iterable, Mapping, NamedTuple

import numpy as np

from . import reference
from .arrays import is_bfloat16, numpy_dtype
from .circular_pad import circular_pad2d_backward, circular_pad2d_backward_get_workspace_size
from .errors import PadlossError
from .l1_loss import l1_loss_backward, l1_loss_backward_get_workspace_size


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
    first timed one, for a callable that never compiles (torch's: see
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
    in a new order (drawn from ``seed``, so a run repeats its orders).

    A candidate's speed depends on what ran just before it: after the ceilings
    that stream their stores (``ceiling nt``, NumPy's large copy), the next one
    ran ~5% slower for several calls (the large float16 pad's one-shot call,
    first in a fixed order, 0.955 of its ``run()``; second, 1.01), and with
    a fixed order the same candidate pays it every round.

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
    """``interleaved`` rounds of callables that never compile (torch's), with no untimed
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


# ---------------------------------------------------------------------------
# What ``padloss bench`` measures.

SIZES = {"tiny": (2, 3, 8, 8), "medium": (4, 16, 128, 128), "large": (8, 64, 256, 256)}
"""self's shape by size name: call-overhead-bound, cache-resident (1 Mi
elements), and 2**25 elements: 64 MiB a tensor even in float16, so that the
buffers of one size and dtype (the op's, the ceiling's, torch's) do not fit
in this machine's L3 together; at 2**24 a float16 copy still ran from it."""
PADDING = (3, 3, 3, 3)
DTYPES = ("float32", "float16", "bfloat16")
TORCH_AUTOGRAD = "pytorch autograd"
TORCH_NATIVE = "pytorch reflect bwd"
JAX_VJP = "jax vjp"   # jax.vjp of the same forward (jnp.pad(mode="wrap"), the L1 loss), jitted
REFERENCE = "numpy reference"
CEILING = "ceiling"          # per round, the best of the normal-store ceilings' times
CEILING_NT = "ceiling nt"    # the same mix with its output streamed past the caches
CEILING_PART = "ceiling: "   # + an implementation's name (padloss_numba.stream.ceilings)

_FIRST_RESULT = """
import time
import numpy as np
t0 = time.perf_counter()
import padloss
padloss.circular_pad2d_backward(np.ones((2, 3, 14, 14), np.float32), np.empty((2, 3, 8, 8), np.float32),
                                (3, 3, 3, 3))
print(time.perf_counter() - t0)
"""


def torch_installed() -> bool:
    """Whether torch can be imported (it is not imported here)."""
    return importlib.util.find_spec("torch") is not None


def jax_installed() -> bool:
    """Whether jax can be imported (it is not imported here)."""
    return importlib.util.find_spec("jax") is not None


def _jitted_vjp(forward: Callable, primal: np.ndarray, cotangent: np.ndarray) -> Callable[[], object]:
    """A call of jax.jit(the vjp of ``forward`` at ``primal``, applied to ``cotangent``),
    compiled here, on arrays already on JAX's CPU device, waiting for the result."""
    import jax

    vjp = jax.jit(lambda x, g: jax.vjp(forward, x)[1](g)[0])
    x, g = jax.device_put(primal), jax.device_put(cotangent)
    vjp(x, g).block_until_ready()
    return lambda: vjp(x, g).block_until_ready()


def _random(shape: tuple[int, ...], dtype: str, seed: int) -> np.ndarray:
    """Normal values; a block of 2**20 repeated (the kernels' speed does not
    depend on the values, and drawing 2**25 of them takes a second)."""
    block = np.random.default_rng(seed).standard_normal(1 << 20, dtype=np.float32).astype(numpy_dtype(dtype))
    return np.resize(block, shape)


def _inputs(shape: tuple[int, ...], dtype: str, seed: int, filled: bool) -> np.ndarray:
    """A workload's input: ``_random`` values, or unfilled (no page of it touched)
    for a workload that is only planned (``prepare``)."""
    return _random(shape, dtype, seed) if filled else np.empty(shape, numpy_dtype(dtype))


def _as_torch(a: np.ndarray):
    """A torch tensor sharing ``a``'s memory (bfloat16 through its bits)."""
    import torch

    if is_bfloat16(a.dtype):
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


class Workload:
    """One op on one dtype and shape: its buffers (allocated and filled once),
    the bytes a call reads and writes, and the callables that compute it."""

    op: str
    label: str
    nbytes: int
    out: np.ndarray

    def padloss(self, backend: str | None) -> Callable[[], object]:
        """The one-shot call into the preallocated output."""
        raise NotImplementedError

    def executor(self, backend: str | None = None):
        """A planned executor (phase 1 done) whose ``run()`` repeats the call."""
        raise NotImplementedError

    def reference(self) -> Callable[[], object]:
        raise NotImplementedError

    def torch_autograd(self) -> Callable[[], object]:
        """PyTorch's backward of the same forward op, the graph built once."""
        raise NotImplementedError

    def torch_native(self) -> Callable[[], object] | None:
        """A native PyTorch kernel of the closest op, where there is one."""
        return None

    def jax_vjp(self) -> Callable[[], object]:
        """JAX's jitted vjp of the same forward op, on JAX's CPU device (:data:`JAX_VJP`)."""
        raise NotImplementedError

    def streamed(self) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
        """The buffers the op streams, read and written: its read/write mix."""
        raise NotImplementedError

    @property
    def ceiling_inputs(self) -> int:
        """How many streams the ceilings read (one for a copy)."""
        return len(self.streamed()[0])

    def ceilings(self) -> dict[str, tuple[Callable[[], object], int]]:
        """Every streaming implementation of the same read/write mix (name -> (fn, bytes
        it moves)): the normal-store ones, whose best per round is :data:`CEILING`
        (``best_ceiling``), and :data:`CEILING_NT`. They stream the workload's own
        buffers, as float32 words as many as the output holds: the op's pages, and no
        second set to fault in (a large L1 workload's own set was 400 MB more)."""
        from padloss_numba.stream import ceilings_over

        inputs, out = self.streamed()
        words = out.nbytes // 4

        def as_words(a: np.ndarray) -> np.ndarray:
            return a.reshape(-1).view(np.uint8)[:4 * words].view(np.float32)

        found = ceilings_over(tuple(as_words(a) for a in inputs), as_words(out))
        return {CEILING_NT if name == "nt" else CEILING_PART + name: (fn, 4 * words * (len(inputs) + 1))
                for name, fn in found.items()}


class PadWorkload(Workload):
    op = label = "circular_pad2d_backward"

    def __init__(self, dtype: str, shape: tuple[int, ...], padding: tuple[int, ...] = PADDING,
                 filled: bool = True):
        left, right, top, bottom = padding
        self.padding = tuple(padding)
        padded = shape[:-2] + (shape[-2] + top + bottom, shape[-1] + left + right)
        self.grad_output = _inputs(padded, dtype, 0, filled)
        self.out = np.empty(shape, self.grad_output.dtype)
        self.nbytes = self.grad_output.nbytes + self.out.nbytes

    def padloss(self, backend):
        go, out, pads = self.grad_output, self.out, self.padding
        return lambda: circular_pad2d_backward(go, out, pads, out=out, backend=backend)

    def executor(self, backend=None):
        go, out = self.grad_output, self.out
        return circular_pad2d_backward_get_workspace_size(go, out, self.padding, out, backend=backend)[1]

    def streamed(self):
        return (self.grad_output,), self.out   # a copy

    def reference(self):
        go, shape, pads = self.grad_output, self.out.shape, self.padding
        return lambda: reference.circular_pad2d_backward(go, shape, pads)

    def torch_autograd(self):
        import torch

        go = _as_torch(self.grad_output)
        x = torch.zeros(self.out.shape, dtype=go.dtype, requires_grad=True)
        y = torch.nn.functional.pad(x, self.padding, mode="circular")
        return lambda: torch.autograd.grad(y, x, go, retain_graph=True)

    def torch_native(self):
        """reflection_pad2d_backward: same shapes and a similar gather (PyTorch
        has no native circular-pad backward; autograd composes it from slices)."""
        import torch

        go = _as_torch(self.grad_output)
        x = torch.empty(self.out.shape, dtype=go.dtype)
        pads = list(self.padding)
        return lambda: torch.ops.aten.reflection_pad2d_backward(go, x, pads)

    def jax_vjp(self):
        import jax.numpy as jnp

        left, right, top, bottom = self.padding
        widths = [(0, 0)] * (self.out.ndim - 2) + [(top, bottom), (left, right)]
        return _jitted_vjp(lambda x: jnp.pad(x, widths, mode="wrap"), np.zeros_like(self.out),
                           self.grad_output)


class L1Workload(Workload):
    op = "l1_loss_backward"

    def __init__(self, dtype: str, shape: tuple[int, ...], reduction: str = "mean", filled: bool = True):
        self.reduction = reduction
        self.label = f"l1_loss_backward ({reduction})"
        self.grad_output = _inputs(shape if reduction == "none" else (), dtype, 0, filled)
        self.self_ = _inputs(shape, dtype, 1, filled)
        self.target = _inputs(shape, dtype, 2, filled)
        self.out = np.empty(shape, self.self_.dtype)
        self.nbytes = sum(a.nbytes for a in (self.grad_output, self.self_, self.target, self.out))

    def padloss(self, backend):
        go, x, t, reduction, out = self.grad_output, self.self_, self.target, self.reduction, self.out
        return lambda: l1_loss_backward(go, x, t, reduction, out=out, backend=backend)

    def executor(self, backend=None):
        go, x, t, out = self.grad_output, self.self_, self.target, self.out
        return l1_loss_backward_get_workspace_size(go, x, t, self.reduction, out, backend=backend)[1]

    def streamed(self):
        reads = (self.self_, self.target)   # mean/sum: grad_output is 0-d
        return ((self.grad_output,) + reads if self.reduction == "none" else reads), self.out

    def reference(self):
        go, x, t, reduction = self.grad_output, self.self_, self.target, self.reduction
        return lambda: reference.l1_loss_backward(go, x, t, reduction)

    def torch_autograd(self):
        import torch

        x = _as_torch(self.self_).clone().requires_grad_()
        loss = torch.nn.functional.l1_loss(x, _as_torch(self.target), reduction=self.reduction)
        go = _as_torch(self.grad_output)
        return lambda: torch.autograd.grad(loss, x, go, retain_graph=True)

    def jax_vjp(self):
        import jax.numpy as jnp

        t = self.target
        loss = {"none": lambda x: jnp.abs(x - t), "mean": lambda x: jnp.mean(jnp.abs(x - t)),
                "sum": lambda x: jnp.sum(jnp.abs(x - t))}[self.reduction]
        return _jitted_vjp(loss, self.self_, self.grad_output)


def workload(op: str, dtype: str, size: str, reduction: str, filled: bool = True) -> Workload:
    """The bench's workload for ``op`` ("pad" or "l1") at a size of :data:`SIZES`; its
    inputs are left unfilled unless ``filled`` (enough for ``prepare``)."""
    shape = SIZES[size]
    if op == "pad":
        return PadWorkload(dtype, shape, filled=filled)
    return L1Workload(dtype, shape, reduction, filled=filled)


def prepare(w: Workload, mixes: Iterable[int] = ()) -> None:
    """Compile (or load) what the bench runs for ``w``, without running it: the plan of
    its padloss call (phase 1, automatic backend, for buffers of ``w``'s metadata: an
    unfilled ``w`` will do), and the ceiling kernels of ``mixes`` (counts of input
    streams, see ``Workload.ceilings``). Nothing is written: a large workload's pages,
    filled and written, took 0.4-0.9 s of a compiling child's time."""
    w.executor()
    if mixes:
        from padloss_numba import stream

        for n_inputs in mixes:
            stream.prepare(n_inputs)


TORCH_BACKENDS = ("torch", "ascend")
"""The padloss backends that run torch ops: timed beside torch's own peers, in a
process of their own (``torch_candidates``). After each parallel op torch's OpenMP
threads spin for a while: in the process that times padloss's Numba kernels and
the ceilings, they halved the medium pad's measured bandwidth on 2 cores."""


def _padloss_calls(w: Workload, backends: list[str]) -> tuple[dict, dict[str, str]]:
    """Each backend's call of ``w`` (name -> (fn, bytes moved)), called once here so
    its kernel is compiled (or loaded) before any timing, and name -> why one refused."""
    found: dict[str, tuple[Callable[[], object], int]] = {}
    refused: dict[str, str] = {}
    for backend in backends:
        name, fn = f"padloss {backend}", w.padloss(backend)
        try:
            fn()
        except PadlossError as exc:
            refused[name] = str(exc)
            continue
        found[name] = (fn, w.nbytes)
    return found, refused


RUN = " (run)"
"""Suffix of a backend's planned executor's row (``candidates``)."""


def candidates(w: Workload, backends: list[str], *, reference: bool
               ) -> tuple[dict[str, tuple[Callable[[], object], int]], dict[str, str]]:
    """What computes ``w`` without torch (name -> (fn, bytes moved)): the padloss
    ``backends``, each as its one-shot call and as its planned executor's ``run()``
    (``RUN``: the same kernel without the one-shot's per-call Python, the memo key,
    the output checks, the plan lookup and the binding, which after a medium call
    has emptied the caches took 8-15 us of it), the NumPy reference if asked, the
    ceilings last; and name -> why a backend refused."""
    calls, refused = _padloss_calls(w, backends)
    found: dict[str, tuple[Callable[[], object], int]] = {}
    for name, call in calls.items():
        run = w.executor(name.removeprefix("padloss ")).run
        run()
        found.update({name: call, name + RUN: (run, w.nbytes)})
    if reference:
        found[REFERENCE] = (w.reference(), w.nbytes)
    found.update(w.ceilings())
    return found, refused


def jax_candidates(w: Workload) -> dict[str, tuple[Callable[[], object], int]]:
    """What computes ``w`` with JAX: its jitted vjp."""
    return {JAX_VJP: (w.jax_vjp(), w.nbytes)}


def torch_candidates(w: Workload, backends: list[str]
                     ) -> tuple[dict[str, tuple[Callable[[], object], int]], dict[str, str]]:
    """What computes ``w`` with torch: the padloss ``backends`` (of TORCH_BACKENDS), then
    PyTorch's autograd and its native kernel of the closest op, where there is one."""
    found, refused = _padloss_calls(w, backends)
    found[TORCH_AUTOGRAD] = (w.torch_autograd(), w.nbytes)
    native = w.torch_native()
    if native is not None:
        found[TORCH_NATIVE] = (native, w.nbytes)
    return found, refused


def best_ceiling(results: dict[str, Result]) -> Result:
    """:data:`CEILING`: per round, the fastest normal-store ceiling in ``results``
    (each round's best, as the machine's bandwidth moves between rounds)."""
    from padloss_numba.stream import NORMAL_STORES

    parts = [results[CEILING_PART + name] for name in NORMAL_STORES if CEILING_PART + name in results]
    return Result(CEILING, parts[0].nbytes, [min(times) for times in zip(*(p.seconds for p in parts))],
                  parts[0].group)


def first_result_s(runs: int = 3, warm_first: bool = True) -> float:
    """Seconds from ``import padloss`` to a first result, in a fresh interpreter
    (numpy already imported) with a warm compile cache: the median of ``runs``,
    after one run that warms the cache unless ``warm_first`` is off (the caller
    has just run the same call, the tiny float32 pad)."""
    times = []
    for _ in range(runs + warm_first):
        done = subprocess.run([sys.executable, "-c", _FIRST_RESULT], capture_output=True, text=True,
                              check=True)
        times.append(float(done.stdout))
    return statistics.median(times[warm_first:])


# ---------------------------------------------------------------------------
# Through torch autograd: padloss.torch (torch's forward, padloss's backward)
# against torch's own autograd, and a small model's training step patched vs not.

AUTOGRAD_PADLOSS = "padloss.torch"
PATCHED = "patched"
UNPATCHED = "unpatched"
STEP = "training step"
STEP_BATCH = (8, 3, 64, 64)
"""The training step's input (and target) shape: batch, channels, height, width."""
STEP_MODEL = 'Conv2d(3, 8, 3) -> ReLU -> Conv2d(8, 3, 3), both padding=1, padding_mode="circular"'
"""The training step's model; nn.L1Loss and plain SGD (STEP_LR) train it."""
STEP_LR = 1e-3


def padloss_torch_missing() -> str | None:
    """Why padloss.torch cannot be timed here, or None when it can (imports torch)."""
    try:
        import padloss.torch  # noqa: F401
    except ImportError as exc:
        return str(exc)
    return None


def autograd_backward(w: Workload) -> dict[str, Callable[[], object]]:
    """``w``'s forward built once through :mod:`padloss.torch` and once through
    torch alone (the same leaf, the same gradient), and a callable per graph
    that reruns its backward: ``y.backward(g, retain_graph=True)``, the leaf's
    ``.grad`` reset to None first (as ``zero_grad()`` leaves it), so each call
    is the backward and the gradient's assignment, never an accumulation.
    padloss.torch first, torch's own autograd last; PadlossError where
    padloss.torch refuses the case."""
    import torch
    import torch.nn.functional as F

    import padloss.torch as pt

    if isinstance(w, PadWorkload):
        g = _as_torch(w.grad_output)
        x = torch.zeros(w.out.shape, dtype=g.dtype, requires_grad=True)
        graphs = {AUTOGRAD_PADLOSS: pt.circular_pad2d(x, w.padding),
                  TORCH_AUTOGRAD: F.pad(x, w.padding, mode="circular")}
    elif isinstance(w, L1Workload):
        x = _as_torch(w.self_).clone().requires_grad_()
        t, g = _as_torch(w.target), _as_torch(w.grad_output)   # g: 0-d for mean and sum
        graphs = {AUTOGRAD_PADLOSS: pt.l1_loss(x, t, w.reduction),
                  TORCH_AUTOGRAD: F.l1_loss(x, t, reduction=w.reduction)}
    else:
        raise TypeError(f"no autograd form for {type(w).__name__}")

    def rerun(y):
        def backward():
            x.grad = None
            y.backward(g, retain_graph=True)
        return backward

    return {name: rerun(y) for name, y in graphs.items()}


def training_step(batch: tuple[int, ...] = STEP_BATCH) -> dict[str, Callable[[], object]]:
    """One SGD step (learning rate STEP_LR) of the small model of :data:`STEP_MODEL`
    on a float32 batch: zero_grad, forward, L1 loss, backward, step. Two copies of
    the same initial model: one steps inside
    ``with padloss.torch.patch():`` (entered and left every call, a few
    microseconds), the other unpatched. Under the patch padloss takes the
    second conv's circular pad (the first one's input needs no gradient, so it
    stays torch's) and the loss."""
    import copy

    import torch
    from torch import nn

    import padloss.torch as pt

    with torch.random.fork_rng(devices=[]):   # leaves the caller's random state alone
        torch.manual_seed(0)
        model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, padding_mode="circular"), nn.ReLU(),
                              nn.Conv2d(8, 3, 3, padding=1, padding_mode="circular"))
        x, target = torch.randn(batch), torch.randn(batch)
    loss_fn = nn.L1Loss()

    def stepper():
        m = copy.deepcopy(model)
        params = list(m.parameters())

        def step():
            for p in params:                  # zero_grad()
                p.grad = None
            loss_fn(m(x), target).backward()
            with torch.no_grad():             # SGD's step, written out: torch.optim's first use imports
                for p in params:              # torch._dynamo, 1.4 s of the quick bench
                    p.add_(p.grad, alpha=-STEP_LR)
        return step

    plain, inner = stepper(), stepper()

    def patched():
        with pt.patch():
            inner()

    return {PATCHED: patched, UNPATCHED: plain}
