"""A bounded, thread-safe LRU cache of compiled plans, keyed by metadata only.

The key is (Problem, backend name, backend run-time context such as the thread
count): shapes, dtypes, strides and parameters, never data and never a user
array, so a cached plan cannot keep anything of the caller's alive. Plans are
built outside the lock (building can take seconds the first time a kernel
compiles); when two threads build the same plan, the first insert wins and both
use it. The surface mirrors ``torch.backends.cuda.cufft_plan_cache``.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable, Hashable

DEFAULT_MAX_SIZE = 256


class PlanCache:
    def __init__(self, max_size: int = DEFAULT_MAX_SIZE):
        self._lock = threading.Lock()
        self._plans: OrderedDict[Hashable, object] = OrderedDict()
        self._max_size = self._checked_size(max_size)
        self.hits = 0
        self.misses = 0
        self.generation = 0   # counts removals: a plan fetched in generation g is still held while it holds
        self._newest = None   # the key last made most recent (repeated calls skip re-ordering)

    @staticmethod
    def _checked_size(value: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"plan_cache.max_size must be an integer >= 0, got {value!r}")
        return value

    @property
    def size(self) -> int:
        """Number of plans held now."""
        return len(self._plans)

    @property
    def max_size(self) -> int:
        """Most plans held; the least recently used goes first. 0 disables caching."""
        return self._max_size

    @max_size.setter
    def max_size(self, value: int) -> None:
        value = self._checked_size(value)
        with self._lock:
            self._max_size = value
            self._evict()

    def clear(self) -> None:
        """Drop every plan and reset the hit/miss counters."""
        with self._lock:
            self._plans.clear()
            self.hits = 0
            self.misses = 0
            self.generation += 1
            self._newest = None

    def get(self, key: Hashable) -> object | None:
        """The plan under ``key`` (a hit, now the most recently used), or None
        (not counted: the caller then builds through :meth:`get_or_build`)."""
        with self._lock:
            plan = self._plans.get(key)
            if plan is not None:
                self._plans.move_to_end(key)
                self._newest = key
                self.hits += 1
            return plan

    def touch(self, key: Hashable, generation: int) -> bool:
        """Count a hit on a plan the caller fetched in ``generation`` and kept, and
        make it the most recently used; False (nothing counted) when a plan was
        removed since, as it may have been this one, or the plan was never held
        (``max_size`` 0). Cheaper than :meth:`get` when the caller has the plan
        (the one-shot fast path, padloss.fastpath.run_once).

        The newest plan (a repeated call's) is touched without the lock (docs/performance.md,
        "The newest plan touched without the lock"): it needs no re-ordering, and the two reads
        and the increment of an int attribute run no Python code and make no call, so
        CPython (3.10-3.13, with its GIL) switches threads nowhere among them: a concurrent
        removal came either before (the generation differs: the locked path says False)
        or after. Elsewhere the lock is taken by hand: a ``with`` block costs 0.2 us more a
        call (docs/performance.md, "Tiny calls and autograd")."""
        if key is self._newest and generation == self.generation:
            self.hits += 1
            return True
        lock = self._lock
        lock.acquire()
        try:
            if generation != self.generation:
                return False
            if key is not self._newest:   # else it is the most recent already
                try:
                    self._plans.move_to_end(key)
                except KeyError:
                    return False
                self._newest = key
            self.hits += 1
            return True
        finally:
            lock.release()

    def unchanged_since(self, generation: int) -> bool:
        """Whether a plan fetched in ``generation`` is still the one a lookup would find: no
        plan removed since, and plans are kept (``max_size`` not 0). Plain reads, no lock and
        no hit counted (a planned run's check: padloss.fastpath.Prepared)."""
        return generation == self.generation and self._max_size != 0

    def get_or_build(self, key: Hashable, build: Callable[[], object]) -> object:
        plan = self.get(key)
        if plan is not None:
            return plan
        with self._lock:
            self.misses += 1
        plan = build()
        with self._lock:
            if self._max_size == 0:
                return plan
            winner = self._plans.get(key)
            if winner is None:   # room first: a reader (``size``, no lock) never sees more than max_size
                self._evict(room_for=1)
                self._plans[key] = winner = plan
            else:                # another thread's build came first: its plan, now the most recent
                self._plans.move_to_end(key)
            self._newest = key
        return winner

    def _evict(self, room_for: int = 0) -> None:
        """Drop the least recently used plans until ``room_for`` more fit."""
        while len(self._plans) > self._max_size - room_for:
            self._plans.popitem(last=False)
            self.generation += 1

    def __repr__(self) -> str:
        return (f"PlanCache(size={self.size}, max_size={self.max_size}, "
                f"hits={self.hits}, misses={self.misses})")


plan_cache = PlanCache()
