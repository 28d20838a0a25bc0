"""What a backend is: a small object that turns a Problem into a runnable Plan.

Backends never validate user input (padloss did that in phase 1) and padloss
never contains a kernel. A third-party backend subclasses :class:`Backend`
and registers an instance (or a factory) under the entry-point group
``padloss.backends``.
"""
from __future__ import annotations

from typing import Any, Callable, Hashable, Iterable, Mapping, Protocol

from .problem import Problem


class Plan(Protocol):
    """A compiled, reusable computation for one Problem; holds no user data."""

    workspace_size: int

    def run(self, buffers: Any, workspace: Any, stream: Any) -> None:
        """Compute into the output buffer. ``buffers`` are the native views in the
        Problem's tensor order, output last; or, when the plan has a method
        ``bind(natives)``, what that returned for them (an optional hook for work
        an executor should do once per binding of buffers, not on every run). A plan
        with ``bind`` may also have ``bind_around(middle)``, returning a function
        ``(first, output) -> bind((first, *middle, output))`` that did the middle
        buffers' work once (a backward planned in its forward binds only its new
        gradient and output: padloss.fastpath.Prepared). A plan whose ``bind`` may hand a
        caller's array object on as it is, to a kernel that trusts its type, also has
        ``bind_kept(natives)``: the same for buffers an executor keeps across runs, sharing
        no array object with them (the caller's array may change in place later).

        A plan may also set ``context_free`` True where it runs the same under any of its
        backend's ``cache_context()`` (a serial Numba plan uses no threads): a one-shot
        call that reruns it then does not ask for the context (padloss.fastpath).

        A plan with no workspace may have ``launcher(bound)``, returning a callable of no
        arguments that does what ``run(bound, None, None)`` does, its per-run choices made
        once (None where it cannot): an executor's repeated ``run()`` of the same buffers
        calls it (padloss.executor). It may also have ``runner()``, returning a callable of
        the native buffers that does what ``run(bind(natives), None, None)`` does, in fewer
        Python calls (None where it cannot): a one-shot call's rerun of the plan calls it
        (padloss.fastpath.Ready). Where the context decides no bits, a plan may set
        ``reports_context`` True: its runner then returns the ``cache_context()`` it ran
        under (a threaded Numba kernel: the thread count), and a one-shot call compares that
        after the run instead of asking before it, replanning on its next call where the
        two differ (the call that met the change ran the plan it had, with the same bits)."""


class Backend:
    """Base class; subclasses set ``name``, ``priority``, ``devices`` and ``plans``, and
    override :meth:`availability`, and :meth:`refuses` where they refuse more than an
    op they lack."""

    name: str = ""
    priority: int = 0                     # higher wins in automatic selection
    devices: frozenset[str] = frozenset()  # device types whose data it computes on
    plans: Mapping[str | tuple[str, str], str] = {}
    """op name -> "module:function" that builds its Plan from a Problem, imported on the
    op's first compile (so a backend's import stays light); (op, numerics) -> the same,
    for a target's numerics model other than the spec's (Problem.numerics), which a
    backend without such an entry refuses."""

    availability_fixed: bool = False
    """True where :meth:`availability` answers the same for the life of the process (the
    Numba backend's: whether numba is installed, which importing the backend settles): a
    remembered choice of it then stands without asking again (padloss.dispatch). False
    where the answer can change: a device appears, a module is imported later."""

    def availability(self) -> tuple[bool, str]:
        """(available, reason if not). Must be cheap and must not import heavy
        modules just to look (use importlib.util.find_spec / sys.modules)."""
        return True, ""

    def supports(self, problem: Problem) -> str | None:
        """None when this backend can run ``problem``, else the reason it cannot: an op
        not in ``plans``, or what :meth:`refuses` says. A pure function of the Problem:
        padloss remembers the verdict."""
        if problem.op not in self.plans:
            return f"does not implement {problem.op}"
        if problem.numerics != "spec" and (problem.op, problem.numerics) not in self.plans:
            return f"does not compute {problem.op} with the {problem.numerics} numerics (docs/targets.md)"
        return self.refuses(problem)

    def refuses(self, problem: Problem) -> str | None:
        """Why this backend cannot run ``problem`` although it implements its op (the
        device, a dtype), or None; nothing by default."""
        return None

    def plan_builder(self, op: str, numerics: str = "spec") -> Callable[..., Plan]:
        """The function ``plans`` names for ``op`` (under ``(op, numerics)`` for a target's
        numerics model other than the spec's)."""
        import pkgutil  # on an op's first compile, not at import

        return pkgutil.resolve_name(self.plans[op if numerics == "spec" else (op, numerics)])

    def compile(self, problem: Problem) -> Plan:
        """The Plan of ``problem``: its op's builder, given the Problem (a backend whose
        builders take more overrides this)."""
        return self.plan_builder(problem.op, problem.numerics)(problem)

    def cache_context(self) -> Hashable:
        """Run-time settings a plan depends on (e.g. the thread count), as a hashable value
        that compares equal while they hold; part of the plan-cache key."""
        return ()

    def device_soc(self, device: str) -> str | None:
        """The SoC name of ``device`` (one of this backend's devices, e.g. "npu:0"),
        where the device is an Ascend product: its target (padloss.targets) then
        decides the call's refusals. None by default."""
        return None

    def describe(self) -> list[str]:
        """Lines ``padloss info`` prints about this backend's own state (threads,
        caches); nothing by default."""
        return []

    def yardsticks(self, inputs: tuple, out: Any) -> dict[str, Callable[[], object]]:
        """Kernels that only stream ``inputs`` (1-D float32 arrays as long as ``out``)
        into ``out`` with this backend's own loads and stores, by name: the ceilings
        ``padloss bench`` holds its ops against. None by default."""
        return {}

    def compiled_for(self, calls: Iterable[tuple[str, str]]) -> bool:
        """Whether a new process would run every (op, dtype) of ``calls`` without compiling
        first (true when nothing compiles, or nothing compiled would be kept), so that
        ``padloss bench`` knows when to compile ahead in child processes."""
        return True

    def __repr__(self) -> str:
        return f"<padloss backend {self.name!r}>"
