"""What a backend is: a small object that turns a Problem into a runnable Plan.

Backends never validate user input (padloss did that in phase 1) and padloss
never contains a kernel. A third-party backend subclasses :class:`Backend`
and registers an instance (or a factory) under the entry-point group
``padloss.backends``.
"""
from __future__ import annotations

from typing import Any, Protocol

from .problem import Problem


class Plan(Protocol):
    """A compiled, reusable computation for one Problem; holds no user data."""

    workspace_size: int

    def run(self, buffers: Any, workspace: Any, stream: Any) -> None:
        """Compute into the output buffer. ``buffers`` are the native views in the
        Problem's tensor order, output last; or, when the plan has a method
        ``bind(natives)``, what that returned for them (an optional hook for work
        an executor should do once per binding of buffers, not on every run)."""


class Backend:
    """Base class; subclasses set ``name``, ``priority``, ``devices`` and override
    :meth:`availability`, :meth:`supports` and :meth:`compile`."""

    name: str = ""
    priority: int = 0                     # higher wins in automatic selection
    devices: frozenset[str] = frozenset()  # device types whose data it computes on

    def availability(self) -> tuple[bool, str]:
        """(available, reason if not). Must be cheap and must not import heavy
        modules just to look (use importlib.util.find_spec / sys.modules)."""
        return True, ""

    def supports(self, problem: Problem) -> str | None:
        """None when this backend can run ``problem``, else the reason it cannot.
        A pure function of the Problem: padloss remembers the verdict."""
        raise NotImplementedError

    def compile(self, problem: Problem) -> Plan:
        raise NotImplementedError

    def cache_context(self) -> tuple:
        """Run-time settings a plan depends on (e.g. the thread count); part of
        the plan-cache key."""
        return ()

    def __repr__(self) -> str:
        return f"<padloss backend {self.name!r}>"
