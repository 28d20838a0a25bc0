"""Which backend runs a Problem: the registry and the selection order.

Built-in backends are listed in a table and imported only when first needed
(one that fails to import is a bug in padloss, and raises); third parties
register through the entry-point group ``padloss.backends`` (a plugin that fails
to load becomes a warning, never a broken import). The
choice, first match wins:

1. the ``backend=`` argument of the call,
2. an enclosing ``padloss.use_backend(name)`` block (a context variable, so
   it is per thread and per asyncio task),
3. the ``backend`` setting (``padloss.config.set(backend=...)``, or the
   ``PADLOSS_BACKEND`` environment variable as read at import),
4. automatic: backends that compute where the data lives, highest priority
   first, the first one available that supports the Problem.

An explicit choice (1-3) that is unknown, unavailable or unsuitable is an
error naming the reason; it never falls back silently.

A choice is remembered per (Problem, request, block, setting): ``supports``
is a pure function of the Problem, so only availability, which can change
(a device appears, a module gets imported), is asked again on later calls,
of the chosen backend and of every one skipped for being unavailable; a choice
with none skipped of a backend whose availability is fixed
(``Backend.availability_fixed``) asks nothing again.
"""
from __future__ import annotations

import contextlib
import contextvars
import importlib
import importlib.metadata
import threading
import warnings
from typing import Iterator, NamedTuple

from .backend import Backend
from .config import current as _settings
from .errors import BackendError, invalid_argument
from .problem import Problem

ENTRY_POINT_GROUP = "padloss.backends"
MAX_CHOICES = 1024   # remembered selections; all are forgotten when full (cheap, and rare)

# name -> (module, attribute): imported on first use, in this order.
BUILTIN_BACKENDS: dict[str, tuple[str, str]] = {
    "numba": ("padloss_numba", "backend"),
    "ascend": ("padloss_ascend", "backend"),
    "torch": ("padloss_torch", "backend"),
}


class BackendInfo(NamedTuple):
    name: str
    available: bool
    reason: str        # why not, when unavailable
    priority: int
    devices: tuple[str, ...]


def _instantiate(obj: object) -> Backend:
    backend = obj() if isinstance(obj, type) or (callable(obj) and not isinstance(obj, Backend)) else obj
    if not isinstance(backend, Backend):
        raise TypeError(f"expected a padloss.Backend, got {type(backend).__name__}")
    return backend


class Registry:
    """All known backends by name, loaded once, lazily and thread-safely."""

    def __init__(self):
        self._lock = threading.Lock()
        self._backends: dict[str, Backend] | None = None
        self._ordered: list[Backend] = []
        self.choices: dict[tuple, Choice] = {}   # choose()'s memory, emptied on reload
        self.epoch = 0                           # counts reloads

    def backends(self) -> dict[str, Backend]:
        if self._backends is None:
            with self._lock:
                if self._backends is None:
                    loaded = self._load()
                    self._ordered = sorted(loaded.values(), key=lambda b: -b.priority)
                    self._backends = loaded
        return self._backends

    def _load(self) -> dict[str, Backend]:
        found: dict[str, Backend] = {}
        for name, (module, attr) in BUILTIN_BACKENDS.items():
            # No try: a built-in imports no optional dependency (each reports a missing
            # one through availability()), so an import error here is a bug to see.
            found[name] = _instantiate(getattr(importlib.import_module(module), attr))
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            try:
                backend = _instantiate(ep.load())
            except Exception as exc:
                warnings.warn(f"padloss: backend plugin {ep.name!r} ({ep.value}) failed to load "
                              f"and is ignored: {exc!r}", RuntimeWarning, stacklevel=2)
                continue
            if backend.name in found:
                warnings.warn(f"padloss: backend plugin {ep.name!r} uses the taken name "
                              f"{backend.name!r} and is ignored", RuntimeWarning, stacklevel=2)
                continue
            found[backend.name] = backend
        return found

    def reload(self) -> None:
        """Forget the loaded backends (after installing a plugin, or in tests)."""
        with self._lock:
            self._backends = None
            self.choices = {}
            self.epoch += 1

    def by_priority(self) -> list[Backend]:
        """Backends, highest priority first (ties keep registration order)."""
        self.backends()
        return self._ordered


registry = Registry()
_chosen: contextvars.ContextVar[str | None] = contextvars.ContextVar("padloss_backend", default=None)


@contextlib.contextmanager
def use_backend(name: str) -> Iterator[None]:
    """Run the calls inside the block on backend ``name`` (unless a call names its own)."""
    if not isinstance(name, str):
        raise TypeError(f"use_backend expects a backend name, got {type(name).__name__}")
    token = _chosen.set(name)
    try:
        yield
    finally:
        _chosen.reset(token)


def available_backends() -> list[BackendInfo]:
    """Every known backend, highest priority first, with why it is unavailable."""
    infos = []
    for b in registry.by_priority():
        ok, reason = b.availability()
        infos.append(BackendInfo(b.name, ok, "" if ok else reason, b.priority, tuple(sorted(b.devices))))
    return infos


def would_compile(calls: list[tuple[str, str]]) -> bool:
    """Whether an available backend would compile kernels for some of ``calls`` ((op,
    dtype) pairs; ``Backend.compiled_for``): a first run of these sources, whose
    compiles the command line shares out among child processes."""
    return not all(b.compiled_for(calls) for b in registry.by_priority() if b.availability()[0])


class Choice(NamedTuple):
    """A selection, remembered: it stands while :meth:`holds` says so."""

    backend: Backend
    skipped: tuple[Backend, ...]   # passed over for being unavailable: asked again each call
    epoch: int                     # the registry's load it was made in
    settled: bool                  # nothing to ask again: none skipped, the backend's availability fixed

    def holds(self) -> bool:
        """Same registry, the backend still available, none of the skipped ones now
        (asked by :func:`choose`, and by the one-shot fast path, padloss.fastpath,
        before it reruns a plan); for a settled choice, the same registry alone."""
        return self.epoch == registry.epoch and (self.settled or (
            self.backend.availability()[0]
            and not (self.skipped and any([b.availability()[0] for b in self.skipped]))))


def request(requested: str | None) -> tuple:
    """What decides the choice besides the Problem: (backend= argument, the
    enclosing use_backend block, the backend setting)."""
    return requested, _chosen.get(), _settings.backend


def select_backend(problem: Problem, requested: str | None = None) -> Backend:
    """The backend that will run ``problem`` under the selection order above."""
    return choose(problem, request(requested)).backend


def choose(problem: Problem, asked: tuple) -> Choice:
    """The Choice for ``problem`` under ``asked`` (a :func:`request`)."""
    key = (problem, asked)
    known = registry.choices.get(key)
    if known is not None and known.holds():
        return known
    requested, block, setting = asked
    if requested is not None:
        backend, skipped = _explicit(problem, requested, "the backend= argument"), ()
    elif block is not None:
        backend, skipped = _explicit(problem, block, "padloss.use_backend()"), ()
    elif setting:
        origin = "the backend setting (padloss.config, PADLOSS_BACKEND)"
        backend, skipped = _explicit(problem, setting, origin), ()
    else:
        backend, skipped = _automatic(problem)
    choice = Choice(backend, skipped, registry.epoch, not skipped and backend.availability_fixed)
    choices = registry.choices
    if len(choices) >= MAX_CHOICES:
        choices.clear()
    choices[key] = choice
    return choice


def _explicit(problem: Problem, name: str, origin: str) -> Backend:
    backends = registry.backends()
    backend = backends.get(name)
    if backend is None:
        raise invalid_argument(problem.op, "backend", f"unknown backend {name!r} (from {origin}); "
                                                      f"known: {', '.join(sorted(backends))}")
    ok, reason = backend.availability()
    if not ok:
        raise BackendError(f"{problem.op}: backend {name!r} (from {origin}) is unavailable: {reason}",
                           argument="backend")
    why_not = backend.supports(problem)
    if why_not is not None:
        raise invalid_argument(problem.op, "backend",
                               f"backend {name!r} (from {origin}) cannot run this call: {why_not}")
    return backend


def _automatic(problem: Problem) -> tuple[Backend, tuple[Backend, ...]]:
    """The first backend that runs ``problem``, and those skipped as unavailable."""
    refusals = []
    unavailable = []
    for backend in registry.by_priority():
        if problem.device_type not in backend.devices:
            continue
        ok, reason = backend.availability()
        if not ok:
            unavailable.append(backend)
        why_not = reason if not ok else backend.supports(problem)
        if why_not is None:
            return backend, tuple(unavailable)
        refusals.append(f"{backend.name}: {why_not}")
    detail = "; ".join(refusals) if refusals else "no backend computes on this device"
    raise BackendError(f"{problem.op}: no backend can run this call on device "
                       f"{problem.device!r} ({detail})", argument="backend")
