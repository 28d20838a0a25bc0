"""The one-shot fast path: how a repeated tiny call stays at a few microseconds.

A one-shot call (``padloss.circular_pad2d_backward``, ``padloss.l1_loss_backward``)
whose arguments are plain NumPy arrays, and whose parameters are known exactly,
skips the two costly parts of phase 1 when its signature was seen before:

1. **Validation** (:class:`ValidatedCalls`). Validation is a pure function of
   metadata (dtypes, shapes, strides and the op's parameters), so a call whose
   :func:`signature` matches an earlier, valid one gets the same verdict: the
   Problem full validation built, kept in a :class:`Known`. What depends on the
   buffers themselves, the output's writability and its overlap with the
   inputs (padloss.aliasing), is still checked on every call
   (:meth:`ValidatedCalls.checked`). Anything unusual (torch tensors, lists,
   a float in the padding, a first-time signature) has no signature and takes
   the full path. Each op keeps two memos (padloss.op.OpDefinition): one for
   calls given an output, keyed on every buffer, and one for calls that
   allocate it, keyed on the inputs alone (the new output is always a C-ordered
   NumPy array, :meth:`Known.new_output`, so its metadata follows from the Problem).

2. **Backend selection and the plan lookup** (:func:`run_once`). A Known also
   keeps a :class:`Ready`: the plan its last one-shot call ran and everything
   that chose it. The next call reruns that plan, with no Executor built, while
   all of it still holds:

   - the request is the same (``dispatch.request()``: the ``backend=``
     argument, the enclosing ``use_backend`` block, the backend setting);
   - the selection stands (``dispatch.Choice.holds``: the same registry load,
     the chosen backend still available, none of those skipped as unavailable
     available now);
   - the backend's run-time context is the same (``Backend.cache_context()``,
     e.g. the Numba thread count);
   - the plan cache still holds the plan (``plan_cache.PlanCache.touch``: no
     plan removed since ``PlanCache.generation`` was read, when it was
     fetched; the touch counts as a hit and keeps the LRU order, as a lookup
     would, skipping the re-ordering for the newest key, ``PlanCache._newest``).

   Otherwise the choice and the plan are fetched again (:func:`_ready`), as
   phase 1 does it (``executor.fetch``), and kept for the next call. A run
   takes a small workspace from the Ready's spares (those earlier runs gave
   back) instead of allocating one, and gives it back when it finishes; a run
   that finds none (the first, or another call's run is using it) allocates.

Where the pieces are used: padloss.op.OpDefinition.call is the one-shot flow
of both ops; padloss.executor builds Executors and fetches plans and imports
nothing from here.
"""
from __future__ import annotations

from typing import Any, Callable, Hashable, NamedTuple

import numpy as np

from .aliasing import check_output_overlap
from .arrays import Tensor, numpy_dtype
from .config import current as _settings
from .dispatch import Choice, choose, request
from .errors import invalid_argument
from .executor import Spares, binder, fetch
from .plan_cache import plan_cache
from .problem import Problem

MAX_SIGNATURES = 1024
_make_tensor = Tensor._make


# ---------------------------------------------------------------- 1. validated signatures


class Known:
    """A validated signature's Problem, and what its last one-shot call ran
    (a :class:`Ready`, or None), kept for the next call to check and reuse."""

    __slots__ = ("problem", "ready", "_output")

    def __init__(self, problem: Problem):
        self.problem = problem
        self.ready = None
        self._output = None   # (shape, NumPy dtype) of a new output, on first use

    def new_output(self) -> np.ndarray:
        """A C-ordered NumPy output for the Problem, as an allocating call makes it
        (its dtype looked up once: numpy_dtype and the Problem's fields cost ~0.3 us)."""
        if self._output is None:
            meta = self.problem.output
            self._output = meta.shape, numpy_dtype(meta.dtype)
        return np.empty(*self._output)


def signature(arrays: tuple, params: Any, target: Any) -> tuple | None:
    """The memo key, or None (never remembered) when an argument is not a plain
    ndarray or the op's parameters are not known exactly (``params`` None); it holds
    the target's name (the call's ``npu_target``, else the setting's)."""
    if target is None:
        target = _settings.target
    if params is None or type(target) is not str:
        return None
    key: list = [params, target]
    append = key.append
    for a in arrays:
        if type(a) is not np.ndarray:
            return None
        append(a.dtype)
        append(a.shape)
        append(a.strides)
    return tuple(key)


class ValidatedCalls:
    """Signature -> Known for one op; cleared when full (a cheap, safe bound)."""

    __slots__ = ("op", "_known", "known")

    def __init__(self, op: str):
        self.op = op
        self._known: dict[Hashable, Known] = {}
        # known(key): the entry of a known signature (calls that allocate their output), or
        # None; the dict's own get (no Python frame: ~0.1 us of a tiny call). A None key,
        # never stored, finds nothing.
        self.known = self._known.get

    def remember(self, key: tuple | None, problem: Problem) -> Known:
        """The new entry (kept only where the signature is known exactly: ``key`` not None)."""
        known = Known(problem)
        if key is not None:
            if len(self._known) >= MAX_SIGNATURES:
                self._known.clear()
            self._known[key] = known
        return known

    def checked(self, key: tuple | None, buffers: tuple, names: tuple[str, ...]) -> Known | None:
        """The entry of a known signature once the output (last of ``buffers``)
        passed the per-call checks; None for an unknown signature."""
        known = self._known.get(key)
        if known is None:
            return None
        out = buffers[-1]
        flags = out.flags
        if not flags.writeable:
            raise invalid_argument(self.op, names[-1], "is read-only; the output must be writable")
        owner = flags.owndata
        for b in buffers[:-1]:
            if not (owner and b is not out and _in_other_allocation(b, out)) and np.may_share_memory(out, b):
                check_output_overlap(self.op, names, as_tensors(known.problem, buffers))   # names the input
        return known


def _in_other_allocation(b: np.ndarray, out: np.ndarray) -> bool:
    """Whether ``b``'s memory lies in an allocation NumPy made for an array other than
    ``out``: ``b``'s own, or its base's (NumPy points every view at the array owning the
    memory). Two such allocations share nothing, so an output that owns its memory needs
    no overlap test against ``b`` (``np.may_share_memory`` costs ~0.17 us an input)."""
    if b.flags.owndata:
        return True
    base = b.base
    return type(base) is np.ndarray and base is not out and base.flags.owndata


def as_tensors(problem: Problem, buffers: tuple) -> tuple[Tensor, ...]:
    """NumPy ``buffers`` of a validated signature as Tensors (their own native views)."""
    return tuple([_make_tensor((meta, "cpu", b, b)) for meta, b in zip(problem.tensors, buffers)])


class Prepared:
    """An allocating call validated and planned ahead of its run (OpDefinition.prepare):
    ``run(first)`` runs it with a new first input (grad_output) and the other inputs it
    was prepared with, or returns None where ``first`` has other metadata than planned."""

    __slots__ = ("known", "first", "rest")

    def __init__(self, known: Known, inputs: tuple[np.ndarray, ...]):
        self.known = known
        first = inputs[0]
        self.first = first.dtype, first.shape, first.strides
        self.rest = inputs[1:]

    def run(self, first: np.ndarray) -> np.ndarray | None:
        """The new output, written (it shares no memory with any input: it is new)."""
        if type(first) is not np.ndarray or (first.dtype, first.shape, first.strides) != self.first:
            return None
        out = self.known.new_output()
        run_once(self.known, (first, *self.rest, out), None)
        return out


# ---------------------------------------------------------------- 2. the last plan


class Ready(NamedTuple):
    """The plan a one-shot call ran, and what it depended on: the next call with
    the same signature runs it again if all of that still holds."""

    asked: tuple        # request(): backend=, use_backend block, the backend setting
    choice: Choice
    context: tuple      # the backend's cache_context()
    key: tuple          # the plan-cache key
    generation: int     # plan_cache.generation before the plan was fetched
    bind: Callable      # the plan's binder (executor.binder) and run, looked up once
    run: Callable
    workspace_size: int
    spares: Spares      # workspaces of finished runs, for the next (executor.Spares)


def _ready(problem: Problem, asked: tuple) -> Ready:
    choice = choose(problem, asked)
    context = choice.backend.cache_context()
    key = (problem, choice.backend.name, context)
    generation = plan_cache.generation
    plan = fetch(problem, choice.backend, key)
    return Ready(asked, choice, context, key, generation, binder(plan), plan.run, plan.workspace_size,
                 Spares())


def run_once(known: Known, arrays: tuple[np.ndarray, ...], requested_backend: str | None) -> None:
    """Phases 1 (from the plan on) and 2 of a one-shot call on validated NumPy
    arrays, which are their own native views: an Executor's run without building
    one. The plan the last such call ran is reused while its choice stands and
    the plan cache still holds it (counted as a hit there, as a lookup would be):
    a tiny call is mostly this bookkeeping."""
    asked = request(requested_backend)
    ready = known.ready
    if (ready is None or ready.asked != asked or not ready.choice.holds()
            or ready.choice.backend.cache_context() != ready.context
            or not plan_cache.touch(ready.key, ready.generation)):
        ready = known.ready = _ready(known.problem, asked)
    size = ready.workspace_size
    if not size:
        ready.run(ready.bind(arrays), None, None)
    else:
        workspace = ready.spares.take(size)
        ready.run(ready.bind(arrays), workspace, None)
        ready.spares.give(workspace)
