"""The canaries of padloss_numba.numba_internals: each Numba internal padloss relies on
is still there and still does what padloss needs, and Numba releases outside the
tested range are refused by name."""
from __future__ import annotations

import os

import numpy as np
import pytest

from padloss_numba import numba_internals


def kernels() -> list:
    """One of each kind of compiled kernel: bodies (L1's streamed or not), the pad's
    streamed rows, serial and parallel entries, the ceiling stream (test_engine's list)."""
    from test_engine import _kernels

    return _kernels()


@pytest.mark.parametrize("version", ["0.58.1", "0.69.0", "0.70.0rc1", "1.0.0"])
def test_an_untested_numba_is_refused_naming_the_range(version):
    with pytest.raises(ImportError, match=rf"numba>=0\.59,<0\.69; this is numba {version}"):
        numba_internals.check_version(version)


@pytest.mark.parametrize("version", ["0.59.0", "0.59.1", "0.61.2", "0.68.1", "0.68.0rc1"])
def test_the_tested_releases_pass(version):
    numba_internals.check_version(version)


def test_the_tested_range_is_the_declared_one():
    """pyproject.toml's numba range and numba_internals.TESTED say the same."""
    import re
    from pathlib import Path

    pyproject = (Path(numba_internals.__file__).parents[2] / "pyproject.toml").read_text()
    (low, high), = re.findall(r'"numba>=(\d+\.\d+),<(\d+\.\d+)"', pyproject)
    assert numba_internals.TESTED == (tuple(map(int, low.split("."))), tuple(map(int, high.split("."))))


def test_body_address_finds_each_compiled_overload():
    """Entry points call bodies at this address (every kernel test runs through it): one
    address per overload, stable, and a signature never compiled is an error."""
    import numba

    add = numba.njit(lambda a, b: a + b)
    add(1.0, 2.0), add(1, 2)
    floats, ints = (numba.float64, numba.float64), (numba.int64, numba.int64)
    address = numba_internals.body_address(add, floats)
    assert isinstance(address, int) and address != 0
    assert numba_internals.body_address(add, floats) == address != numba_internals.body_address(add, ints)
    with pytest.raises(KeyError):
        numba_internals.body_address(add, (numba.float32, numba.float32))


def test_a_compiled_wrapper_computes_as_its_dispatcher_and_plans_call_it():
    """Plans call each kernel's one compiled overload through its wrapper, skipping Numba's
    dispatch (launch.caller): it computes what a call of the dispatcher does, an entry of
    two signatures is refused, and a serial plan's call is that wrapper. If Numba moves
    the overloads or their entry points, this fails first."""
    import numba

    import padloss
    from padloss_numba import launch

    def doubled(a, out):
        for i in range(a.size):
            out[i] = a[i] + a[i]

    kernel = numba.njit(doubled)
    kernel.compile((numba.float64[::1], numba.float64[::1]))
    kernel.disable_compile()
    call = numba_internals.compiled_wrapper(kernel)
    a, out, expected = np.arange(5.0), np.zeros(5), np.zeros(5)
    call(a, out)
    kernel(a, expected)
    assert call is not kernel and out.tolist() == expected.tolist() == [0.0, 2.0, 4.0, 6.0, 8.0]
    kernel2 = numba.njit(doubled)
    kernel2(a, out)
    kernel2(np.arange(5), np.zeros(5, np.int64))   # a second overload
    with pytest.raises(ValueError):
        numba_internals.compiled_wrapper(kernel2)
    go = np.zeros((1, 1, 6, 6), np.float32)
    plan = padloss.circular_pad2d_backward_get_workspace_size(go, go[..., 1:-1, 1:-1].copy(), (1, 1, 1, 1),
                                                              np.zeros((1, 1, 4, 4), np.float32))[1]._plan
    assert plan._call is numba_internals.compiled_wrapper(plan._kernel)
    assert launch.caller(plan._kernel, False) is plan._call


def test_a_compiled_wrapper_reads_any_array_of_its_item_size_as_its_type():
    """Plans hand float16, bfloat16 and bool arrays to wrappers typed for uint16 and uint8
    as they are, with no view made a call (docs/performance.md, "Tiny calls and autograd"):
    the wrapper checks an array's item size, not its dtype, and reads its bits. If Numba
    starts checking the dtype, this fails first (and every 16-bit and bool kernel test after it)."""
    import ml_dtypes
    import numba

    def copy(a, out):
        for i in range(a.size):
            out[i] = a[i]

    for stored, given in ((np.uint16, np.float16), (np.uint16, ml_dtypes.bfloat16), (np.uint8, np.bool_)):
        kernel = numba.njit(copy)
        kernel.compile((numba.from_dtype(np.dtype(stored))[::1],) * 2)
        kernel.disable_compile()
        call = numba_internals.compiled_wrapper(kernel)
        a = np.array([1.5, -0.0, 3.0], given)   # bool: True, False, True
        out = np.zeros(3, given)
        call(a, out)
        assert out.view(stored).tolist() == a.view(stored).tolist()


def test_a_compiled_wrapper_takes_an_array_of_a_lower_rank_than_typed_by_its_data_and_size():
    """L1 plans hand C-contiguous buffers of any rank up to l1_plan.AS_IS_RANK, as they are,
    to a wrapper typed for that rank, whose entry reads only their data, size and item size
    (indirect.flat): the wrapper fills those in from the array and checks no rank. If Numba
    starts checking the rank, or sizes an array by its typed shape, this fails first (and
    the L1 tests after it)."""
    import numba

    from padloss_numba.indirect import flat
    from padloss_numba.l1_plan import AS_IS_RANK

    def weighted(a, out):
        a, out = flat(a), flat(out)
        for i in range(a.size):
            out[i] = a[i] * (i + 1)

    typed = numba.types.Array(numba.float64, AS_IS_RANK, "C")
    kernel = numba.njit(_nrt=False)(weighted)
    kernel.compile((typed, typed))
    kernel.disable_compile()
    call = numba_internals.compiled_wrapper(kernel)
    for shape in [(), (5,), (2, 3), (2, 1, 3), (2, 2, 1, 3)][:AS_IS_RANK + 1]:
        a = np.arange(1.0, 1.0 + np.prod(shape)).reshape(shape)
        out = np.zeros(shape)
        call(a, out)
        assert out.tolist() == (a * np.arange(1, a.size + 1).reshape(shape)).tolist(), shape


def test_the_private_thread_count_readers_exist_and_agree():
    """The Numba backend reads the thread count through Numba's private lock-free reader
    (0.14 us, against 0.75 us for numba.get_num_threads()), and its threaded kernels return
    the count they ran under through Numba's private intrinsic (one that caches on disk;
    docs/performance.md, "Thread count"). If Numba renames either, this fails, naming it."""
    import threading

    import numba
    from numba.np.ufunc import parallel

    import padloss
    from padloss_numba import numba_backend

    assert hasattr(parallel, "_get_num_threads"), "numba.np.ufunc.parallel._get_num_threads is gone"
    assert hasattr(parallel, "_iget_num_threads"), "numba.np.ufunc.parallel._iget_num_threads is gone"
    assert numba_internals.thread_count_reader() is parallel._get_num_threads
    assert numba_internals.caller_thread_count() is parallel._iget_num_threads
    assert numba_backend.thread_count is parallel._get_num_threads
    rng = np.random.default_rng(0)
    go, x = rng.standard_normal((2, 3, 130, 130)).astype(np.float32), np.empty((2, 3, 128, 128), np.float32)
    plan = padloss.circular_pad2d_backward_get_workspace_size(go, x, (1, 1, 1, 1), x)[1]._plan
    assert plan.reports_context   # a threaded plan: its kernel returns the count it ran under
    run = plan.runner()
    seen = []

    def in_a_thread():
        numba.set_num_threads(1)     # per thread, as Numba's own readers see it
        seen.append((numba_backend.thread_count(), run((go, x)), numba.get_num_threads()))

    worker = threading.Thread(target=in_a_thread)
    worker.start()
    worker.join()
    assert seen == [(1, 1, 1)]
    assert numba_backend.thread_count() == run((go, x)) == numba.get_num_threads()



def test_the_body_pipeline_marks_every_array_pointer_noalias():
    """numba_internals.BodyCompiler sets Numba's ``Flags.noalias`` from a pipeline class: this fails
    when Numba drops or renames the flag (the bodies would quietly keep their run-time
    alias checks, 1.05-1.2x slower) or stops passing arrays as pointer arguments."""
    import re

    from numba import njit

    from padloss_numba.numba_internals import BodyCompiler

    def copy(src, dst):
        for i in range(dst.shape[0]):
            dst[i] = src[i]

    def pointer_arguments(dispatcher):
        dispatcher(np.arange(4.0), np.empty(4))
        (signature,) = dispatcher.signatures
        (define,) = [line for line in dispatcher.inspect_llvm(signature).splitlines()
                     if line.startswith("define") and "%retptr" in line]
        # opaque pointers (LLVM 15 on, "ptr noalias %arg.x") or typed ones ("double* noalias %arg.x")
        return re.findall(r"(?:\bptr|\*) ([^%,]*)%arg\.", define)

    marked = pointer_arguments(njit(pipeline_class=BodyCompiler)(copy))
    assert len(marked) >= 4 and all("noalias" in attributes for attributes in marked), marked
    assert not any("noalias" in attributes for attributes in pointer_arguments(njit(copy)))


def _nopython_passes(dispatcher) -> list[str]:
    """The passes (numbered names) Numba's nopython pipeline ran for ``dispatcher``'s one
    compiled signature."""
    (signature,) = dispatcher.signatures
    return list(dispatcher.get_metadata(signature)["pipeline_times"]["nopython"])


def test_the_body_pipeline_runs_no_ssa_pass():
    """numba_internals.BodyCompiler turns Numba's ``Flags.enable_ssa`` off, so its pipeline has no
    SSA reconstruction (the bodies' machine code is the same, compiled in 0.85-0.88x the
    time: docs/performance.md): this fails when Numba drops or renames the flag, or adds the
    pass without it."""
    from numba import njit

    from padloss_numba.numba_internals import BodyCompiler

    def running_max(a, out):   # a variable assigned in a loop and in a branch: SSA has work
        best = a[0]
        for i in range(a.shape[0]):
            if a[i] > best:
                best = a[i]
            out[i] = best

    def passes(dispatcher):
        a, out = np.array([1.0, 3.0, 2.0, 5.0]), np.empty(4)
        dispatcher(a, out)
        assert out.tolist() == [1.0, 3.0, 3.0, 5.0]
        return _nopython_passes(dispatcher)

    assert any(name.endswith("_reconstruct_ssa") for name in passes(njit(running_max)))
    assert not any("ssa" in name for name in passes(njit(pipeline_class=BodyCompiler)(running_max)))


def test_the_body_pipeline_runs_no_rewrites_after_typing():
    """numba_internals.BodyCompiler drops Numba's ``NopythonRewrites`` pass (the bodies' machine
    code is the same, compiled in less time: docs/performance.md): this fails when Numba renames
    the pass or keeps a pipeline's passes elsewhere. An array expression, which the pass would
    fuse into one loop, still computes without it."""
    from numba import njit

    from padloss_numba.numba_internals import BodyCompiler

    def add(a, b, out):
        out[:] = a + b

    def passes(dispatcher):
        a, b, out = np.arange(4.0), np.ones(4), np.empty(4)
        dispatcher(a, b, out)
        assert out.tolist() == [1.0, 2.0, 3.0, 4.0]
        return _nopython_passes(dispatcher)

    rewrites = "_nopython_rewrites"
    assert any(name.endswith(rewrites) for name in passes(njit(add)))
    assert not any(name.endswith(rewrites) for name in passes(njit(pipeline_class=BodyCompiler)(add)))


def test_apart_keeps_a_copied_variable_its_own_type_without_ssa():
    """scalars.apart: without SSA (BodyCompiler), a variable set in a tuple assignment
    (``wide, fixed = x, False``) and later given a float64 makes the float32 ``x`` float64
    too, so its product is computed in float64 (with SSA, and from ``apart(x)``, ``x`` stays
    float32). This fails when Numba stops sending the refined type back (apart, in L1's
    body, can then go) or apart stops keeping it off."""
    import numba
    from numba import njit

    from padloss_numba.numba_internals import BodyCompiler
    from padloss_numba.scalars import apart

    def copied(x, g):
        wide, fixed = x, False
        if g > 0:
            wide = np.float64(g) * 2
            fixed = True
        return x * x, wide, fixed

    def kept_apart(x, g):
        wide, fixed = apart(x), False
        if g > 0:
            wide = np.float64(g) * 2
            fixed = True
        return x * x, wide, fixed

    def square_type(dispatcher):
        assert dispatcher(np.float32(3.0), 2.0) == (9.0, 4.0, True)
        (signature,) = dispatcher.nopython_signatures
        return signature.return_type[0]

    assert square_type(njit(copied)) == numba.float32                          # SSA: each value its own
    assert square_type(njit(pipeline_class=BodyCompiler)(copied)) == numba.float64
    assert square_type(njit(pipeline_class=BodyCompiler)(kept_apart)) == numba.float32


def test_the_inliner_copies_less_in_the_block_and_makes_the_same_code():
    """numba_internals.inliner_copies_less: inside it, Numba's inliner (InlineWorker.inline_ir,
    which deep-copies a callee block by block, twice) copies the scope the callee's blocks
    share once for all of them, not once a block, copies each block once (the second copy,
    the "original" inline_ir returns, is one both its callers drop), and translates a callee
    inlined twice once (InlineWorker.inline_function, through run_untyped_passes); the code
    compiled is the same, and outside the block Numba is as it was. This fails when Numba
    renames inline_ir, inline_function or run_untyped_passes, gives Scope or Block a copy of
    its own (which the block's would hide), stops copying them through deepcopy (kernel
    bodies would compile up to 1.5x as long again: docs/performance.md), or a caller of
    inline_ir starts using the original it returns."""
    import inspect

    import numba
    from numba.core import inline_closurecall, ir, typed_passes, untyped_passes

    for caller in (untyped_passes.InlineInlinables._do_work, typed_passes.InlineOverloads._run_inliner):
        assert "_, _, _, new_blocks" in inspect.getsource(caller), caller   # the original dropped
    worker = inline_closurecall.InlineWorker
    assert "__deepcopy__" not in vars(ir.Scope) and "__deepcopy__" not in vars(ir.Block)
    assert worker.inline_ir is numba_internals._inline_ir
    assert worker.inline_function is numba_internals._inline_function

    @numba.njit(inline="always")
    def clipped_sum(a, lo, hi):   # several blocks: a loop and branches
        total = 0.0
        for x in a:
            if x < lo:
                total += lo
            elif x > hi:
                total += hi
            else:
                total += x
        return total

    def kernel(a):
        return clipped_sum(a, -1.0, 1.0) + clipped_sum(a, 0.0, 2.0)

    seen = []   # (the scope, its copy, whether that was its first copy) for each scope copied

    def spy(scope, memo):
        copies = numba_internals._scope_copies   # None outside an inline_ir call
        first = copies is None or id(scope) not in copies
        copied = original(scope, memo)
        seen.append((scope, copied, first))
        return copied

    blocks = []   # (a block, its copy) for each block deepcopy asked for

    def block_spy(block, memo):
        copied = original_block(block, memo)
        blocks.append((block, copied))
        return copied

    translated = []   # the functions run_untyped_passes translated, inside the block and outside

    def translate(self, func, enable_ssa=False):
        translated.append(func)
        return translate_once_each(self, func, enable_ssa)

    original, numba_internals._scope_deepcopy = numba_internals._scope_deepcopy, spy
    original_block, numba_internals._block_deepcopy = numba_internals._block_deepcopy, block_spy
    translate_once_each, worker.run_untyped_passes = worker.run_untyped_passes, translate
    try:
        with numba_internals.inliner_copies_less():
            inside = numba.njit(kernel)
            inside.compile((numba.float64[::1],))
        inside_translations = translated.count(clipped_sum.py_func)
        outside = numba.njit(kernel)
        outside.compile((numba.float64[::1],))
    finally:
        numba_internals._scope_deepcopy = original
        numba_internals._block_deepcopy = original_block
        worker.run_untyped_passes = translate_once_each
    first_copies = [copied for _, copied, first in seen if first]
    assert len(seen) > 2 * len(first_copies) > 0          # most blocks' copies reuse their scope's copy
    assert all(copied is not scope for scope, copied, _ in seen)   # a copy, never the callee's own
    assert inside_translations == 1 and translated.count(clipped_sum.py_func) == 3   # outside: once a call
    made = [copied for block, copied in blocks if copied is not block]
    kept = [block for block, copied in blocks if copied is block]   # the original's, not copied again
    assert len(kept) == len(made) > 2 and {id(b) for b in kept} == {id(b) for b in made}
    assert "__deepcopy__" not in vars(ir.Scope) and "__deepcopy__" not in vars(ir.Block)
    assert worker.inline_ir is numba_internals._inline_ir
    assert worker.inline_function is numba_internals._inline_function
    assert not numba_internals._callee_irs   # nothing kept past the block

    a = np.array([-3.0, -0.5, 0.25, 1.5, 4.0])
    assert inside(a) == outside(a) == (-1 - 0.5 + 0.25 + 1 + 1) + (0 + 0 + 0.25 + 1.5 + 2)

    def code(dispatcher):
        """The assembly, less the names and labels that differ per dispatcher, and the sizes of
        the strings that hold such a name (its unique number's digits grow with the count of
        functions the process compiled before: the sizes differed in a full test run)."""
        import re

        (signature,) = dispatcher.signatures
        asm = re.sub(r"_ZN\w+|\.L\w+|\bkernel\w*", "", dispatcher.inspect_asm(signature))
        return re.sub(r'(\.size\s+"\.const\.[^"]*"), \d+', r"\1", asm)

    assert len({code(inside), code(outside)}) == 1


@pytest.mark.skipif(os.name != "posix", reason="the cache lock is POSIX's flock")
def test_every_kernel_reads_and_writes_its_cache_entries_under_the_lock():
    """numba_internals.adopt_cache swaps the classes of Numba's private per-kernel
    cache (dispatcher._cache) and its cache file (._cache_file) for every kernel jit()
    makes: this fails when Numba moves either (test_disk_cache shows what each swap is for)."""
    from padloss_numba.disk_cache import ENABLED, GuardedCache, LockedIndex

    if not ENABLED:
        pytest.skip("PADLOSS_NUMBA_CACHE=0")
    for kernel in kernels():
        assert type(kernel._cache) is GuardedCache, kernel.py_func.__qualname__
        assert type(kernel._cache._cache_file) is LockedIndex, kernel.py_func.__qualname__


