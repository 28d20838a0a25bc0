"""Every Numba internal padloss relies on, and the Numba releases it was tested with.

Numba's public API has no hook for what these do: a cache locator of padloss's own
(freshness keyed on all of its sources), locked cache files and a cache that never
fails a call, the address of a compiled body for the entry points that call it, an
entry point's compiled wrapper called without Numba's dispatch, a lock-free read of
the thread count, bodies compiled with their array arguments ``noalias``, no SSA pass
and no rewrites after typing, and an inliner that copies and translates each callee
less often.
Each name below is private to Numba and may move in any release, so padloss
declares Numba below the first minor it has not tested (pyproject.toml) and this
module refuses any release outside that range when it is imported, naming both.
tests/test_numba_internals.py checks that each one still is what padloss needs.
"""
from __future__ import annotations

import numba

TESTED = ((0, 59), (0, 69))
"""The lowest Numba release tested, and the first minor not tested (as in pyproject.toml)."""


def _release(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def check_version(version: str = numba.__version__) -> None:
    """Raise ImportError, naming the range, for a Numba outside :data:`TESTED`."""
    low, high = TESTED
    if not low <= _release(version) < high:
        raise ImportError(
            f"padloss's Numba backend uses Numba internals and is tested with numba>={low[0]}.{low[1]},"
            f"<{high[0]}.{high[1]}; this is numba {version}. Install a tested one: "
            f"pip install 'numba>={low[0]}.{low[1]},<{high[0]}.{high[1]}'")


check_version()

import contextlib  # noqa: E402
import copy  # noqa: E402

from numba.core import caching, inline_closurecall, ir  # noqa: E402
from numba.core.compiler import Compiler  # noqa: E402
from numba.core.compiler_lock import global_compiler_lock  # noqa: E402
from numba.core.typed_passes import NopythonRewrites  # noqa: E402
from numba.np.ufunc import parallel  # noqa: E402

CacheLocator = caching._CacheLocator          # the base of padloss's cache locator
IndexDataCacheFile = caching.IndexDataCacheFile   # one kernel's index and data files
FunctionCache = caching.FunctionCache         # one kernel's cache, its load and save of overloads


def add_cache_locator(locator: type) -> None:
    """Put ``locator`` first in the list Numba asks for each cached function (idempotent)."""
    classes = caching.CacheImpl._locator_classes
    if locator not in classes:
        classes.insert(0, locator)


def adopt_cache(dispatcher, cache_class: type, file_class: type | None) -> None:
    """Make ``dispatcher``'s disk cache (a FunctionCache, if it has one) an instance of
    ``cache_class``, and its index and data files one of ``file_class`` (subclasses
    that change no state, so swapping the class of the live objects is enough)."""
    cache = disk_cache_of(dispatcher)
    if cache is not None:
        cache.__class__ = cache_class
        if file_class is not None:
            cache._cache_file.__class__ = file_class


def disk_cache_of(dispatcher):
    """``dispatcher``'s disk cache (a FunctionCache), or None where it has none."""
    return dispatcher._cache if isinstance(dispatcher._cache, FunctionCache) else None


def body_address(dispatcher, signature: tuple) -> int:
    """The machine-code address of ``dispatcher``'s compiled overload for ``signature``."""
    result = dispatcher.overloads[tuple(signature)]
    return result.library.get_pointer_to_function(result.fndesc.llvm_func_name)


def compiled_wrapper(dispatcher):
    """The Python-callable wrapper of ``dispatcher``'s one compiled overload (an entry point
    compiled for one signature, compiling on call switched off): what the dispatcher calls
    after typing every argument to pick an overload, 0.2-0.3 us of a tiny call. It checks
    its arguments no further than each array's item size (a wrong rank overruns its
    argument structures): only arrays of that signature's types may reach it, or, where it
    is typed for convert.STORAGE_VIEW's integers, the float16, bfloat16 or bool arrays whose
    bits those hold (read as they are: no view to make). An array of a lower rank than typed
    fills in its data pointer, size and item size, and its shape and strides one after the
    other in the slots of the first dims, leaving the rest unset: what indirect.flat reads
    of it is right, nothing else is (l1_plan's buffers as they are, l1_plan.AS_IS_RANK)."""
    (signature,) = dispatcher.signatures
    return dispatcher.overloads[tuple(signature)].entry_point


def caller_thread_count():
    """Numba's intrinsic that reads the calling thread's thread count in compiled code (valid
    once the pool has started). numba.get_num_threads() in compiled code calls through a
    ctypes pointer, which keeps a function off the disk cache; this one links by symbol."""
    return parallel._iget_num_threads


def thread_count_reader():
    """Numba's lock-free reader of the calling thread's thread count, valid once the
    pool has started: numba.get_num_threads() takes two locks a call."""
    return parallel._get_num_threads


class BodyCompiler(Compiler):
    """Numba's default pipelines as padloss's kernel bodies compile:

    - every array argument marked ``noalias`` (``Flags.noalias``, which has no decorator
      option): LLVM then vectorises a body's loops without a run-time overlap check and a
      scalar copy of each (docs/performance.md, "noalias"). The ops guarantee what it
      promises: an output never shares memory with an input (padloss.aliasing), a
      workspace never with either (padloss.executor), and plan-owned arrays with nothing;
      inputs may overlap one another, as noalias constrains only memory written through a
      pointer;
    - no SSA reconstruction (``Flags.enable_ssa`` off, as Numba's inliner already turns it
      off for every callee it inlines): the same machine code (compared: one L1 mix's
      NaN test of a widened value moved to float64) in 0.85-0.88x the time
      (docs/performance.md, "Compiled bodies and entry points"). Without SSA a variable has
      one type for all its assignments, and a type refined on a variable set in a tuple
      assignment flows back to its source (scalars.apart keeps one apart where that would
      widen it); the bit-exact tests watch for a body whose arithmetic that changes;
    - no rewrites after type inference (``NopythonRewrites``: fusing array expressions, of
      which a body, all loops over elements, has none): the same machine code (compared: every
      body and entry of both ops), compiled in less time (docs/performance.md)."""

    def define_pipelines(self):
        self.state.flags.noalias = True
        self.state.flags.enable_ssa = False
        pipelines = super().define_pipelines()
        for pipeline in pipelines:   # a PassManager's list of (pass class, description)
            pipeline.passes = [(p, what) for p, what in pipeline.passes if p is not NopythonRewrites]
        return pipelines


# ------------------------------------------------------------ the inliner's copies

_Scope, _Block, _InlineWorker = ir.Scope, ir.Block, inline_closurecall.InlineWorker
_inline_ir, _inline_function = _InlineWorker.inline_ir, _InlineWorker.inline_function
_scope_copies: dict[int, ir.Scope] | None = None   # id(scope) -> its copy, in one inline_ir call
_block_copies: set[int] | None = None   # ids of the blocks one inline_ir call copied
_callee_irs: dict[tuple[int, int, int], tuple] = {}   # inside the block: see _inline_function_translated_once


def _state_copied(obj, memo: dict):
    """A plain deep copy of an IR object that keeps its state in ``__dict__`` (Scope, Block),
    put in the memo first: its parts point back to it."""
    cls = type(obj)
    found = memo[id(obj)] = cls.__new__(cls)
    found.__dict__.update(copy.deepcopy(obj.__dict__, memo))
    return found


def _scope_deepcopy(scope: ir.Scope, memo: dict) -> ir.Scope:
    """``copy.deepcopy`` of a Scope: inside an ``inline_ir`` call the first block's copy of
    it, for every block; elsewhere (and the first time) a plain deep copy of its state."""
    found = None if _scope_copies is None else _scope_copies.get(id(scope))
    if found is not None:
        memo[id(scope)] = found
        return found
    found = _state_copied(scope, memo)
    if _scope_copies is not None:
        _scope_copies[id(scope)] = found
    return found


def _block_deepcopy(block: ir.Block, memo: dict) -> ir.Block:
    """``copy.deepcopy`` of a Block: inside an ``inline_ir`` call, a block that call copied
    is returned as it is (the call copies its copy of the callee again, the "original" it
    returns, which both of Numba's callers drop); any other, a plain deep copy of its state."""
    if _block_copies is not None and id(block) in _block_copies:
        return block
    found = _state_copied(block, memo)
    if _block_copies is not None:
        _block_copies.add(id(found))
    return found


def _inline_ir_copying_less(self, *args, **kwargs):
    global _scope_copies, _block_copies
    outer, _scope_copies, _block_copies = (_scope_copies, _block_copies), {}, set()
    try:
        return _inline_ir(self, *args, **kwargs)
    finally:
        _scope_copies, _block_copies = outer


def _inline_function_translated_once(self, caller_ir, block, i, function, arg_typs=None):
    """``InlineWorker.inline_function`` with the callee's untyped IR made once per function
    in one compile (its flags and locals), not once per call site: Numba translated the
    callee's bytecode and ran its untyped passes (inlining its own callees, recursively)
    for every call. ``inline_ir`` copies that IR before changing anything; each later use
    gets a new FunctionIdentity (``derive``: a new unique name), as a fresh translation
    has, so the copies' variables are renamed apart as before."""
    key = (id(function), id(self.flags), id(self.locals))
    found = _callee_irs.get(key)
    if found is None:
        callee_ir = self.run_untyped_passes(function)
        _callee_irs[key] = (function, self.flags, self.locals, callee_ir)   # holds them: ids stay theirs
    else:
        self.flags.enable_ssa = False   # as run_untyped_passes leaves the shared flags
        callee_ir = copy.copy(found[3])
        callee_ir.func_id = callee_ir.func_id.derive()
    return self.inline_ir(caller_ir, block, i, callee_ir, function.__code__.co_freevars, arg_typs=arg_typs)


@contextlib.contextmanager
def inliner_copies_less():
    """Compile inside this block (under Numba's compiler lock, which it holds) with an
    inliner that makes fewer copies, the same machine code (docs/performance.md,
    "Compiled bodies and entry points"):

    - a callee's scope copied once per copy of the callee: Numba's
      ``InlineWorker.inline_ir`` deep-copies the callee's blocks one at a time, each with
      the scope all of them share, so a callee of B blocks and V variables cost B x V
      variable copies (and the garbage collector's passes over them), which was most of
      the time a kernel body with large inlined helpers took to compile; here the blocks
      of one copy share one copy of the scope, as the blocks of the callee shared it;
    - a callee's blocks copied once: ``inline_ir`` then copies its copy again, into the
      "original" it returns, which both its callers drop (``_block_deepcopy`` hands the
      blocks it made back as they are);
    - a callee's untyped IR made once (``_inline_function_translated_once``).

    Outside the block Numba is as it was: the user's own compiles never see it."""
    with global_compiler_lock:
        if _InlineWorker.inline_ir is _inline_ir_copying_less:   # already inside the block
            yield
            return
        _Scope.__deepcopy__ = _scope_deepcopy
        _Block.__deepcopy__ = _block_deepcopy
        _InlineWorker.inline_ir = _inline_ir_copying_less
        _InlineWorker.inline_function = _inline_function_translated_once
        try:
            yield
        finally:
            del _Scope.__deepcopy__
            del _Block.__deepcopy__
            _InlineWorker.inline_ir = _inline_ir
            _InlineWorker.inline_function = _inline_function
            _callee_irs.clear()
