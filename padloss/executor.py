"""Phase 2: the Executor, a compiled plan bound to buffers, run any number of times.

Phase 1 (each op's ``*_get_workspace_size``, through padloss.op) validates
the arguments, picks a backend and fetches the plan from the cache; the
Executor it returns only checks what can change between runs (new buffers
must have the planned metadata; the workspace must be large enough) and
launches the plan. Unlike aclnn's single-use executor it is repeatable:
``run()`` may be called again, with the same buffers or with new ones of
identical metadata.

A one-shot call runs a plan without an Executor: padloss.fastpath, which
imports this module (``binder``, ``fetch``); nothing here imports it back.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .aliasing import check_output_overlap, check_workspace_overlap
from .arrays import Tensor, as_tensor
from .backend import Backend, Plan
from .dispatch import select_backend
from .errors import invalid_argument, null_argument
from .plan_cache import plan_cache
from .problem import Problem


class EmptyPlan:
    """The plan of a call with nothing to compute: no workspace, launches nothing."""

    workspace_size = 0
    context_free = True

    def run(self, buffers: tuple, workspace: Any, stream: Any) -> None:
        return None


EMPTY_PLAN = EmptyPlan()

# A run that is given no workspace takes a spare of its plan (one a finished run gave back)
# up to this size rather than allocating one: np.empty costs 0.5 us warm but 8 us right
# after a medium call has filled the caches with its data. Larger ones come with calls
# whose kernels dwarf an allocation, and would stay allocated for as long as the holder.
SPARE_WORKSPACE_MAX_BYTES = 1 << 14


class Spares:
    """The workspaces finished runs of one plan gave back, for the next runs: each run
    takes one of its own (``list.pop`` is atomic, so concurrent runs never share one).
    Workspaces past SPARE_WORKSPACE_MAX_BYTES are allocated for each run and not kept."""

    __slots__ = ("_free",)

    def __init__(self):
        self._free: list[np.ndarray] = []

    def take(self, size: int) -> np.ndarray:
        if size <= SPARE_WORKSPACE_MAX_BYTES:
            try:
                return self._free.pop()
            except IndexError:
                pass
        return np.empty(size, np.uint8)

    def give(self, workspace: np.ndarray) -> None:
        if workspace.nbytes <= SPARE_WORKSPACE_MAX_BYTES:
            self._free.append(workspace)


class Executor:
    """A plan bound to buffers. ``workspace_size`` is the scratch the plan needs
    (bytes; 0 means none). ``run()`` returns the output the caller passed."""

    __slots__ = ("problem", "backend", "_plan", "_names", "_tensors", "_bound", "_launch", "_result",
                 "_clear_workspace", "_spares")

    def __init__(self, problem: Problem, backend: Backend | None, plan: Plan,
                 names: tuple[str, ...], tensors: tuple[Tensor, ...]):
        self.problem = problem
        self.backend = backend
        self._plan = plan
        self._names = names
        self._spares = Spares()
        self._bind(tensors)

    def _bind(self, tensors: tuple[Tensor, ...]) -> None:
        self._clear_workspace = None   # the last workspace found to share no memory with them
        self._tensors = tensors
        self._bound = kept_binder(self._plan)(tuple([t.native for t in tensors]))
        self._launch = None   # made by the first run() of these buffers that takes no new ones

    @property
    def workspace_size(self) -> int:
        return self._plan.workspace_size

    def run(self, /, workspace: Any = None, stream: Any = None, **buffers: Any) -> Any:
        """Launch the plan; keyword buffers replace the bound ones for this run
        and later runs (``self`` is positional-only, so a buffer may be named
        ``self``, as l1_loss_backward's is). Nothing is written unless every
        check passes."""
        launch = self._launch
        if launch is not None and not buffers:   # the bound buffers again: one call, no Python frame
            launch()
            return self._result
        tensors = self._rebind(buffers) if buffers else None
        size = self._plan.workspace_size
        spare = None
        if size:
            if workspace is None and self._tensors[-1].device == "cpu":
                workspace = spare = self._spares.take(size)   # its own memory: no overlap to check
            else:
                workspace = self._workspace(workspace, size, tensors or self._tensors)
        if tensors is not None:
            self._bind(tensors)
        self._plan.run(self._bound, workspace, stream)
        if spare is not None:
            self._spares.give(spare)
        result = self._tensors[-1].original
        if not buffers and not size:
            # a plan needing no workspace may run these buffers as one call (padloss.backend.Plan):
            # the next runs of them make it (its launcher looked up on its class: no bound method)
            launcher = getattr(type(self._plan), "launcher", None)
            if launcher is not None:
                self._result = result   # first: a run that finds the launch returns it
                self._launch = launcher(self._plan, self._bound)
        return result

    def _rebind(self, buffers: dict[str, Any]) -> tuple[Tensor, ...]:
        op = self.problem.op
        tensors = list(self._tensors)
        for name, value in buffers.items():
            if name not in self._names:
                raise TypeError(f"{op}: executor.run() got an unexpected buffer {name!r}; "
                                f"it takes {', '.join(self._names)}")
            if value is None:
                raise null_argument(op, name)
            i = self._names.index(name)
            t = as_tensor(op, name, value, writable=(i == len(self._names) - 1))
            planned = self._tensors[i]
            if t.meta != planned.meta or t.device != planned.device:
                raise invalid_argument(op, name, f"has {_describe(t)} but this executor was planned "
                                                 f"for {_describe(planned)}; plan a new call instead")
            tensors[i] = t
        check_output_overlap(op, self._names, tensors)
        return tuple(tensors)

    def _workspace(self, workspace: Any, size: int, tensors: tuple[Tensor, ...]) -> Any:
        """The scratch buffer for one run, as the plan wants it: CPU plans take a
        flat uint8 NumPy view of their own (sharing no memory with ``tensors``).
        None (which ``run`` takes from its Spares on the CPU) is refused on a device: a
        device plan's caller passes device memory, as with aclnn."""
        if workspace is None:
            raise null_argument(self.problem.op, "workspace")
        if self._tensors[-1].device != "cpu":
            return workspace
        op = self.problem.op
        common = type(workspace) is np.ndarray and workspace.dtype == np.uint8 and workspace.ndim == 1
        flat = workspace if common else as_tensor(op, "workspace", workspace, writable=True).native
        if not flat.flags.c_contiguous or not flat.flags.writeable:
            raise invalid_argument(op, "workspace", "must be a writable, contiguous buffer in CPU "
                                                    "memory (e.g. numpy.empty(size, numpy.uint8))")
        if not common:
            flat = flat.reshape(-1).view(np.uint8)
        if flat.nbytes < size:
            raise invalid_argument(op, "workspace", f"holds {flat.nbytes} bytes; this plan needs {size}")
        if flat is not self._clear_workspace or tensors is not self._tensors:   # once per buffer: 0.8 us
            check_workspace_overlap(op, self._names, tensors, flat)
            if tensors is self._tensors:
                self._clear_workspace = flat
        return flat

    def __repr__(self) -> str:
        backend = self.backend.name if self.backend is not None else None
        return (f"<padloss Executor {self.problem.op} backend={backend!r} "
                f"workspace_size={self.workspace_size}>")


def _describe(t: Tensor) -> str:
    m = t.meta
    return f"dtype {m.dtype}, shape {m.shape}, strides {m.strides} on {t.device}"


def binder(plan: Plan) -> Callable[[tuple], Any]:
    """What makes ``plan.run``'s first argument of native buffers: the plan's own
    ``bind`` when it has one (work done once per binding, not per run), else a
    function that returns them as they are."""
    return getattr(plan, "bind", _as_they_are)


def kept_binder(plan: Plan) -> Callable[[tuple], Any]:
    """``binder`` for buffers an executor keeps across runs: the plan's ``bind_kept``
    where it has one (its kernels trust the types of what it binds, and a caller's array
    can change in place after it was validated), else ``binder``."""
    return getattr(plan, "bind_kept", None) or binder(plan)


def _as_they_are(natives: tuple) -> tuple:
    return natives


def fetch(problem: Problem, backend: Backend, key: tuple) -> Plan:
    """The plan under ``key`` (the plan-cache key of ``problem`` on ``backend``), built on a miss."""
    return plan_cache.get_or_build(key, lambda: EMPTY_PLAN if problem.is_empty else backend.compile(problem))


def make_executor(problem: Problem, names: tuple[str, ...], tensors: tuple[Tensor, ...],
                  requested_backend: str | None) -> Executor:
    """The end of phase 1 for every op: pick the backend, fetch or build the plan."""
    backend = select_backend(problem, requested_backend)
    plan = fetch(problem, backend, (problem, backend.name, backend.cache_context()))
    return Executor(problem, backend, plan, names, tensors)
