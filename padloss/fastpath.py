"""The one-shot fast path: how a repeated tiny call stays at a few microseconds.

A one-shot call (``padloss.circular_pad2d_backward``, ``padloss.l1_loss_backward``)
whose arguments are plain NumPy arrays, and whose parameters are known exactly,
skips the two costly parts of phase 1 when its signature was seen before:

1. **Validation** (:class:`ValidatedCalls`). Validation is a pure function of
   metadata (dtypes, shapes, strides and the op's parameters), so a call whose
   :func:`signature_of` matches an earlier, valid one gets the same verdict: the
   Problem full validation built, kept in a :class:`Known`, found by
   :meth:`ValidatedCalls.find` (the last signature found is compared first, field
   by field: a repeated call builds and hashes no key). What depends on the
   buffers themselves, the output's writability and its overlap with the
   inputs (padloss.aliasing), is still checked on every call
   (:meth:`ValidatedCalls.check_buffers`). Anything unusual (torch tensors, lists,
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
     available now; for a settled choice, the registry's load alone, compared here
     without the call);
   - the backend's run-time context is the same (``Backend.cache_context()``,
     e.g. the Numba thread count), where the plan depends on it (not ``context_free``);
     a plan whose runner reports the context it ran under (a threaded Numba plan's kernel
     returns its thread count) is compared after its run instead, and a call that finds
     it changed leaves the next call to fetch the plan again;
   - the plan cache still holds the plan (``plan_cache.PlanCache.touch``: no
     plan removed since ``PlanCache.generation`` was read, when it was
     fetched; the touch counts as a hit and keeps the LRU order, as a lookup
     would, skipping the re-ordering for the newest key, ``PlanCache._newest``).

   Otherwise the choice and the plan are fetched again (:func:`_ready`), as
   phase 1 does it (``executor.fetch``), and kept for the next call. A run
   (:meth:`Ready.launch_bound`) takes a small workspace from the Ready's spares (those
   earlier runs gave back) instead of allocating one, and gives it back when it
   finishes; a run that finds none (the first, or another call's run is using
   it) allocates.

3. **The last call, repeated** (:class:`Lane`). Each op's public one-shot function is one
   generated Python function (the op module's def gives its signature and docstring) that
   compares its arguments with those of the last call of its form that ran twice in a row,
   and where they match (and the output passes the per-call checks in their cheap form)
   reruns that call's plan: 1 and 2 above without the memo params, the key, the Python
   calls between them. A tiny call is mostly such calls.

A :class:`Prepared` is an allocating call planned ahead (padloss.torch plans a
backward in its forward): it reruns its signature's Ready as an Executor reruns
its plan, with fewer checks than a one-shot call (it says which, and why).

Where the pieces are used: padloss.op.OpDefinition's ``one_shot_function`` (a Lane's) and
``call`` are the one-shot flow of both ops; padloss.executor builds Executors and fetches plans and imports
nothing from here.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Hashable, NamedTuple

import numpy as np

from .aliasing import check_output_overlap
from .arrays import Tensor, numpy_dtype
from .backend import Plan
from .config import current as _settings
from .dispatch import Choice, choose, registry, request
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


# What both functions below start with: the target's name, and None for a call that has no
# signature (an argument not a plain ndarray, the op's parameters not known exactly).
_ARGUMENTS = """
    if target is None:
        target = settings.target
    if params is None or type(target) is not str:
        return None
    {names}, = arrays
    if {not_plain}:
        return None"""

_SIGNATURE = """
def signature(arrays, params, target):""" + _ARGUMENTS + """
    return params, target, {metadata}
"""

# find(): the last signature found compared field by field (no key built, no hash: the dtypes'
# hash is the dearest part of one), the last array's shape first (where repeated calls of
# other sizes differ soonest), the target and the dtypes by identity (an equal one that is
# another object goes on); then the dict (``known_get``), and what it finds becomes the last.
_FIND = """
def find(arrays, params, target):""" + _ARGUMENTS + """
    p, t, {last_fields}, known = calls.last
    if params == p and target is t and {same}:
        return known
    key = params, target, {metadata}
    known = known_get(key)
    if known is not None:
        calls.last = *key, known
    return known
"""


# apart(): the output, owning its memory, shares none with an input that is another array and
# whose memory, or its base's (NumPy points every view at the array owning the memory), is an
# allocation NumPy made for another array: two allocations share nothing, and
# np.may_share_memory is the dearer test (docs/performance.md). False leaves it to that test.
# The base is asked first: a view then makes one flags object, not two.
_APART = """
def apart({names}):
    return {apart}
"""


def _apart(inputs: list[str], out: str) -> str:
    """The test of :data:`_APART` for arrays named ``inputs`` and ``out`` (an output owning its memory)."""
    tests = [f"{x} is not {out} and ((b := {x}.base) is None and {x}.flags.owndata"
             f" or type(b) is ndarray and b is not {out} and b.flags.owndata)" for x in inputs]
    return " and ".join(tests) or "True"


def _written_out(template: str, count: int, **scope) -> dict:
    """``template`` written out for ``count`` arrays and run in ``scope`` (a fixed template,
    no outside text), the way collections.namedtuple writes its methods: one tuple or one
    chain of tests with no loop (docs/performance.md, "Tiny calls and autograd")."""
    names = [f"a{i}" for i in range(count)]
    fields = [(f"{n}.dtype", f"{n}.shape", f"{n}.strides") for n in names]
    last = [(f"d{i}", f"s{i}", f"t{i}") for i in range(count)]
    same = [f"{a}.shape == {s} and {a}.dtype is {d} and {a}.strides == {t}"
            for a, (d, s, t) in reversed(list(zip(names, last)))]
    source = template.format(names=", ".join(names),
                             not_plain=" or ".join(f"type({n}) is not ndarray" for n in names),
                             metadata=", ".join(", ".join(f) for f in fields),
                             last_fields=", ".join(", ".join(f) for f in last),
                             same=" and ".join(same),
                             apart=_apart(names[:-1], names[-1]))
    scope.update(settings=_settings, ndarray=np.ndarray)
    exec(source, scope)   # noqa: S102
    return scope


def signature_of(count: int) -> Callable[[tuple, Any, Any], tuple | None]:
    """``signature(arrays, params, target)`` for ``count`` arrays: the memo key, or None
    (never remembered) when an argument is not a plain ndarray or the op's parameters are
    not known exactly (``params`` None); it holds the target's name (the call's
    ``npu_target``, else the setting's), then each array's dtype, shape and strides."""
    return _written_out(_SIGNATURE, count)["signature"]


class ValidatedCalls:
    """Signature -> Known for one op's calls of ``count`` arrays (their memo key:
    ``key``, of :func:`signature_of`); cleared when full (a cheap, safe bound).
    ``find`` looks a call's signature up, the last one found first."""

    __slots__ = ("op", "key", "_known", "last", "find", "apart")

    def __init__(self, op: str, count: int):
        self.op = op
        self.key = signature_of(count)
        self._known: dict[Hashable, Known] = {}
        # (*key, Known) of the last signature found; at first one no call matches (its params None)
        self.last = (None,) * (3 + 3 * count)
        self.find: Callable[[tuple, Any, Any], Known | None] = _written_out(
            _FIND, count, calls=self, known_get=self._known.get)["find"]
        # apart(*inputs, out): True where the output (owning its memory) shares none with any input
        self.apart: Callable[..., bool] = _written_out(_APART, count)["apart"]

    def remember(self, key: tuple | None, problem: Problem) -> Known:
        """The new entry (kept only where the signature is known exactly: ``key`` not None)."""
        known = Known(problem)
        if key is not None:
            if len(self._known) >= MAX_SIGNATURES:
                self._known.clear()
            self._known[key] = known
            self.last = *key, known
        return known

    def check_buffers(self, known: Known, buffers: tuple, names: tuple[str, ...]) -> None:
        """The per-call checks of ``buffers`` of a known signature (``known``): the output
        (last) writable and sharing no memory with an input."""
        out = buffers[-1]
        flags = out.flags
        if not flags.writeable:
            raise invalid_argument(self.op, names[-1], "is read-only; the output must be writable")
        if flags.owndata and self.apart(*buffers):
            return
        for b in buffers[:-1]:
            if np.may_share_memory(out, b):
                check_output_overlap(self.op, names, as_tensors(known.problem, buffers))   # names the input


def as_tensors(problem: Problem, buffers: tuple) -> tuple[Tensor, ...]:
    """NumPy ``buffers`` of a validated signature as Tensors (their own native views)."""
    return tuple([_make_tensor((meta, "cpu", b, b)) for meta, b in zip(problem.tensors, buffers)])


class Prepared:
    """An allocating call validated and planned ahead of its run (OpDefinition.prepare):
    ``run(first)`` runs it with a new first input (grad_output) and the other inputs it
    was prepared with, or returns None where ``first`` has other metadata than planned.

    It reruns the plan its signature last ran (``Known.ready``) as an Executor reruns its
    own, while the backend request, the registry's load and the plan cache are as they
    were then (``Ready.unchanged``): the checks a one-shot call adds (the backend
    still available, the thread count the same, the plan's hit counted) cost a tiny
    backward a tenth of its time, the caches being cold there, and decide no bits; the
    next one-shot call of the signature makes them. Otherwise, and the first time, it
    runs as a one-shot call does (:func:`run_once`). padloss.torch prepares a backward
    so in its forward (docs/performance.md, "Tiny calls and autograd"), on NumPy views of
    its own that no caller can change in place: the inputs are bound as they were validated."""

    __slots__ = ("known", "first", "first_dtype", "rest", "bound")

    def __init__(self, known: Known, inputs: tuple[np.ndarray, ...]):
        self.known = known
        first = inputs[0]
        self.first = first.dtype, first.shape, first.strides
        self.first_dtype = first.dtype
        self.rest = inputs[1:]
        self.bound = None, None   # (a Ready, its binder of first and output: Ready.bind_around)

    def run(self, first: np.ndarray) -> np.ndarray | None:
        """The new output, written (it shares no memory with any input: it is new)."""
        if type(first) is not np.ndarray or (first.dtype, first.shape, first.strides) != self.first:
            return None
        known = self.known
        ready, out = known.ready, known.new_output()
        if ready is not None and ready.unchanged(request(None)):
            bound_for, bind = self.bound
            if bound_for is not ready:
                bind = ready.bind_around(self.rest)
                self.bound = ready, bind   # one assignment: a thread reads a matching pair
            ready.launch_bound(bind(first, out))
        else:
            run_once(known, (first, *self.rest, out), None)
        return out


# ---------------------------------------------------------------- 2. the last plan


class Ready:
    """The plan a one-shot call ran, and what it depended on: the next call with
    the same signature runs it again if all of that still holds. A class with slots,
    not a NamedTuple: Python reads a slot through its inline cache, a NamedTuple's
    field through a descriptor call, and a call reads a dozen (docs/performance.md)."""

    __slots__ = ("asked", "holds", "settled", "epoch", "context_of", "context", "key", "generation", "bind",
                 "run", "plan_bind_around", "workspace_size", "spares", "launch", "ran_under")

    def __init__(self, asked: tuple, choice: Choice, context: Hashable, key: tuple, generation: int,
                 plan: Plan):
        self.asked = asked                        # request(): backend=, use_backend block, the setting
        self.holds = choice.holds                 # the choice's holds()
        self.settled = choice.settled             # holds() is the registry's load alone
        self.epoch = choice.epoch                 # the registry's load the choice was made in
        self.context = context                    # what cache_context() said when the plan was fetched
        self.key = key                            # the plan-cache key
        self.generation = generation              # plan_cache.generation before the plan was fetched
        self.bind = binder(plan)                  # the plan's binder (executor.binder) and run
        self.run = plan.run
        self.plan_bind_around = getattr(plan, "bind_around", None)   # the plan's, where it has one
        self.workspace_size = plan.workspace_size
        self.spares = Spares()                    # workspaces of finished runs, for the next
        runner = getattr(plan, "runner", None)    # launch(natives): bind and run, the plan's way if any
        runs = runner() if runner is not None else None
        self.launch = runs or self.bind_and_launch
        # what launch() returns while the context holds: the context, where the plan's runner
        # reports the one it ran under (Plan's reports_context), else None
        reports = runs is not None and getattr(plan, "reports_context", False)
        self.ran_under = context if reports else None
        # its backend's cache_context(), bound once, for the check before a run; None where
        # the plan runs the same under any, or reports the one it ran under
        self.context_of = (None if getattr(plan, "context_free", False) or reports
                           else choice.backend.cache_context)

    def current(self, asked: tuple) -> bool:
        """Whether a one-shot call asking ``asked`` (a ``request()``) may rerun this plan: the
        same request, the choice standing (for a settled one, the registry's load alone), the
        backend's context the same where the plan depends on it and does not report it (the
        caller compares ``launch``'s value with ``ran_under`` after a run where it does), the
        plan cache holding the plan (its hit counted: ``plan_cache.PlanCache.touch``)."""
        return (self.asked == asked
                and (self.epoch == registry.epoch if self.settled else self.holds())   # Choice.holds
                and (self.context_of is None or self.context_of() == self.context)
                and plan_cache.touch(self.key, self.generation))

    def unchanged(self, asked: tuple) -> bool:
        """Whether a planned run (:class:`Prepared`) may rerun this plan: the same request
        (a ``request()``), the same load of the registry, the plan cache unchanged since the
        plan was fetched (plain reads: no lock, no call into a backend)."""
        return (self.asked == asked and self.epoch == registry.epoch
                and plan_cache.unchanged_since(self.generation))

    def bind_around(self, middle: tuple[np.ndarray, ...]) -> Callable[[np.ndarray, np.ndarray], Any]:
        """``(first, output) -> bind((first, *middle, output))``: the plan's own
        ``bind_around`` where it has one (the middle buffers' work done once), else a
        call of its binder."""
        if self.plan_bind_around is not None:
            return self.plan_bind_around(middle)
        bind = self.bind
        return lambda first, out: bind((first, *middle, out))

    def bind_and_launch(self, natives: tuple) -> None:
        """Run the plan on validated NumPy arrays that are their own native views."""
        self.launch_bound(self.bind(natives))

    def launch_bound(self, args: Any) -> None:
        """Run the plan on ``args`` (its binder's, for validated NumPy arrays that are
        their own native views), with a small workspace from the spares (those earlier
        runs gave back) where it needs one."""
        size = self.workspace_size
        if not size:
            self.run(args, None, None)
        else:
            workspace = self.spares.take(size)
            self.run(args, workspace, None)
            self.spares.give(workspace)


def _ready(problem: Problem, asked: tuple) -> Ready:
    choice = choose(problem, asked)
    context = choice.backend.cache_context()
    key = (problem, choice.backend.name, context)
    generation = plan_cache.generation
    plan = fetch(problem, choice.backend, key)
    return Ready(asked, choice, context, key, generation, plan)


def run_once(known: Known, arrays: tuple[np.ndarray, ...], requested_backend: str | None) -> None:
    """Phases 1 (from the plan on) and 2 of a one-shot call on validated NumPy
    arrays, which are their own native views: an Executor's run without building
    one. The plan the last such call ran is reused while its choice stands and
    the plan cache still holds it (counted as a hit there, as a lookup would be):
    a tiny call is mostly this bookkeeping."""
    asked = request(requested_backend)
    ready = known.ready
    if ready is None or not ready.current(asked):
        ready = known.ready = _ready(known.problem, asked)
    if ready.launch(arrays) != ready.ran_under:   # it ran under another context: replan next time
        known.ready = None


# ---------------------------------------------------------------- 3. the last call, repeated

# What a Lane compares of each of an op's arguments (OpDefinition's ``roles``), against the
# last call it ran: a "buffer"'s dtype, shape and strides; a "shape"'s dtype and shape (an
# array the kernel never touches, e.g. the pad's self); a "value" (a str or an int, where the
# op's memo params found it exact) by identity, or a str by equality; and an :class:`Ints`.
BUFFER, SHAPE, VALUE = "buffer", "shape", "value"
_COMPARED = {BUFFER: ("shape", "dtype", "strides"), SHAPE: ("shape", "dtype")}   # where calls differ soonest


class Ints(NamedTuple):
    """A role: a tuple or a list of ``count`` ints (where the op's memo params found it so),
    compared as the same tuple, or as a list of as many exact ints, equal to the last call's.
    Equality alone is not enough: 3.0 and True equal ints, and validation refuses them."""

    count: int


_LANE = """
def {function}({names}, *, out, backend, npu_target):{adapt}
    name = settings.target if npu_target is None else npu_target
    if out is None:
        {allocating_fields}, t, known = allocating.record
        if name is t and {allocating_same}:
            ready = known.ready
            if ready is not None and ready.current(request(backend)):
                allocating.hits += 1
                out = known.new_output()
                if ready.launch(({buffers}, out)) != ready.ran_under:   # as run_once: replan next time
                    known.ready = None
                return out
    else:
        {given_fields}, t, known = given.record
        if name is t and {given_same}:
            flags = out.flags
            if flags.writeable and flags.owndata and {apart}:
                ready = known.ready
                if ready is not None and ready.current(request(backend)):
                    given.hits += 1
                    if ready.launch(({buffers}, out)) != ready.ran_under:   # as run_once
                        known.ready = None
                    return out
    return call(({names},), ({buffers},), params_of({names}), out, backend, npu_target)


def ran(form, known, before, args, out, npu_target):
    hits = form.hits
    if known is before and hits == form.seen:
        {names}, = args
        if {exact}:
            name = settings.target if npu_target is None else npu_target
            if out is None:
                allocating.record = {allocating_record}, name, known
            else:
                given.record = {given_record}, name, known
    form.seen = hits
"""

# The one-shot function's keyword-only parameters, in every op's signature.
KEYWORDS = ("out", "backend", "npu_target")
# The names the lane's own code uses: no parameter of an op may take one of them.
_LANE_NAMES = {"name", "t", "known", "ready", "flags", "b", "settings", "ndarray", "request", "call",
               "params_of", "given", "allocating", "adapt", "hits", "form", "args", "before"}


class Form:
    """What a :class:`Lane` keeps of one form of call (given its output, or allocating it):
    the ``record`` of the call it repeats (one tuple, replaced whole, so a thread reads a
    consistent one), its ``hits``, and the hits there were at the last call that went the
    long way (``seen``: ``Lane.ran``). The counts steer only when a call is recorded: one lost
    between threads (``+=`` is not atomic) delays a record, it never makes a wrong one."""

    __slots__ = ("record", "hits", "seen")

    def __init__(self, fields: int):
        self.record = (None,) * (fields + 2)   # at first no call matches: a target's name is never None
        self.hits = self.seen = 0


class Lane:
    """An op's last one-shot call, repeated in one Python frame (docs/performance.md, "Tiny
    calls and autograd"): ``one_shot`` is the op's public one-shot function, written here
    with the signature and the docstring of ``public`` (OpDefinition.one_shot_function), the
    one frame a call makes before its kernel runs. Where its arguments are what the call its
    form repeats (:class:`Form`) ran with (:data:`BUFFER`, :data:`SHAPE`, :data:`VALUE`,
    :class:`Ints`), the output's buffers pass the per-call checks (``ValidatedCalls.apart``'s
    test; any doubt goes the long way) and the plan that call ran is ``Ready.current``, it
    reruns that plan; anything else goes to ``call`` (OpDefinition.call), which tells
    ``ran(form, known, before, args, out, npu_target)`` what it ran (``known``, found when
    ``before`` was the last signature found). ``adapt``, where an op has one, first turns a
    first argument that is no ndarray into the one the call stands for (called with the
    input buffers).

    The lane repeats a call from the time its signature ran the long way twice in a row with
    no call of its form served by the lane in between. Calls that alternate between signatures
    then keep the record the lane serves (one of two alternating) or none: a new record on
    every call would cost more than the lane saves."""

    __slots__ = ("given", "allocating", "one_shot", "ran")

    def __init__(self, public: Callable, roles: tuple[str | Ints, ...], call: Callable, params_of: Callable,
                 adapt: Callable | None = None):
        parameters = inspect.signature(public).parameters.values()
        names = [p.name for p in parameters if p.kind == p.POSITIONAL_OR_KEYWORD]
        keywords = tuple(p.name for p in parameters if p.kind == p.KEYWORD_ONLY)
        if keywords != KEYWORDS or len(names) != len(roles) or not _LANE_NAMES.isdisjoint(names):
            raise TypeError(f"{public.__name__}{inspect.signature(public)}: a one-shot function takes one "
                            f"parameter a role ({len(roles)}), then keyword-only {', '.join(KEYWORDS)}, "
                            f"and none named {sorted(_LANE_NAMES)}")
        buffers = [n for n, role in zip(names, roles) if role == BUFFER]
        values = [(n, role) for n, role in zip(names, roles) if role == VALUE or isinstance(role, Ints)]

        def compared(arrays: list[tuple[str, str]]) -> tuple[list[str], list[str], list[str]]:
            # (the record's expressions, their names in the lane, the tests): the last array
            # first, the values last (calls of other sizes differ soonest in the arrays)
            exprs, fields, tests = [], [], []
            for n, role in reversed(arrays):
                compared_fields = _COMPARED[role]
                exprs += [f"{n}.{f}" for f in compared_fields]
                fields += [f"{n}_{f}" for f in compared_fields]
                tests.append(f"type({n}) is ndarray and " + " and ".join(
                    f"{n}.{f} {'is' if f == 'dtype' else '=='} {n}_{f}" for f in compared_fields))
            for v, role in values:
                if role == VALUE:
                    exprs.append(v)
                    fields.append(f"{v}_")
                    tests.append(f"({v} is {v}_ or type({v}) is str and {v} == {v}_)")
                else:   # Ints: the tuple itself (a list's as a tuple no caller holds), and as a list
                    exprs += [f"{v} if type({v}) is tuple else tuple({v})", f"list({v})"]
                    fields += [f"{v}_", f"{v}_list"]
                    tests.append(f"({v} is {v}_ or type({v}) is list and {v} == {v}_list and "
                                 + " and ".join(f"type({v}[{i}]) is int" for i in range(role.count)) + ")")
            return exprs, fields, tests

        arrays = [(n, role) for n, role in zip(names, roles) if role in _COMPARED]
        allocating = compared(arrays)
        given = compared(arrays + [("out", BUFFER)])
        self.allocating, self.given = Form(len(allocating[1])), Form(len(given[1]))
        first = names[0]
        adapted = f"\n    if type({first}) is not ndarray:\n        {first} = adapt({', '.join(buffers)})"
        source = _LANE.format(
            function=public.__name__, adapt=adapted if adapt is not None else "",
            names=", ".join(names), buffers=", ".join(buffers),
            allocating_fields=", ".join(allocating[1]), allocating_same=" and ".join(allocating[2]),
            given_fields=", ".join(given[1]), given_same=" and ".join(given[2]),
            apart=_apart(buffers, "out"),
            exact=" and ".join(f"type({v}) in (str, int)" for v, role in values if role == VALUE) or "True",
            allocating_record=", ".join(allocating[0]), given_record=", ".join(given[0]))
        scope = dict(settings=_settings, ndarray=np.ndarray, request=request, call=call,
                     params_of=params_of, adapt=adapt, given=self.given, allocating=self.allocating)
        exec(compile(source, f"<padloss.fastpath lane of {public.__name__}>", "exec"), scope)   # noqa: S102
        one_shot = scope[public.__name__]
        for attribute in ("__module__", "__qualname__", "__doc__", "__annotations__", "__defaults__",
                          "__kwdefaults__"):
            setattr(one_shot, attribute, getattr(public, attribute))
        self.one_shot = one_shot
        self.ran = scope["ran"]
