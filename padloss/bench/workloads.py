"""What ``padloss bench`` times: a :class:`Workload` is one op on one dtype and shape,
with the callables that compute it (each padloss backend, PyTorch CPU autograd, JAX
and the NumPy reference as peers) and the streaming ceilings of its read/write mix.
Each op of the catalogue names its workload class here."""
from __future__ import annotations

from typing import Callable

import numpy as np

from .. import reference
from ..arrays import is_bfloat16, numpy_dtype
from ..catalogue import BENCHED
from ..circular_pad import circular_pad2d_backward, circular_pad2d_backward_get_workspace_size
from ..errors import PadlossError
from ..l1_loss import l1_loss_backward, l1_loss_backward_get_workspace_size
from . import ceilings
from .ceilings import CEILING_NT, CEILING_PART

SIZES = {"tiny": (2, 3, 8, 8), "medium": (4, 16, 128, 128), "large": (8, 64, 256, 256)}
"""self's shape by size name: call-overhead-bound, cache-resident (1 Mi
elements), and 2**25 elements: 64 MiB a tensor even in float16, so that the
buffers of one size and dtype (the op's, the ceiling's, torch's) do not fit
in this machine's L3 together; at 2**24 a float16 copy still ran from it."""
PADDING = (3, 3, 3, 3)
TORCH_AUTOGRAD = "pytorch autograd"
TORCH_NATIVE = "pytorch reflect bwd"
JAX_VJP = "jax vjp"   # jax.vjp of the same forward (jnp.pad(mode="wrap"), the L1 loss), jitted
REFERENCE = "numpy reference"
AUTOGRAD_PADLOSS = "padloss.torch"

def _jitted_vjp(forward: Callable, primal: np.ndarray, cotangent: np.ndarray,
                *operands: np.ndarray) -> Callable[[], object]:
    """A call of jax.jit(the vjp of ``forward(x, *operands)`` in x at ``primal``, applied to
    ``cotangent``), compiled here, on arrays already on JAX's CPU device, waiting for the
    result. ``operands`` are the jitted function's arguments, as a user passes them: closed
    over, an array became a constant of the program, and XLA took 2.3 s to compile the
    large L1 loss around its 128 MiB target."""
    import jax

    def backward(x, g, *ops):
        return jax.vjp(lambda x: forward(x, *ops), x)[1](g)[0]

    vjp = jax.jit(backward)
    args = [jax.device_put(a) for a in (primal, cotangent, *operands)]
    vjp(*args).block_until_ready()
    return lambda: vjp(*args).block_until_ready()


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

    @classmethod
    def sized(cls, dtype: str, shape: tuple[int, ...], reduction: str, filled: bool) -> Workload:
        """The bench's workload of self's shape ``shape`` (``reduction``: L1's, where an op has one)."""
        raise NotImplementedError

    def padloss(self, backend: str | None) -> Callable[[], object]:
        """The one-shot call into the preallocated output."""
        raise NotImplementedError

    def executor(self, backend: str | None = None):
        """A planned executor (phase 1 done) whose ``run()`` repeats the call."""
        raise NotImplementedError

    def reference(self) -> Callable[[], object]:
        raise NotImplementedError

    def torch_leaf(self) -> tuple:
        """(leaf, grad_output) as torch tensors: the forward's input, needing its gradient,
        and the gradient its output gets."""
        raise NotImplementedError

    def torch_forward(self, leaf, through_padloss: bool):
        """The forward op on ``leaf``, through :mod:`padloss.torch` or through torch alone."""
        raise NotImplementedError

    def torch_autograd(self) -> Callable[[], object]:
        """PyTorch's backward of the same forward op, the graph built once."""
        import torch

        x, g = self.torch_leaf()
        y = self.torch_forward(x, through_padloss=False)
        return lambda: torch.autograd.grad(y, x, g, retain_graph=True)

    def torch_graphs(self) -> tuple:
        """(leaf, grad_output, {AUTOGRAD_PADLOSS: y, TORCH_AUTOGRAD: y}): the forward built
        once through :mod:`padloss.torch` and once through torch alone, from one leaf."""
        x, g = self.torch_leaf()
        return x, g, {AUTOGRAD_PADLOSS: self.torch_forward(x, through_padloss=True),
                      TORCH_AUTOGRAD: self.torch_forward(x, through_padloss=False)}

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
        inputs, out = self.streamed()
        words = out.nbytes // 4

        def as_words(a: np.ndarray) -> np.ndarray:
            return a.reshape(-1).view(np.uint8)[:4 * words].view(np.float32)

        found = ceilings.ceilings_over(tuple(as_words(a) for a in inputs), as_words(out))
        moved = 4 * words * (len(inputs) + 1)
        return {CEILING_NT if name == ceilings.STREAMED else CEILING_PART + name: (fn, moved)
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

    @classmethod
    def sized(cls, dtype, shape, reduction, filled):
        return cls(dtype, shape, filled=filled)

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

    def torch_leaf(self):
        import torch

        g = _as_torch(self.grad_output)
        return torch.zeros(self.out.shape, dtype=g.dtype, requires_grad=True), g

    def torch_forward(self, leaf, through_padloss):
        if through_padloss:
            import padloss.torch as pt

            return pt.circular_pad2d(leaf, self.padding)
        import torch

        return torch.nn.functional.pad(leaf, self.padding, mode="circular")

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

    @classmethod
    def sized(cls, dtype, shape, reduction, filled):
        return cls(dtype, shape, reduction, filled=filled)

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

    def torch_leaf(self):
        # grad_output: 0-d for mean and sum
        return _as_torch(self.self_).clone().requires_grad_(), _as_torch(self.grad_output)

    def torch_forward(self, leaf, through_padloss):
        if through_padloss:
            import padloss.torch as pt

            return pt.l1_loss(leaf, _as_torch(self.target), self.reduction)
        import torch

        return torch.nn.functional.l1_loss(leaf, _as_torch(self.target), reduction=self.reduction)

    def jax_vjp(self):
        import jax.numpy as jnp

        loss = {"none": lambda x, t: jnp.abs(x - t), "mean": lambda x, t: jnp.mean(jnp.abs(x - t)),
                "sum": lambda x, t: jnp.sum(jnp.abs(x - t))}[self.reduction]
        return _jitted_vjp(loss, self.self_, self.grad_output, self.target)


def workload(op: str, dtype: str, size: str, reduction: str, filled: bool = True) -> Workload:
    """The bench's workload for ``op`` (its catalogue short name, "pad" or "l1") at a size
    of :data:`SIZES`; its inputs are left unfilled unless ``filled`` (enough for ``prepare``)."""
    return BENCHED[op].workload_class().sized(dtype, SIZES[size], reduction, filled)


def prepare(w: Workload) -> None:
    """Compile (or load) what the bench runs for ``w``, without running it: the plan of
    its padloss call (phase 1, automatic backend, for buffers of ``w``'s metadata: an
    unfilled ``w`` will do). Nothing is written: a large workload's pages, filled and
    written, took 0.4-0.9 s of a compiling child's time."""
    w.executor()


TORCH_BACKENDS = ("torch", "ascend")
"""The padloss backends that run torch ops: timed beside torch's own peers, in a
process of their own (``torch_candidates``; docs/performance.md, "Peers in processes
of their own")."""


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


