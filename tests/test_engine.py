"""The shared engine: plan cache, repeatable executor, backend selection, plugins,
and the on-disk kernel cache."""
from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import threading
import weakref
from pathlib import Path

import ml_dtypes
import numba
import numpy as np
import pytest

import padloss
from layouts import bits
from padloss import reference
from padloss.dispatch import registry
from padloss.plan_cache import PlanCache
from padloss_numba.pad_kernel import ROW_STACK_BYTES

PLUGIN_DIR = Path(__file__).parent / "plugin_fixture"
# A float32 width whose pad row buffer (W' float32 sums) is past the kernel's stack row: the
# plans of such rows need a workspace (padloss_numba.pad_plan), the executor's to check.
WIDE = ROW_STACK_BYTES // 4 + 1


@pytest.fixture
def fresh_cache():
    """The process-wide plan cache, emptied before and restored after a test."""
    saved = padloss.plan_cache.max_size
    padloss.plan_cache.clear()
    yield padloss.plan_cache
    padloss.plan_cache.max_size = saved
    padloss.plan_cache.clear()


@pytest.fixture
def plugin(monkeypatch):
    """Make the test-only plugin distribution importable and discoverable."""
    monkeypatch.syspath_prepend(str(PLUGIN_DIR))
    registry.reload()
    with pytest.warns(RuntimeWarning, match="'broken'.*failed to load"):
        registry.backends()
    import padloss_test_plugin

    padloss_test_plugin.compiled.clear()
    padloss_test_plugin.runs.clear()
    yield padloss_test_plugin
    monkeypatch.undo()
    registry.reload()


def _pad_call(rng, dtype, shape, pads):
    left, right, top, bottom = pads
    go = rng.standard_normal(shape[:-2] + (shape[-2] + top + bottom, shape[-1] + left + right)).astype(dtype)
    return go, np.empty(shape, dtype), pads


# ---------------------------------------------------------------- plan cache


def test_concurrent_mixed_calls_share_the_cache(fresh_cache):
    """8 threads x 1,000 calls of both ops, several dtypes and shapes, on one cache
    smaller than the number of distinct problems: every result is bit-exact."""
    fresh_cache.max_size = 6
    rng = np.random.default_rng(3)
    dtypes = [np.float32, np.float16, ml_dtypes.bfloat16]
    pads = [_pad_call(rng, dt, shape, p) for dt in dtypes
            for shape, p in [((2, 3, 6, 7), (1, 2, 1, 0)), ((4, 5, 9), (-1, 2, 3, 3))]]
    l1s = [(rng.standard_normal(()).astype(dt), rng.standard_normal((5, 7)).astype(dt),
            rng.standard_normal((7,)).astype(dt), red) for dt in dtypes for red in ("mean", "none")]
    expected_pad = [reference.circular_pad2d_backward(go, x.shape, p) for go, x, p in pads]
    expected_l1 = [reference.l1_loss_backward(*args) for args in l1s]
    sizes, failures = [], []
    calls_per_thread = 1000

    def worker(seed):
        local = np.random.default_rng(seed)
        for _ in range(calls_per_thread):
            if local.random() < 0.5:
                i = local.integers(len(pads))
                go, x, p = pads[i]
                got, want = padloss.circular_pad2d_backward(go, x, p), expected_pad[i]
            else:
                i = local.integers(len(l1s))
                got, want = padloss.l1_loss_backward(*l1s[i]), expected_l1[i]
            if not np.array_equal(bits(got), bits(want)):
                failures.append(i)
            sizes.append(fresh_cache.size)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert max(sizes) <= 6
    assert fresh_cache.hits + fresh_cache.misses == 8 * calls_per_thread
    assert fresh_cache.misses >= len(pads) + len(l1s) - 6   # more problems than room: evictions happened


_WORKQUEUE = """
import json, threading, numba, numpy as np, padloss
from padloss import reference
rng = np.random.default_rng(5)
go = rng.standard_normal((4, 16, 70, 70)).astype(np.float32)   # threaded: launch.PARALLEL_MIN_ELEMENTS
x, pads = np.empty((4, 16, 64, 64), np.float32), (3, 3, 3, 3)
s, t = rng.standard_normal((2, 128, 160)).astype(np.float32), rng.standard_normal(160).astype(np.float32)
want_pad = reference.circular_pad2d_backward(go, x.shape, pads)
want_l1 = reference.l1_loss_backward(np.float32(1.0), s, t, "mean")
wrong = []

def calls():
    for _ in range(30):
        wrong.extend(["pad"] * (not np.array_equal(padloss.circular_pad2d_backward(go, x, pads), want_pad)))
        wrong.extend(["l1"] * (not np.array_equal(padloss.l1_loss_backward(np.float32(1.0), s, t), want_l1)))

threads = [threading.Thread(target=calls) for _ in range(4)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(json.dumps({"layer": numba.threading_layer(), "wrong": wrong}))
"""


def test_threaded_kernels_take_turns_under_the_workqueue_layer():
    """Numba's workqueue layer aborts the process when two threads start parallel regions at
    once; plans made under it launch their threaded kernels under a lock (launch.caller), and
    the others call them directly. Four threads of threaded calls of both ops, in a process on
    that layer: every call finishes, bit-exact."""
    env = dict(os.environ, NUMBA_THREADING_LAYER="workqueue")
    done = subprocess.run([sys.executable, "-c", _WORKQUEUE], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == {"layer": "workqueue", "wrong": []}


def test_one_shot_calls_reuse_a_spare_workspace_but_never_share_one(monkeypatch):
    """A one-shot run takes the workspace a finished run of its plan gave back
    (padloss.fastpath.run_once); two runs at once each have their own."""
    from padloss_numba import pad_plan

    go, x, pads = _pad_call(np.random.default_rng(3), np.float32, (1, 1, 3, WIDE), (2, 1, 1, 2))
    want = bits(reference.circular_pad2d_backward(go, x.shape, pads))
    workspaces, together = [], threading.Barrier(2, timeout=30)
    original = pad_plan.CircularPadPlan.run

    def run(self, arrays, workspace, stream):
        workspaces.append(workspace)
        if len(workspaces) > 3:       # the two concurrent calls: both inside a run at once
            together.wait()
        original(self, arrays, workspace, stream)

    monkeypatch.setattr(pad_plan.CircularPadPlan, "run", run)
    out, outs = np.empty(x.shape, np.float32), [np.empty(x.shape, np.float32) for _ in range(2)]
    for _ in range(3):                # planned, then the fast path: a new workspace, then the spare
        padloss.circular_pad2d_backward(go, x, pads, out=out)
    assert workspaces[2] is workspaces[1]
    threads = [threading.Thread(target=padloss.circular_pad2d_backward, args=(go, x, pads),
                                kwargs={"out": o}) for o in outs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(workspaces) == 5 and workspaces[3] is not workspaces[4]
    for result in (out, *outs):
        np.testing.assert_array_equal(bits(result), want)


def test_cache_counts_hits_and_misses_and_clear(fresh_cache):
    go, x, p = _pad_call(np.random.default_rng(0), np.float32, (2, 2, 5, 5), (1, 1, 1, 1))
    padloss.circular_pad2d_backward(go, x, p)
    padloss.circular_pad2d_backward(go, x, p)
    assert (fresh_cache.size, fresh_cache.hits, fresh_cache.misses) == (1, 1, 1)
    fresh_cache.clear()
    assert (fresh_cache.size, fresh_cache.hits, fresh_cache.misses) == (0, 0, 0)


def test_max_size_zero_disables_caching(fresh_cache):
    fresh_cache.max_size = 0
    go, x, p = _pad_call(np.random.default_rng(0), np.float32, (2, 2, 5, 5), (1, 1, 1, 1))
    first = padloss.circular_pad2d_backward(go, x, p)
    second = padloss.circular_pad2d_backward(go, x, p)
    assert fresh_cache.size == 0 and fresh_cache.misses == 2 and fresh_cache.hits == 0
    np.testing.assert_array_equal(first, second)


def test_a_full_cache_never_holds_more_than_max_size_while_threads_insert():
    """A thread reading ``size`` (no lock) while others insert into a full cache sees at most
    max_size plans: room is made before a plan goes in. (Inserting first, then evicting, let
    a reader in between see one more: the test above caught it, now and then.) Threads are
    switched as often as CPython allows, so that a reader lands between any two steps."""
    cache, seen, done = PlanCache(max_size=6), [], threading.Event()

    def insert(thread):
        for i in range(20_000):
            cache.get_or_build((thread, i % 40), object)

    def read():
        while not done.is_set():
            seen.append(cache.size)

    reader = threading.Thread(target=read)
    writers = [threading.Thread(target=insert, args=(t,)) for t in range(4)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for t in (reader, *writers):
            t.start()
        for t in writers:
            t.join()
    finally:
        done.set()
        reader.join()
        sys.setswitchinterval(interval)
    assert max(seen) == 6 and cache.size == 6


def test_lru_eviction_order():
    cache = PlanCache(max_size=2)
    for key in "abc":
        cache.get_or_build(key, lambda k=key: k.upper())
    assert cache.get_or_build("b", lambda: "rebuilt") == "B"      # b was kept
    assert cache.get_or_build("a", lambda: "rebuilt") == "rebuilt"  # a was evicted
    cache.max_size = 1
    assert cache.size == 1
    with pytest.raises(ValueError, match="max_size"):
        cache.max_size = -1


def test_touch_counts_a_kept_plan_only_while_the_cache_holds_it():
    cache = PlanCache(max_size=2)
    generation = cache.generation
    cache.get_or_build("a", lambda: "A")
    cache.get_or_build("b", lambda: "B")
    assert cache.touch("a", generation) and cache.touch("a", generation)   # "a" is now the newest
    assert cache.hits == 2
    cache.get_or_build("c", lambda: "C")                                  # so "b" is evicted, not "a"
    assert cache.get("a") == "A" and cache.get("b") is None
    assert not cache.touch("a", generation)                               # a removal happened since
    assert not PlanCache(max_size=0).touch("a", 0)                        # never held
    assert cache.hits == 3


def test_a_repeated_touch_of_the_newest_plan_takes_no_lock():
    """The one-shot fast path's repeat (PlanCache.touch) skips the lock only where nothing
    needs re-ordering: the newest plan, in the generation it was fetched in."""
    cache = PlanCache(max_size=2)
    generation = cache.generation
    cache.get_or_build("a", lambda: "A")
    cache.get_or_build("b", lambda: "B")
    taken = []

    class CountingLock:
        def __init__(self, lock):
            self._lock = lock

        def acquire(self):
            taken.append(True)
            return self._lock.acquire()

        def release(self):
            self._lock.release()

    cache._lock = CountingLock(cache._lock)
    assert cache.touch("b", generation) and taken == []                   # "b" is the newest
    assert cache.touch("a", generation) and len(taken) == 1               # "a" re-ordered, locked
    assert cache.touch("a", generation) and len(taken) == 1               # now the newest
    assert cache.hits == 3


def test_plan_keeps_no_user_array_alive(fresh_cache):
    go, x, p = _pad_call(np.random.default_rng(0), np.float32, (2, 2, 5, 5), (1, 1, 1, 1))
    out = padloss.circular_pad2d_backward(go, x, p)
    refs = [weakref.ref(a) for a in (go, x, out)]
    del go, x, out
    gc.collect()
    assert fresh_cache.size == 1
    assert all(r() is None for r in refs)


def test_cache_key_is_metadata_only(fresh_cache):
    rng = np.random.default_rng(0)
    go, x, p = _pad_call(rng, np.float32, (2, 2, 5, 5), (1, 1, 1, 1))
    padloss.circular_pad2d_backward(go, x, p)
    padloss.circular_pad2d_backward(go * 3, np.empty_like(x), p)      # new data, same metadata
    assert fresh_cache.misses == 1 and fresh_cache.hits == 1
    padloss.circular_pad2d_backward(np.asfortranarray(go), x, p)      # other strides: another plan
    padloss.circular_pad2d_backward(go[:, :, :, ::-1].copy(), x, (2, 0, 1, 1))  # other padding
    assert fresh_cache.misses == 3


def test_memo_key_holds_each_arrays_metadata_and_is_none_for_anything_unusual():
    """The one-shot memo key (padloss.fastpath.signature_of, written out per count of
    arrays): the params, the target, then each array's dtype, shape and strides; None
    where an argument is not a plain ndarray or the params are not known exactly."""
    from padloss.config import current
    from padloss.fastpath import signature_of

    class Subclass(np.ndarray):
        pass

    key = signature_of(2)
    a, b = np.zeros((2, 3), np.float32), np.zeros(3, np.float16)
    assert key((a, b), (1,), None) == ((1,), current.target, a.dtype, (2, 3), (12, 4), b.dtype, (3,), (2,))
    assert key((a, b), (1,), "ascend-950")[1] == "ascend-950"
    others = [(a.T, b), (a.astype(np.float64), b), (a[:1], b), (a, b[::2]), (a, b.astype(np.float32))]
    assert len({key(arrays, (1,), None) for arrays in [(a, b)] + others}) == 1 + len(others)
    for arrays, params, target in [((a, b), None, None), ((a, [0.0] * 3), (1,), None),
                                   ((a.view(Subclass), b), (1,), None), ((a, b), (1,), 950)]:
        assert key(arrays, params, target) is None
    assert signature_of(1)((a,), (1,), None) == ((1,), current.target, a.dtype, (2, 3), (12, 4))
    with pytest.raises(ValueError):   # a key function takes its count of arrays, no other
        key((a,), (1,), None)


def test_find_gives_the_dicts_verdict_with_the_last_signature_first():
    """ValidatedCalls.find compares a call against the last signature found, field by field,
    before the dict: each field that differs is another signature, an equal dtype that is
    another object finds its entry in the dict, and a signature found there becomes the last."""
    from padloss.fastpath import ValidatedCalls

    calls = ValidatedCalls("op", 2)
    a, b = np.zeros((2, 3), np.float32), np.zeros(3, np.float16)
    assert calls.find((a, b), (1,), None) is None
    first = calls.remember(calls.key((a, b), (1,), None), "first problem")
    assert calls.find((a, b), (1,), None) is first
    assert calls.find((a.copy(), b.copy()), (1,), None) is first              # other data, same metadata
    for arrays, params, target in [((a, b), (2,), None), ((a, b), (1,), "ascend-950"), ((a.T, b), (1,), None),
                                   ((np.asfortranarray(a), b), (1,), None),
                                   ((a.view(np.int32), b), (1,), None), ((a, b[::2]), (1,), None),
                                   ((a[:1], b), (1,), None), ((a, b.reshape(1, 3)), (1,), None),
                                   ((a, b), None, None), ((a, list(b)), (1,), None)]:
        assert calls.find(arrays, params, target) is None                     # (a, b) the last found
    meta = np.dtype("f4", metadata={"of": "another object"})   # == float32, not the same object
    assert calls.find((np.zeros((2, 3), meta), b), (1,), None) is first
    c = np.zeros(4, np.float16)
    second = calls.remember(calls.key((a, c), (1,), None), "second problem")
    assert calls.find((a, c), (1,), None) is second
    assert calls.find((a, b), (1,), None) is first                           # from the dict
    assert calls.last[-1] is first and calls.find((a, c), (1,), None) is second


def _long_way(monkeypatch, op) -> list:
    """The calls of ``op`` (an OpDefinition) that go the long way (past its Lane), listed as they come."""
    came = []
    for calls in (op.given, op.allocating):
        real = calls.find
        monkeypatch.setattr(calls, "find", lambda *a, real=real: came.append(a) or real(*a))
    return came


def test_the_lane_repeats_the_last_call_of_each_form_in_one_step(monkeypatch, fresh_cache):
    """A one-shot call with the arguments of the last one of its form (given its output, or
    allocating it) reruns that call's plan without going the long way (OpDefinition.call),
    with the same bits; a str parameter, and a list of pads (a new one each call, as in the
    README), are compared by their values, not by identity. The pad's plans run their
    buffers as given (4-D) or through their ``bind`` (a 3-D input, float16 here)."""
    from padloss import circular_pad, l1_loss

    go, x, pads = _pad_call(np.random.default_rng(0), np.float32, (2, 3, 8, 8), (3, 3, 3, 3))
    out = np.empty_like(x)
    expected = bits(reference.circular_pad2d_backward(go, x.shape, pads))
    g16, x16, pads16 = _pad_call(np.random.default_rng(2), np.float16, (3, 9, 7), (2, 1, 0, 3))
    out16, expected16 = np.empty_like(x16), bits(reference.circular_pad2d_backward(g16, x16.shape, pads16))
    g, t = np.float32(0.5), np.arange(6, dtype=np.float32)
    x1 = np.random.default_rng(1).standard_normal((4, 6)).astype(np.float32)
    out1, want1 = np.empty_like(x1), bits(reference.l1_loss_backward(np.asarray(g), x1, t, "mean"))
    calls = [(circular_pad, lambda: padloss.circular_pad2d_backward(go, x, pads, out=out), expected),
             (circular_pad, lambda: padloss.circular_pad2d_backward(go, x, pads), expected),
             (circular_pad, lambda: padloss.circular_pad2d_backward(go, x, list(pads), out=out), expected),
             (circular_pad, lambda: padloss.circular_pad2d_backward(g16, x16, pads16, out=out16), expected16),
             (l1_loss, lambda: padloss.l1_loss_backward(g, x1, t, "".join(["me", "an"]), out=out1), want1),
             (l1_loss, lambda: padloss.l1_loss_backward(np.asarray(g), x1, t, "mean"), want1)]
    for module, call, want in calls:
        for _ in range(3):   # validated, then the long way twice in a row with no call served between
            np.testing.assert_array_equal(bits(call()), want)
        long_way = _long_way(monkeypatch, module._op)
        for _ in range(3):
            np.testing.assert_array_equal(bits(call()), want)
        assert long_way == []
        monkeypatch.undo()


def test_each_ops_one_shot_function_is_its_lane_with_its_defs_signature():
    """The public one-shot functions are their ops' lanes (OpDefinition.one_shot_function: one
    Python frame before a repeated call's kernel) with their defs' names, defaults, docstrings
    and module: calls by keyword, the default reduction and a NumPy scalar grad_output (the
    lane's ``adapt``) work as the def says; a def whose parameters a lane cannot take is
    refused where it is made."""
    import inspect

    from padloss import circular_pad, l1_loss

    signature = inspect.signature(padloss.l1_loss_backward)
    assert list(signature.parameters) == ["grad_output", "self", "target", "reduction", "out", "backend",
                                          "npu_target"]
    assert signature.parameters["reduction"].default == "mean" and signature.parameters["out"].default is None
    assert padloss.l1_loss_backward.__doc__.startswith("Gradient of ``l1_loss(self, target, reduction)``")
    assert padloss.l1_loss_backward is l1_loss._op.lane.one_shot
    assert padloss.circular_pad2d_backward is circular_pad._op.lane.one_shot
    assert padloss.circular_pad2d_backward.__module__ == "padloss.circular_pad"
    x, t = np.array([[3.0, -1.0]], np.float32), np.zeros(2, np.float32)
    for _ in range(4):   # the long way, then the lane
        got = padloss.l1_loss_backward(grad_output=np.float32(2.0), self=x, target=t)   # "mean"
        assert got.tolist() == [[1.0, -1.0]]
    with pytest.raises(TypeError, match="keyword-only out, backend, npu_target"):
        l1_loss._op.one_shot_function(lambda grad_output, self, target, reduction, out=None: None)
    assert padloss.l1_loss_backward is l1_loss._op.lane.one_shot


def test_the_lane_keeps_serving_one_of_two_alternating_signatures(monkeypatch, fresh_cache):
    """Calls alternating between two signatures, one of them the lane's: the lane keeps
    serving it and the other goes the long way, rather than each call replacing the record
    the next one needs (a record costs more than a call the lane serves saves); a signature
    that then repeats alone is taken up. (On an empty plan cache: a plan removed to make
    room sends the lane's next call the long way, as the test after this one shows.)"""
    from padloss import circular_pad

    rng = np.random.default_rng(0)
    (go, x, pads), (go2, x2, _) = (_pad_call(rng, np.float32, (2, 3, n, n), (1, 1, 1, 1)) for n in (6, 7))
    out, out2 = np.empty_like(x), np.empty_like(x2)
    want, want2 = (bits(reference.circular_pad2d_backward(g, a.shape, pads)) for g, a in ((go, x), (go2, x2)))

    def first():
        np.testing.assert_array_equal(bits(padloss.circular_pad2d_backward(go, x, pads, out=out)), want)

    def second():
        np.testing.assert_array_equal(bits(padloss.circular_pad2d_backward(go2, x2, pads, out=out2)), want2)

    for _ in range(3):   # the long way twice in a row, no call served between (after other tests: 3 calls)
        first()
    second()
    long_way = _long_way(monkeypatch, circular_pad._op)
    for _ in range(4):
        first(), second()
    assert [buffers[-1].shape for buffers, *_ in long_way] == [x2.shape] * 4
    for _ in range(3):
        second()
    assert len(long_way) == 4 + 1   # the second signature again: now the lane's


def test_a_plan_removed_from_the_cache_sends_the_lanes_next_call_the_long_way(monkeypatch, fresh_cache):
    """The lane reruns a plan only while the plan cache holds it (Ready.current): once any
    plan was removed (here all of them; a full cache removes its oldest to make room), the
    repeated call goes the long way, with the same bits, and the lane serves the calls after."""
    from padloss import circular_pad

    go, x, pads = _pad_call(np.random.default_rng(0), np.float32, (2, 3, 8, 8), (3, 3, 3, 3))
    out = np.empty_like(x)
    want = bits(reference.circular_pad2d_backward(go, x.shape, pads))
    for _ in range(3):
        padloss.circular_pad2d_backward(go, x, pads, out=out)
    long_way = _long_way(monkeypatch, circular_pad._op)
    fresh_cache.clear()
    for _ in range(3):
        out[...] = 0
        np.testing.assert_array_equal(bits(padloss.circular_pad2d_backward(go, x, pads, out=out)), want)
    assert len(long_way) == 1 and fresh_cache.size == 1


def test_the_lane_leaves_every_call_it_cannot_vouch_for_to_the_long_way(monkeypatch, fresh_cache):
    """After a repeated call, a call that differs from it in anything its verdict rests on
    goes the long way and gets its own verdict, an error naming the rule where there is
    one, with nothing written: a tuple equal to the padding but holding a float, a list
    changed in place (to other pads, then to a float), a read-only output, an output sharing
    memory with an input, an array whose shape was changed in place, another target."""
    from padloss import circular_pad, l1_loss
    from padloss.config import current

    go, x, pads = _pad_call(np.random.default_rng(0), np.float32, (2, 3, 8, 8), (2, 2, 1, 1))
    out = np.zeros_like(x)

    def repeated(call):   # from the third call on, the lane's (see the test before)
        for _ in range(3):
            call()
        out[...] = 0

    def refused(call, words):
        long_way = _long_way(monkeypatch, circular_pad._op)
        with pytest.raises(padloss.InvalidArgumentError, match=words):
            call()
        assert long_way and not out.any()
        monkeypatch.undo()

    repeated(lambda: padloss.circular_pad2d_backward(go, x, pads, out=out))
    refused(lambda: padloss.circular_pad2d_backward(go, x, (2.0, 2, 1, 1), out=out), "integers")
    listed = list(pads)
    repeated(lambda: padloss.circular_pad2d_backward(go, x, listed, out=out))
    listed[:2] = [1, 3]   # the same sizes: only the pads differ
    np.testing.assert_array_equal(bits(padloss.circular_pad2d_backward(go, x, listed, out=out)),
                                  bits(reference.circular_pad2d_backward(go, x.shape, listed)))
    repeated(lambda: padloss.circular_pad2d_backward(go, x, listed, out=out))
    listed[0] = 1.0   # == 1
    refused(lambda: padloss.circular_pad2d_backward(go, x, listed, out=out), "integers")
    repeated(lambda: padloss.circular_pad2d_backward(go, x, pads, out=out))
    out.flags.writeable = False
    refused(lambda: padloss.circular_pad2d_backward(go, x, pads, out=out), "read-only")
    out.flags.writeable = True
    repeated(lambda: padloss.circular_pad2d_backward(go, x, pads))
    x.shape = (6, 8, 8)   # rank 3 now: its own verdict, a shape grad_output does not have
    refused(lambda: padloss.circular_pad2d_backward(go, x, pads), "rank")

    g, t = np.ones((), np.float32), np.zeros(6, np.float32)
    x1, out1 = np.ones((4, 6), np.float32), np.empty((4, 6), np.float32)
    for _ in range(3):
        padloss.l1_loss_backward(g, x1, t, "none", out=out1)
    long_way = _long_way(monkeypatch, l1_loss._op)
    before = x1.copy()
    for same in (x1, x1[:], np.frombuffer(x1, np.float32).reshape(4, 6)):
        with pytest.raises(padloss.InvalidArgumentError, match="shares memory with 'self'"):
            padloss.l1_loss_backward(g, x1, t, "none", out=same)
    np.testing.assert_array_equal(x1, before)
    assert len(long_way) == 3
    monkeypatch.setattr(current, "target", "ascend-950")
    padloss.l1_loss_backward(g, x1, t, "none", out=out1)
    assert len(long_way) == 4


# ------------------------------------------------------------------ executor


def test_executor_reruns_with_new_buffers():
    rng = np.random.default_rng(1)
    go, x, p = _pad_call(rng, np.float16, (2, 3, 6, 5), (2, 1, 0, 2))
    gi = np.empty_like(x)
    ws, ex = padloss.circular_pad2d_backward_get_workspace_size(go, x, p, gi)
    for _ in range(3):
        go2 = rng.standard_normal(go.shape).astype(np.float16)
        gi2 = np.empty_like(x)
        assert ex.run(grad_output=go2, grad_input=gi2) is gi2
        np.testing.assert_array_equal(bits(gi2), bits(reference.circular_pad2d_backward(go2, x.shape, p)))
    assert ex.run() is gi2          # the last buffers stay bound


@pytest.mark.parametrize("name,bad,words", [
    ("grad_output", np.zeros((2, 3, 8, 9), np.float16), "shape (2, 3, 8, 9)"),
    ("grad_output", np.zeros((2, 3, 8, 8), np.float32), "dtype float32"),
    ("grad_input", np.zeros((2, 3, 6, 5), np.float16).T.copy().T, "strides"),
    ("grad_input", np.zeros((2, 3, 6, 6), np.float16)[..., :5], "strides"),
])
def test_executor_rejects_other_metadata_and_writes_nothing(name, bad, words):
    go, x, p = _pad_call(np.random.default_rng(2), np.float16, (2, 3, 6, 5), (2, 1, 1, 1))
    gi = np.full(x.shape, 7, np.float16)
    _, ex = padloss.circular_pad2d_backward_get_workspace_size(go, x, p, gi)
    before = bad.copy()
    with pytest.raises(padloss.InvalidArgumentError) as info:
        ex.run(**{name: bad})
    assert info.value.status == padloss.Status.PARAM_INVALID and info.value.argument == name
    assert words in str(info.value) and "planned for" in str(info.value)
    assert (gi == 7).all() and np.array_equal(bits(bad), bits(before))


def test_executor_rejects_unknown_buffer_and_short_workspace():
    go, x, p = _pad_call(np.random.default_rng(2), np.float32, (1, 1, 4, WIDE), (1, 1, 1, 1))
    ws, ex = padloss.circular_pad2d_backward_get_workspace_size(go, x, p, np.empty_like(x))
    with pytest.raises(TypeError, match="unexpected buffer 'self'"):
        ex.run(self=x)
    with pytest.raises(padloss.InvalidArgumentError, match="needs"):
        ex.run(workspace=np.empty(ws - 1, np.uint8))


@pytest.mark.parametrize("shared", ["grad_output", "grad_input"])
def test_executor_rejects_a_workspace_sharing_memory_with_a_buffer(shared):
    """The kernels write their scratch while they read and write the buffers (and the
    Numba bodies are compiled on the promise that nothing overlaps): refused, unwritten."""
    go, x, p = _pad_call(np.random.default_rng(3), np.float32, (1, 1, 4, WIDE), (1, 1, 1, 1))
    gi = np.full(x.shape, 7, np.float32)
    ws, ex = padloss.circular_pad2d_backward_get_workspace_size(go, x, p, gi)
    buffer = {"grad_output": go, "grad_input": gi}[shared]
    before = buffer.copy()
    with pytest.raises(padloss.InvalidArgumentError, match=f"shares memory with '{shared}'") as info:
        ex.run(workspace=buffer.reshape(-1).view(np.uint8)[:ws])
    assert info.value.argument == "workspace"
    assert (gi == 7).all() and np.array_equal(bits(buffer), bits(before))
    own = np.empty(2 * gi.nbytes, np.uint8)
    work = own[:ws]
    ex.run(workspace=work)                       # a buffer of its own is taken (and then trusted
    ex.run(workspace=work)                       # while the same buffers stay bound)
    np.testing.assert_array_equal(bits(gi), bits(reference.circular_pad2d_backward(go, x.shape, p)))
    inside = own[:gi.nbytes].view(np.float32).reshape(gi.shape)   # a new output over it
    with pytest.raises(padloss.InvalidArgumentError, match="shares memory with 'grad_input'"):
        ex.run(workspace=work, grad_input=inside)


# ----------------------------------------------------------------- selection


def test_selection_order(plugin, monkeypatch):
    go, x, p = _pad_call(np.random.default_rng(0), np.float32, (1, 2, 4, 4), (1, 1, 1, 1))

    def ran_on_plugin(**kw):
        padloss.plan_cache.clear()
        plugin.compiled.clear()
        padloss.circular_pad2d_backward(go, x, p, **kw)
        return bool(plugin.compiled)

    assert not ran_on_plugin()                                   # automatic: numba wins on priority
    monkeypatch.setattr(padloss.config.current, "backend", "recording")
    assert ran_on_plugin()                                       # the setting beats automatic
    with padloss.use_backend("numba"):
        assert not ran_on_plugin()                               # context beats the setting
        assert ran_on_plugin(backend="recording")                # argument beats context
    monkeypatch.setattr(padloss.config.current, "backend", None)
    with padloss.use_backend("recording"):
        assert ran_on_plugin()
        assert not ran_on_plugin(backend="numba")


def test_repeated_calls_see_every_change_that_decides_the_plan(plugin, monkeypatch, fresh_cache):
    """A one-shot call reuses the plan its signature ran last only while nothing
    that chose it changed: the selection inputs, availability (the thread count: the next test)."""
    numba_backend = padloss.dispatch.registry.backends()["numba"]
    # numba's availability is fixed (a settled choice asks it nothing again: the next
    # test); declared not fixed here, it stands for a backend whose availability changes
    monkeypatch.setattr(type(numba_backend), "availability_fixed", False)
    go, x, p = _pad_call(np.random.default_rng(0), np.float32, (1, 2, 4, 4), (1, 1, 1, 1))
    expected = bits(reference.circular_pad2d_backward(go, x.shape, p))

    def run(**kw):
        plugin.runs.clear()
        out = padloss.circular_pad2d_backward(go, x, p, **kw)
        np.testing.assert_array_equal(bits(out), expected)
        return "recording" if plugin.runs else "numba"

    assert run() == run() == "numba"
    assert (fresh_cache.hits, fresh_cache.misses) == (1, 1)
    monkeypatch.setattr(padloss.config.current, "backend", "recording")
    assert run() == "recording"
    monkeypatch.setattr(padloss.config.current, "backend", None)
    assert run() == "numba"
    with padloss.use_backend("recording"):
        run()
        assert fresh_cache.hits == 3              # the recording plan, cached: a hit, not a rebuild
    monkeypatch.setattr(type(numba_backend), "availability", lambda self: (False, "switched off"))
    assert run() == "recording"                   # automatic: the next backend that is available
    with pytest.raises(padloss.BackendError, match="switched off"):
        run(backend="numba")
    monkeypatch.undo()
    monkeypatch.syspath_prepend(str(PLUGIN_DIR))
    assert run() == "numba"                       # available again: it wins again


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="one thread: no other count to set")
def test_the_thread_count_decides_a_threaded_plan_and_no_serial_one(fresh_cache):
    """A one-shot call keeps its last plan only while the thread count it was planned for
    holds, where the plan is threaded; a serial plan (``context_free``) runs the same under
    any count, so it stays. A threaded kernel returns the count it ran under (the plan's
    ``reports_context``): the call that meets a new count runs the plan it had, with the
    same bits, and the next one runs a plan for that count, by the long way and by the lane."""
    from padloss import circular_pad

    rng = np.random.default_rng(0)
    calls = [_pad_call(rng, np.float32, shape, (1, 1, 1, 1)) for shape in ((1, 2, 4, 4), (1, 2, 128, 128))]

    def run(go, x, p):
        out = padloss.circular_pad2d_backward(go, x, p)
        np.testing.assert_array_equal(bits(out), bits(reference.circular_pad2d_backward(go, x.shape, p)))

    def ran_under():   # the thread count the threaded call's kept plan runs under; None: none kept
        go, x, p = calls[1]
        ready = circular_pad._op.allocating.find((go,), circular_pad._memo_params(go, x, p), None).ready
        return None if ready is None else ready.ran_under

    for call in calls:
        run(*call)
        run(*call)
    assert fresh_cache.misses == 2 and ran_under() == numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        run(*calls[0])
        assert fresh_cache.misses == 2            # serial: the same plan
        run(*calls[1])
        assert fresh_cache.misses == 2 and ran_under() is None   # ran the plan it had, and let it go
        run(*calls[1])
        assert fresh_cache.misses == 3 and ran_under() == 1      # threaded: a plan for one thread
        for _ in range(3):   # the lane takes the signature up
            run(*calls[1])
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    run(*calls[1])                                # the lane's call: the one-thread plan, let go
    assert ran_under() is None
    run(*calls[1])
    assert ran_under() == numba.get_num_threads() and fresh_cache.misses == 3   # the first plan, kept


def test_a_settled_choice_asks_no_backend_again(monkeypatch, fresh_cache):
    """A choice of a backend whose availability is fixed (numba's), none skipped, stands on
    the registry's load alone: repeated calls ask no availability; a new load chooses again."""
    go, x, p = _pad_call(np.random.default_rng(0), np.float32, (1, 2, 4, 4), (1, 1, 1, 1))
    expected = bits(reference.circular_pad2d_backward(go, x.shape, p))
    numba_class = type(registry.backends()["numba"])
    asked = []
    real = numba_class.availability
    monkeypatch.setattr(numba_class, "availability", lambda self: asked.append(self.name) or real(self))

    def run():
        np.testing.assert_array_equal(bits(padloss.circular_pad2d_backward(go, x, p)), expected)
        return len(asked)

    registry.reload()
    try:
        chose = run()
        assert chose >= 1                                  # asked while choosing
        assert [c.settled for c in registry.choices.values()] == [True]
        assert run() == run() == chose                     # then never again
        registry.reload()
        assert run() > chose                               # a new load: chosen, so asked, again
    finally:
        monkeypatch.undo()
        registry.reload()


def test_use_backend_is_per_thread():
    seen = {}

    def other():
        from padloss.dispatch import _chosen

        seen["other"] = _chosen.get()

    with padloss.use_backend("numba"):
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert seen["other"] is None


def test_unknown_and_unavailable_backends_are_clear_errors(plugin):
    go, x, p = _pad_call(np.random.default_rng(0), np.float32, (1, 2, 4, 4), (1, 1, 1, 1))
    with pytest.raises(padloss.InvalidArgumentError, match="unknown backend 'nope'.*known:.*numba"):
        padloss.circular_pad2d_backward(go, x, p, backend="nope")
    info = {b.name: b for b in padloss.available_backends()}
    assert info["numba"].available and info["recording"].available
    assert "broken" not in info


def test_plugin_discovered_and_used(plugin):
    names = [b.name for b in padloss.available_backends()]
    assert "recording" in names and names.index("numba") < names.index("recording")
    go, x, p = _pad_call(np.random.default_rng(0), np.float32, (1, 2, 4, 4), (1, 1, 1, 1))
    out = padloss.circular_pad2d_backward(go, x, p, backend="recording")
    assert [pr.op for pr in plugin.compiled] == ["circular_pad2d_backward"]
    np.testing.assert_array_equal(bits(out), bits(reference.circular_pad2d_backward(go, x.shape, p)))


def test_a_builtin_backend_that_fails_to_import_raises(monkeypatch):
    """A built-in imports no optional dependency, so its import error is a bug in
    padloss: raised, never shown as "unavailable" (plugins only warn)."""
    from padloss import dispatch

    monkeypatch.setitem(dispatch.BUILTIN_BACKENDS, "typo", ("padloss_numbaa", "backend"))
    registry.reload()
    with pytest.raises(ModuleNotFoundError, match="padloss_numbaa"):
        padloss.available_backends()
    monkeypatch.undo()
    registry.reload()
    assert padloss.available_backends()[0].name == "numba"


# ---------------------------------------------------------- on-disk kernels

_FIRST_CALL = """
import json, numpy as np, padloss
from padloss_numba.pad_plan import _kernel
from padloss_numba.pad_kernel import chunk_body
from padloss_numba import l1_kernel
go = np.ones((2, 3, 10, 10), np.float32)
out = padloss.circular_pad2d_backward(go, np.empty((2, 3, 8, 8), np.float32), (1, 1, 1, 1))
x = np.arange(6, dtype=np.float32).reshape(2, 3)
_, l1 = padloss.l1_loss_backward_get_workspace_size(np.float32(1), x, np.zeros(3, np.float32), "sum",
                                                    np.empty((2, 3), np.float32))
l1_body = l1_kernel.chunk_body((2, 2, 2, 2), 2, True, False)   # float32 throughout, "sum": exact
# one signature each
kernels = [_kernel(2, False, "C", False)[0], chunk_body(2, False), l1._plan._kernel, l1_body]   # rows of 8
print(json.dumps({"hits": sum(sum(k.stats.cache_hits.values()) for k in kernels),
                  "misses": sum(sum(k.stats.cache_misses.values()) for k in kernels),
                  "corner": float(out[0, 0, 0, 0]), "l1": l1.run().tolist()}))
"""


def _in_fresh_process(script: str, cache_dir, *args: str, **env) -> tuple:
    """What ``script`` printed, as JSON, and its stderr: run with ``args`` in a fresh process
    whose compile cache is ``cache_dir``, ``env`` added to its environment."""
    env = dict(os.environ, PADLOSS_CACHE_DIR=str(cache_dir), **env)
    proc = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True,
                          check=True)
    return json.loads(proc.stdout), proc.stderr


def _fresh_process(cache_dir, **env):
    printed, stderr = _in_fresh_process(_FIRST_CALL, cache_dir, **env)
    return dict(printed, stderr=stderr)


def test_fresh_process_with_warm_disk_cache_does_not_recompile(tmp_path):
    cold = _fresh_process(tmp_path)
    assert (cold["hits"], cold["misses"]) == (0, 4) and cold["corner"] == 4.0
    assert cold["l1"] == [[0.0, 1.0, 1.0], [1.0, 1.0, 1.0]]
    assert any(tmp_path.rglob("*.nbi"))              # written under PADLOSS_CACHE_DIR
    # the slow first call says why, where the kernels went, and what compiles them ahead
    assert "padloss: compiled the circular_pad2d_backward kernels for float32 in" in cold["stderr"]
    assert str(tmp_path) in cold["stderr"] and "padloss warmup" in cold["stderr"]
    warm = _fresh_process(tmp_path, NUMBA_NUM_THREADS="1")
    assert (warm["hits"], warm["misses"]) == (4, 0) and warm["corner"] == 4.0
    assert "padloss: compiled" not in warm["stderr"]


_COMPILE_RECORDER = """
import json, numpy as np, padloss
from numba.core import event
compiled = []   # the qualified name of each function Numba compiles, without its variant
class Listener(event.Listener):
    def on_start(self, ev):
        compiled.append(ev.data["dispatcher"].py_func.__qualname__.split(".variant_")[0])
    def on_end(self, ev):
        pass
"""


_BODIES = _COMPILE_RECORDER + """
import sys
from padloss_numba.convert import F32
from padloss_numba.pad_kernel import chunk_body
with event.install_listener("numba:compile", Listener()):
    for side in map(int, sys.argv[1:]):   # a side of 8: rows too narrow for windows
        go = np.ones((1, 2, side + 2, side + 2), np.float32)
        padloss.circular_pad2d_backward(go, np.empty((1, 2, side, side), np.float32), (1, 1, 1, 1))
print(json.dumps({"windowed": len(chunk_body(F32, True).overloads),
                  "windowless": len(chunk_body(F32, False).overloads),
                  "bodies_compiled": compiled.count("chunk_body.<locals>.body")}))
"""


def _bodies(cache_dir, *sides: int) -> dict:
    return _in_fresh_process(_BODIES, cache_dir, *map(str, sides))[0]


def test_narrow_rows_take_the_body_without_windows_whatever_was_compiled_before(tmp_path):
    """Rows too narrow for windows run the pad's body without them (it runs them faster),
    also in a process, or on a compile cache, that has the body with windows already: their
    speed does not depend on what ran first (pad_plan._windowed_body). Later processes load
    the bodies they need and compile none."""
    narrow_first, wide_first = tmp_path / "narrow", tmp_path / "wide"
    assert _bodies(narrow_first, 8, 64) == {"windowed": 1, "windowless": 1, "bodies_compiled": 2}
    assert _bodies(wide_first, 64, 8) == {"windowed": 1, "windowless": 1, "bodies_compiled": 2}
    assert _bodies(wide_first, 8) == {"windowed": 0, "windowless": 1, "bodies_compiled": 0}   # loaded
    assert _bodies(wide_first, 64) == {"windowed": 1, "windowless": 0, "bodies_compiled": 0}


_COMPILES = _COMPILE_RECORDER + """
import ml_dtypes
bf16 = ml_dtypes.bfloat16
with event.install_listener("numba:compile", Listener()):
    go = np.ones((1, 2, 6, 6), np.float16)
    padloss.circular_pad2d_backward(go, np.empty((1, 2, 4, 4), np.float16), (1, 1, 1, 1))
    x = np.linspace(-1, 1, 12).astype(bf16).reshape(3, 4)
    padloss.l1_loss_backward(np.ones((), bf16), x, x[::-1], "mean")
    h = np.linspace(-1, 1, 12).astype(np.float16).reshape(3, 4)
    padloss.l1_loss_backward(np.ones((3, 4), np.float32), h, np.arange(4, dtype=np.int32), "none")
print(json.dumps(compiled))
"""


def test_a_first_compile_compiles_only_bodies_and_entries(tmp_path):
    """Conversions, min/max and the pad's workspace rows are written into the kernel's own
    IR: a helper that Numba compiles as a function of its own (an overload, or a builtin
    such as min or array.view) cost 20-130 ms apiece of every first call."""
    compiled = _in_fresh_process(_COMPILES, tmp_path, PADLOSS_NUMBA_CACHE="0")[0]
    assert compiled.count("chunk_body.<locals>.body") == 3, compiled   # pad, L1 fixed grad, L1 integer
    assert compiled.count("make_kernel.<locals>.kernel") == 3 and len(compiled) == 6, compiled


def test_disk_cache_opt_out(tmp_path):
    off = _fresh_process(tmp_path, PADLOSS_NUMBA_CACHE="0")
    assert off["hits"] == 0 and not any(tmp_path.rglob("*.nbi"))


def test_warmup_prepares_every_variant(fresh_cache):
    seconds = padloss.warmup(dtypes=("float32",))
    assert seconds > 0
    assert fresh_cache.size == 9   # {pad, l1 mean, l1 none} x {serial, parallel, streamed}
    # it planned on unfilled buffers and ran nothing; calls of those shapes find its plans
    x = np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4)
    got = padloss.l1_loss_backward(np.float32(2), x, x[::-1].copy(), "mean")
    np.testing.assert_array_equal(got, reference.l1_loss_backward(np.float32(2), x, x[::-1], "mean"))
    go = np.arange(36, dtype=np.float32).reshape(1, 1, 6, 6)
    got = padloss.circular_pad2d_backward(go, np.empty((1, 1, 4, 4), np.float32), (1, 1, 1, 1))
    np.testing.assert_array_equal(got, reference.circular_pad2d_backward(go, (1, 1, 4, 4), (1, 1, 1, 1)))
    assert fresh_cache.size == 9


def _kernels():
    """One of each kind of compiled kernel: bodies (the pad's with windows or not, L1's
    streamed or not), the pad's streamed rows, serial and parallel entries, the ceiling
    stream."""
    from padloss_numba import l1_kernel, pad_kernel, stream
    from padloss_numba.convert import BF16, F32

    return [pad_kernel.chunk_body(F32, True), pad_kernel.chunk_body(F32, False),
            pad_kernel.streamed_rows(BF16), pad_kernel.make_kernel(F32, True), l1_kernel.make_kernel(True),
            l1_kernel.make_kernel(False), l1_kernel.chunk_body((F32, BF16, F32, F32), F32, False, False),
            l1_kernel.chunk_body((F32, BF16, F32, F32), F32, False, True), *stream.dispatchers()]


def test_only_threaded_entries_release_the_gil():
    """A serial entry (a problem below launch.PARALLEL_MIN_ELEMENTS) keeps the GIL while it
    runs: released, each tiny call paid for taking it back, and waited for it while
    another Python thread was busy (building.jit); threaded entries release it."""
    from padloss_numba import l1_kernel, pad_arch35, pad_kernel, stream
    from padloss_numba.convert import F16, F32

    for parallel in (False, True):
        for entry in (pad_kernel.make_kernel(F32, parallel), l1_kernel.make_kernel(parallel),
                      pad_arch35._kernel(F16, parallel)):
            assert entry.targetoptions["nogil"] is parallel, entry.py_func.__qualname__
    assert stream.dispatchers()[0].targetoptions["nogil"]   # the ceiling's threaded stream


def test_kernels_compile_with_the_collector_paused_and_leave_it_as_found():
    """A body's compile makes Numba IR by the hundred thousand objects, whose collections
    walked the whole process (building.collector_paused): both ways padloss compiles run
    with Python's collector off, then leave it on or off as it was."""
    from numba.core import event

    from padloss_numba.indirect import compile_called, compile_entry

    seen = []

    class Collector(event.Listener):
        def on_start(self, e):
            seen.append(gc.isenabled())

        def on_end(self, e):
            pass

    listener, was = Collector(), gc.isenabled()
    event.register("numba:compile", listener)
    try:
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            compile_called(numba.njit(lambda x: x + 1), (numba.int64,))
            compile_entry(numba.njit(lambda x: None), numba.njit(lambda x, chunk, chunks: None),
                          (numba.int64,))
            assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
        event.unregister("numba:compile", listener)
    assert seen == [False] * 6


def test_kernel_closures_hold_only_constants_the_disk_cache_can_key_on():
    """Numba keys a cached closure on its cells' pickles: a jitted function in a cell
    pickles with a fresh uuid in every process, so the kernel would compile again in
    each one (the L1 streaming kernel once did, 11 s a process)."""
    def constant(value):   # classes (numpy.float32) pickle by name
        return isinstance(value, (bool, int, float, type)) or (
            isinstance(value, tuple) and all(constant(v) for v in value))

    for kernel in _kernels():
        cells = [c.cell_contents for c in kernel.py_func.__closure__ or ()]
        assert all(constant(v) for v in cells), (kernel.py_func.__qualname__, cells)


@pytest.mark.skipif(os.name != "posix", reason="the cache lock is POSIX's flock")
def test_a_save_waits_for_anothers_so_both_entries_survive(tmp_path):
    """Two writers of one kernel's index (two processes, here two threads: flock
    locks are per open file): the second waits, then takes the next data file."""
    from padloss_numba.disk_cache import LockedIndex

    first, second = (LockedIndex(str(tmp_path), "body-7.py311", "stamp") for _ in range(2))
    inside, release = threading.Event(), threading.Event()
    write_index = first._save_index

    def paused(overloads):   # between reading the index and writing it back
        inside.set()
        release.wait(10)
        write_index(overloads)

    first._save_index = paused
    a = threading.Thread(target=first.save, args=("key a", "code a"))
    a.start()
    assert inside.wait(10)
    b = threading.Thread(target=second.save, args=("key b", "code b"))
    b.start()
    b.join(0.5)              # unlocked, it would finish now, with the number the first one took
    release.set()
    a.join(10)
    b.join(10)
    assert (second.load("key a"), second.load("key b")) == ("code a", "code b")
    assert sorted(p.name for p in tmp_path.glob("*.nbc")) == ["body-7.py311.1.nbc", "body-7.py311.2.nbc"]


def test_a_backend_routes_every_op_through_its_plans_table():
    """One routing shape for every backend: op name -> "module:function", imported on
    the op's first compile; an op not in the table is refused by name."""
    import types

    class Demo(padloss.Backend):
        name = "demo"
        plans = {"l1_loss_backward": "copy:copy"}

    demo, l1 = Demo(), types.SimpleNamespace(op="l1_loss_backward", numerics="spec")
    assert demo.supports(l1) is None
    assert demo.supports(types.SimpleNamespace(op="circular_pad2d_backward", numerics="spec")) == \
        "does not implement circular_pad2d_backward"
    assert demo.supports(types.SimpleNamespace(op="l1_loss_backward", numerics="arch35-simt")) == \
        "does not compute l1_loss_backward with the arch35-simt numerics (docs/targets.md)"
    import copy

    assert demo.plan_builder("l1_loss_backward") is copy.copy
    plan = demo.compile(l1)                                  # the builder, given the Problem
    assert plan == l1 and plan is not l1
    assert demo.describe() == [] and demo.yardsticks((), None) == {} and demo.compiled_for([("x", "float32")])
    for backend in registry.backends().values():            # the built-ins: every catalogued op
        if backend.name in ("numba", "torch", "ascend"):
            from padloss.catalogue import OPS

            assert {key for key in backend.plans if isinstance(key, str)} == set(OPS), backend.name
            assert {key for key in backend.plans if not isinstance(key, str)} == \
                {("circular_pad2d_backward", "arch35-simt"), ("l1_loss_backward", "op-api")}, \
                backend.name   # docs/targets.md's models


def test_slots_name_the_fields_a_plan_packs_and_a_kernel_reads():
    from padloss_numba.l1_kernel import NEST, RANK
    from padloss_numba.pad_kernel import AXES
    from padloss_numba.slots import Slots

    slots = Slots(dims=3, block=1, body=1)
    assert (slots.dims, slots.block, slots.body, slots.size) == (0, 3, 4, 5)
    packed = slots.pack(dims=(7, 8, 9), block=2, body=0)
    assert packed.dtype == np.int64 and packed.tolist() == [7, 8, 9, 2, 0]
    assert packed[slots.block] == 2
    with pytest.raises(ValueError, match="field 'dims' holds 3 values, got 2"):
        slots.pack(dims=(7, 8), block=2, body=0)
    with pytest.raises(TypeError, match="fields"):
        slots.pack(dims=(7, 8, 9), block=2)
    assert NEST.size == 5 * RANK + 7 and (AXES.width, AXES.body, AXES.size) == (4, 8, 12)


@pytest.mark.parametrize("op", ["pad", "pad under ascend-950", "l1"])
def test_an_executor_reruns_its_buffers_as_one_call_and_new_buffers_bind_anew(op):
    """A plan with no workspace runs the bound buffers again as its launcher's one call,
    made by the first run() of them; a run with new buffers binds those, and the next
    run() writes them, never the old ones; a plan that needs a workspace never launches so."""
    rng = np.random.default_rng(4)
    gi = np.full((2, 3, 6, 5), np.nan, np.float32)
    if op.startswith("pad"):
        target, numerics = ("ascend-950", "arch35-simt") if "ascend" in op else (None, "spec")
        go, x, p = _pad_call(rng, np.float32, gi.shape, (2, 1, 1, 2))
        ws, ex = padloss.circular_pad2d_backward_get_workspace_size(go, x, p, gi, npu_target=target)

        def want(g):
            return reference.circular_pad2d_backward(g, x.shape, p, numerics=numerics)
    else:
        go, x = (rng.standard_normal(gi.shape).astype(np.float32) for _ in range(2))
        t = np.zeros(gi.shape, np.float32)
        ws, ex = padloss.l1_loss_backward_get_workspace_size(go, x, t, "none", gi)

        def want(g):
            return reference.l1_loss_backward(g, x, t, "none")
    assert ws == 0 and ex._launch is None
    assert ex.run() is gi
    launch = ex._launch
    assert launch is not None
    gi[...] = np.nan
    assert ex.run() is gi and ex._launch is launch
    np.testing.assert_array_equal(bits(gi), bits(want(go)))
    go2, gi2 = rng.standard_normal(go.shape).astype(np.float32), np.full(x.shape, np.nan, np.float32)
    assert ex.run(grad_output=go2, grad_input=gi2) is gi2 and ex._launch is None
    gi[...] = gi2[...] = np.nan
    assert ex.run() is gi2 and ex.run() is gi2 and ex._launch is not None
    np.testing.assert_array_equal(bits(gi2), bits(want(go2)))
    assert np.isnan(gi).all()
    go3, x3, p3 = _pad_call(rng, np.float32, (1, 1, 4, WIDE), (1, 1, 1, 1))
    ws, wide = padloss.circular_pad2d_backward_get_workspace_size(go3, x3, p3, x3)
    wide.run()
    wide.run()
    assert ws > 0 and wide._launch is None


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("op", ["pad", "pad with a workspace", "l1"])
def test_an_executor_runs_its_buffers_as_they_were_bound(op, dtype):
    """Plans call their kernels' compiled wrappers, which trust the types of what they are
    given (numba_internals.compiled_wrapper; float16 arrays too, read as their uint16 bits):
    an executor binds views of its own, so the caller's array objects reshaped in place
    afterwards (to another rank, which a wrapper would misread) change nothing its runs see:
    the same memory, read and written as bound."""
    rng = np.random.default_rng(5)
    width = WIDE if "workspace" in op else 5
    gi = np.full((2, 3, 6, width), np.nan, dtype)
    if op.startswith("pad"):
        go, x, p = _pad_call(rng, dtype, gi.shape, (2, 1, 1, 2))
        ex = padloss.circular_pad2d_backward_get_workspace_size(go, x, p, gi)[1]
        want = reference.circular_pad2d_backward(go, x.shape, p)
    else:
        go, x = (rng.standard_normal(gi.shape).astype(dtype) for _ in range(2))
        t = np.zeros(gi.shape, dtype)
        ex = padloss.l1_loss_backward_get_workspace_size(go, x, t, "none", gi)[1]
        want = reference.l1_loss_backward(go, x, t, "none")
    ex.run()
    shape = gi.shape
    go.shape, gi.shape = (-1,) + go.shape[2:], (-1,) + gi.shape[2:]   # rank 3, in place
    for _ in range(2):   # the second run() is the launcher's call, where a plan needs no workspace
        gi[...] = np.nan
        assert ex.run() is gi
        np.testing.assert_array_equal(bits(gi.reshape(shape)), bits(want))


def test_an_executor_reuses_its_workspace_between_runs_and_never_shares_one():
    """run() with no workspace takes a spare of the executor's own, gives it back after,
    and a run that finds none (another run holds it) gets a new one: same bits each time."""
    go = np.arange(10 * (WIDE + 6), dtype=np.float32).reshape(1, 1, 10, WIDE + 6)
    gi = np.empty((1, 1, 4, WIDE), np.float32)
    ws, ex = padloss.circular_pad2d_backward_get_workspace_size(go, gi, [3, 3, 3, 3], gi)
    want = reference.circular_pad2d_backward(go, gi.shape, (3, 3, 3, 3))
    assert ws > 0
    ex.run()
    spares = ex._spares._free
    assert len(spares) == 1
    first = spares[0]
    ex.run()
    assert spares == [first]                      # the same one, taken and given back
    taken = ex._spares.take(ws)                    # as a concurrent run would hold it
    ex.run()
    assert len(spares) == 1 and spares[0] is not taken
    np.testing.assert_array_equal(gi, want)
