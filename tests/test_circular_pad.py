"""circular_pad2d_backward on the default (Numba) backend, against three oracles:
the spec's worked example, the NumPy model in padloss.reference (bit-exact), and
PyTorch autograd of F.pad(mode="circular") (within a derived rounding bound: tests/bounds.py)."""
from __future__ import annotations

import sys

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bounds
import padloss
from layouts import LAYOUTS, Guarded, bits, output_at, with_layout
from padloss import reference
from shared import json_at_thread_counts, pad_axis, peer_examples

DTYPES = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32,
          "float64": np.float64}


def test_spec_example():
    go = np.ones((1, 1, 7), np.float32)
    out = padloss.circular_pad2d_backward(go, np.ones((1, 1, 5), np.float32), [1, 1, 0, 0])
    np.testing.assert_array_equal(out, [[[2, 1, 1, 1, 2]]])
    assert out.dtype == np.float32


def test_corners_collect_four_terms():
    go = np.arange(25, dtype=np.float32).reshape(1, 1, 5, 5)
    out = padloss.circular_pad2d_backward(go, np.empty((1, 1, 3, 3), np.float32), [1, 1, 1, 1])
    # worked by hand: interior 12; top-left 6 + 24 (bottom-right corner) + 9 + 21 ...
    np.testing.assert_array_equal(out[0, 0], [[60, 29, 56], [25, 12, 23], [40, 19, 36]])


def test_two_phase_form_and_repeat_runs():
    from padloss_numba.pad_kernel import ROW_STACK_BYTES

    rng = np.random.default_rng(1)
    width = ROW_STACK_BYTES // 4 + 1           # W' float32 sums past the kernel's stack row
    go = rng.standard_normal((1, 1, 8, width + 4)).astype(np.float32)
    gi = np.full((1, 1, 6, width), np.nan, np.float32)
    ws, ex = padloss.circular_pad2d_backward_get_workspace_size(go, gi, (2, 2, 1, 1), gi)
    row = (width + 4) * 4
    assert ws == ex.workspace_size == row      # one float32 row buffer of W' (serial: small problem)
    assert np.isnan(gi).all()                  # phase 1 writes nothing
    with pytest.raises(padloss.InvalidArgumentError, match=f"holds {row - 1} bytes; this plan needs {row}"):
        ex.run(workspace=np.empty(row - 1, np.uint8))
    assert np.isnan(gi).all()
    assert ex.run(workspace=np.empty(ws, np.uint8)) is gi
    np.testing.assert_array_equal(bits(gi),
                                  bits(reference.circular_pad2d_backward(go, gi.shape, (2, 2, 1, 1))))
    gi[...] = np.nan
    assert ex.run() is gi                  # workspace=None: allocated for the run
    expected = reference.circular_pad2d_backward(go, gi.shape, (2, 2, 1, 1))
    np.testing.assert_array_equal(bits(gi), bits(expected))
    go2 = rng.standard_normal(go.shape).astype(np.float32)
    ex.run(grad_output=go2)
    np.testing.assert_array_equal(bits(gi),
                                  bits(reference.circular_pad2d_backward(go2, gi.shape, (2, 2, 1, 1))))


@st.composite
def pad_case(draw):
    dtype = draw(st.sampled_from(sorted(DTYPES)))
    lead = draw(st.sampled_from([(), (1,), (0,), (2,), (3,)]))  # () -> rank 3 with C below
    channels = draw(st.integers(1, 3))
    (h, top, bottom), (w, left, right) = draw(pad_axis()), draw(pad_axis())
    shape = lead + (channels, h, w)
    if len(shape) == 3 and shape[0] == 0:
        shape = (1,) + shape[1:]
    seed = draw(st.integers(0, 2**32 - 1))
    special = draw(st.booleans())
    return dtype, shape, (left, right, top, bottom), seed, special, \
        draw(st.sampled_from(LAYOUTS)), draw(st.sampled_from(LAYOUTS))


def _grad(shape, pads, dtype, seed, special, big=True):
    left, right, top, bottom = pads
    gshape = shape[:-2] + (shape[-2] + top + bottom, shape[-1] + left + right)
    rng = np.random.default_rng(seed)
    g = rng.standard_normal(gshape) * rng.choice([1e-3, 1.0, 3e4 if big else 1e2], size=gshape)
    if special:   # ties, signed zeros, inf and NaN where the spec fixes their fate
        pool = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1 + 2**-11, 1 + 2**-8, 65504.0, -2.5])
        mask = rng.random(gshape) < 0.3
        g = np.where(mask, rng.choice(pool, size=gshape), g)
    return g.astype(DTYPES[dtype])


@settings(max_examples=3000)
@given(pad_case())
def test_bit_exact_against_reference(case):
    _check_bit_exact(case)


def _check_bit_exact(case):
    dtype, shape, pads, seed, special, go_layout, out_layout = case
    go = with_layout(_grad(shape, pads, dtype, seed, special), go_layout)
    out = with_layout(np.full(shape, 7, DTYPES[dtype]), out_layout)
    result = padloss.circular_pad2d_backward(go, np.empty(shape, DTYPES[dtype]), pads, out=out)
    assert result is out
    expected = reference.circular_pad2d_backward(go, shape, pads)
    np.testing.assert_array_equal(bits(out), bits(expected))


@st.composite
def wide_row_case(draw):
    """Rows wide enough for the kernel's vector paths, which pad_case's widths of at
    most 9 never reach: centre runs shorter and longer than COPY_LOOP_MIN_BYTES (a
    memcpy below it, a vector loop from it on), and 16-bit rows whose wrapped runs fold
    in eight-lane windows with the columns between moved (at least two windows of kept
    columns; pads up to a window wide, and past it, which fold as loops): in windows, in
    pad_kernel.CENTRE_LANES-wide moves, or both."""
    from padloss_numba.pad_kernel import COPY_LOOP_MIN_BYTES
    from padloss_numba.window import LANES

    dtype = draw(st.sampled_from(sorted(DTYPES)))
    edge = COPY_LOOP_MIN_BYTES // np.dtype(DTYPES[dtype]).itemsize
    w = draw(st.one_of(st.integers(2 * LANES - 2, 8 * LANES), st.integers(edge - 4, edge + 40)))
    left, right = draw(st.integers(-3, LANES + 2)), draw(st.integers(-3, LANES + 2))
    h, top, bottom = draw(pad_axis(max_size=4))
    return dtype, (2, h, w), (left, right, top, bottom), draw(st.integers(0, 2**32 - 1)), \
        draw(st.booleans()), draw(st.sampled_from(LAYOUTS)), draw(st.sampled_from(LAYOUTS))


@settings(max_examples=300)
@given(wide_row_case())
def test_wide_rows_bit_exact_against_reference(case):
    _check_bit_exact(case)


def test_rarely_is_a_nonzero_test():
    """scalars.rarely, the body's per-plane test of whether its plan streams (what it tells
    LLVM, that the test is rarely true, leaves branch weights in the optimised IR)."""
    import numba

    from padloss_numba.scalars import rarely

    test = numba.njit(lambda v: rarely(v))
    assert [test(v) for v in (0, 1, -1, 1 << 40)] == [False, True, True, True]


def test_the_streamed_rows_take_the_planes_the_body_hands_them():
    """A body calls pad_kernel.streamed_rows by address (indirect.call_body), which checks
    no types: the rows are compiled for the planes ``go[n, ch]`` and ``gi[n, ch]`` of the
    body's arrays, and this is what Numba types those planes as (a geometry of the wrong
    count would misplace the rows: test_large_outputs_stream_bit_exact). Only C-contiguous
    outputs stream (pad_kernel.streams)."""
    import numba

    from padloss_numba import pad_kernel, pad_plan
    from padloss_numba.convert import F16

    layout = "C"
    arrays = pad_plan._arrays(F16, layout)[:2]
    planes = numba.njit(lambda go, gi: (go[0, 0], gi[0, 0]))
    planes.compile(arrays)
    (signature,) = planes.nopython_signatures
    geometry = numba.types.UniTuple(numba.int64, pad_kernel.STREAMED_GEOMETRY)
    assert tuple(signature.return_type) == tuple(a.copy(ndim=2) for a in arrays)
    pad_plan._streamed_rows(F16, layout)
    assert (*signature.return_type, geometry) in pad_kernel.streamed_rows(F16).signatures


STREAMED_SHAPE = (2, 2049, 2051)
"""self's shape for the streaming tests: 16 MiB or more of output even in float16."""


def _run_with_body(go: np.ndarray, out: np.ndarray, pads: tuple, windowed: bool | None, monkeypatch):
    """Run the pad of ``go`` into ``out`` on a Numba plan of its own, its body the one with
    windows or without (``windowed``; None: the one the plan picks); the plan."""
    import numba

    from padloss_numba import pad_plan

    executor = padloss.circular_pad2d_backward_get_workspace_size(go, out, pads, out, backend="numba")[1]
    if windowed is not None:
        monkeypatch.setattr(pad_plan, "_windowed_body", lambda kind, columns_fit: windowed)
    plan = pad_plan.CircularPadPlan(executor.problem, numba.get_num_threads())
    plan.run(plan.bind((go, out)), np.empty(plan.workspace_size, np.uint8), None)
    return plan


def _streams_bit_exact(dtype: str, pads: tuple, seed: int, out: np.ndarray, monkeypatch=None,
                       bodies: dict | None = None) -> None:
    """The pad of a seeded gradient into ``out`` (of STREAMED_SHAPE), on a plan that streams
    past the caches: the same bits as the reference. ``bodies`` maps the bodies to run
    (``_run_with_body``'s ``windowed``) to whether their plan streams (default: the one the
    plan picks, streaming)."""
    from padloss_numba.nontemporal import STREAM_MIN_BYTES

    assert out.shape == STREAMED_SHAPE and np.prod(STREAMED_SHAPE) * 2 >= STREAM_MIN_BYTES   # 16-bit bytes
    go = _grad(STREAMED_SHAPE, pads, dtype, seed, special=True)
    expected = bits(reference.circular_pad2d_backward(go, STREAMED_SHAPE, pads))
    for windowed, streams in (bodies or {None: True}).items():
        out[...] = 0
        assert _run_with_body(go, out, pads, windowed, monkeypatch).streams == streams
        np.testing.assert_array_equal(bits(out), expected)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("skip", [0, 2, 36, 1])
@pytest.mark.parametrize("pads", [(3, 5, 2, 4), (4, 3, 1, 2)])
def test_large_outputs_stream_bit_exact(dtype, skip, pads):
    """An output of 16 MiB or more streams every line of its rows in windows past the
    caches (pad_kernel._stream_rows): the same bits, wherever the output lies against a
    line (``skip`` bytes; rows of 2051 elements start 6 or 12 bytes further on each, so the
    line two rows share falls at every offset; a skip that is no multiple of the element
    size misaligns the elements, which stream nothing)."""
    _streams_bit_exact(dtype, pads, skip, output_at(STREAMED_SHAPE, DTYPES[dtype], skip))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("pads", [(-2, 3, 2, 1), (3, -5, 1, 2)])
def test_large_outputs_with_cropped_columns_stream_row_by_row(dtype, pads):
    """Where a negative pad crops columns, a row's kept columns do not meet the next row's,
    so each row's ends leave on their own (pad_kernel._stream_rows' ``joins``), beside the
    zeroed columns: the same bits as the reference."""
    _streams_bit_exact(dtype, pads, 2, output_at(STREAMED_SHAPE, DTYPES[dtype], 2))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_large_outputs_rows_outside_the_windows_fold_in_the_body(dtype):
    """A streaming plan streams the rows that fold in windows (pad_kernel.streamed_rows);
    the body folds the others: with no top and bottom pads the first plane's first row and
    the last plane's last row (a window there would read past the array). The same bits as
    the reference."""
    _streams_bit_exact(dtype, (3, 2, 0, 0), 5, np.empty(STREAMED_SHAPE, DTYPES[dtype]))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_large_outputs_too_narrow_for_windows_fold_in_either_body(dtype, monkeypatch):
    """With a pad wider than a window no row folds in windows: a body with them (which
    strided rows whose columns fit windows run) streams none and folds every row itself; a
    body without them (pad_plan._windowed_body's pick) does not stream. The same bits as
    the reference."""
    _streams_bit_exact(dtype, (9, 1, 1, 2), 5, np.empty(STREAMED_SHAPE, DTYPES[dtype]), monkeypatch,
                       {True: True, False: False})


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("layout", ["contiguous", "sliced", "channels_last"])
@pytest.mark.parametrize("shape, pads", [((3, 2, 7, 15), (1, 0, 2, 5)), ((2, 2, 9, 40), (9, 2, 1, 1)),
                                         ((1, 3, 12, 12), (-2, 3, 4, -1))])
def test_rows_too_narrow_for_windows_fold_alike_in_either_body(dtype, layout, shape, pads, monkeypatch):
    """Rows whose columns do not fit windows (narrower than two, or a pad wider than one) run
    the body without windows (pad_plan._windowed_body); the body with them folds such rows
    in its loops too, as it folds strided ones: both give the reference's bits.
    Channels-last rows of pixels may fit windows where their planes' rows do not."""
    for windowed in (False, True):
        go = with_layout(_grad(shape, pads, dtype, 7, special=True), layout)
        out = np.empty(shape, DTYPES[dtype])
        _run_with_body(go, out, pads, windowed, monkeypatch)
        np.testing.assert_array_equal(bits(out), bits(reference.circular_pad2d_backward(go, shape, pads)))


@pytest.mark.vs_peer
@settings(max_examples=peer_examples(300))
@given(pad_case())
def test_matches_torch_autograd(case):
    """Against torch's float64 autograd (the exact sum, to within its own float64
    rounding): padloss within the error of its float32 sums and one final rounding."""
    pytest.importorskip("torch")
    dtype, shape, pads, seed, _, _, _ = case
    if 0 in shape:
        return
    go = _grad(shape, pads, dtype, seed, special=False, big=False)  # no float16 overflow
    exact, abs_sum, terms, exact_error = bounds.pad_terms(go, shape, pads)
    ours = padloss.circular_pad2d_backward(go, np.empty(shape, DTYPES[dtype]), pads)
    bounds.assert_within(ours, exact, bounds.padloss_pad_bound(dtype, terms, abs_sum, exact) + exact_error,
                         "padloss")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_torch_tensors_zero_copy(dtype):
    torch = pytest.importorskip("torch")
    tdtype = getattr(torch, dtype)
    go = torch.randn(2, 3, 10, 12).to(tdtype)
    x = torch.empty(2, 3, 8, 8, dtype=tdtype)
    out = torch.empty(2, 3, 8, 8, dtype=tdtype).transpose(2, 3).contiguous().transpose(2, 3)  # strided
    result = padloss.circular_pad2d_backward(go, x, [2, 2, 1, 1], out=out)
    assert result is out
    as_int = torch.int16 if go.element_size() == 2 else torch.int32
    go_np = go.view(as_int).numpy().view(DTYPES[dtype])
    expected = reference.circular_pad2d_backward(go_np, tuple(x.shape), [2, 2, 1, 1])
    np.testing.assert_array_equal(out.view(as_int).numpy(),
                                  bits(expected).view(np.dtype(f"i{go.element_size()}")))
    allocated = padloss.circular_pad2d_backward(go, x, [2, 2, 1, 1])
    assert isinstance(allocated, torch.Tensor) and allocated.dtype == tdtype
    assert torch.equal(allocated, out)


def test_empty_batch():
    go = np.ones((0, 2, 6, 7), np.float32)
    ws, ex = padloss.circular_pad2d_backward_get_workspace_size(
        go, np.empty((0, 2, 4, 5), np.float32), [1, 1, 1, 1], np.empty((0, 2, 4, 5), np.float32))
    assert ws == 0
    assert ex.run().shape == (0, 2, 4, 5)
    empty = padloss.circular_pad2d_backward(go, np.empty((0, 2, 4, 5), np.float32), [1, 1, 1, 1])
    assert empty.shape == (0, 2, 4, 5)


_THREADS_SCRIPT = """
import json, sys, numpy as np, ml_dtypes, numba, padloss
rng = np.random.default_rng(7)
digests = {}
for name, dt in [("float16", np.float16), ("bfloat16", ml_dtypes.bfloat16), ("float32", np.float32)]:
    go = rng.standard_normal((4, 16, 70, 71)).astype(dt)
    out = padloss.circular_pad2d_backward(go, np.empty((4, 16, 64, 64), dt), [3, 4, 3, 3])
    digests[name] = out.view(np.uint16 if out.itemsize == 2 else np.uint32).tolist()
print(json.dumps({"threads": numba.get_num_threads(), "digests": digests}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mprotect through ctypes")
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("shape, pads", [((3, 2, 4, 24), (3, 2, 2, 3)), ((2, 5, 24), (3, 3, 0, 0)),
                                         ((1, 1, 2, 20), (1, 7, 1, 1)), ((2, 2, 3, 17), (6, 1, 2, 1))])
def test_windows_read_nothing_past_the_array(dtype, shape, pads):
    """A row's windows read up to seven elements past its ends, which the kernel allows
    only where a row of the array lies on that side (the first and last planes' edge
    rows, direct or with a partner row, fold without them). gradOutput against an
    inaccessible page, ending before it and starting after it, with its planes in order
    and reversed (the first plane then the last in memory): a stray read faults."""
    go = _grad(shape, pads, dtype, seed=5, special=False)
    guarded = Guarded(go)
    for placed in (guarded.ending, guarded.starting, guarded.ending[::-1], guarded.starting[::-1]):
        out = padloss.circular_pad2d_backward(placed, np.empty(shape, DTYPES[dtype]), pads)
        np.testing.assert_array_equal(bits(out), bits(reference.circular_pad2d_backward(placed, shape, pads)))


def test_bits_do_not_depend_on_thread_count():
    runs = json_at_thread_counts(_THREADS_SCRIPT)
    assert runs[1]["digests"] == runs[2]["digests"]


def test_channels_last_rows_fold_as_rows_of_pixels():
    """Where both buffers keep the channels inside each pixel (channels-last), the plan folds
    rows of W*C elements with the width's pads times C, on the C-contiguous kernel; where
    one does not, (H, W) planes (the bits are the same either way: the property tests)."""
    from padloss_numba import pad_plan
    from padloss_numba.convert import F32

    shape, pads = (2, 4, 6, 5), (2, 1, 1, 3)
    gshape = (2, 4, 10, 8)
    go = with_layout(np.random.default_rng(3).standard_normal(gshape).astype(np.float32), "channels_last")
    for out_layout, channels in (("channels_last", 4), ("contiguous", 1)):
        out = with_layout(np.zeros(shape, np.float32), out_layout)
        ws, ex = padloss.circular_pad2d_backward_get_workspace_size(go, out, pads, out, backend="numba")
        plan = ex._plan
        assert plan._channels == channels
        if channels > 1:   # (crop, kept, before, after) of the width, times C
            assert list(plan._axes[4:8]) == [0, 5 * 4, 2 * 4, 1 * 4] and ws == 0   # a row on the stack
            assert ex._bound[0].shape == (2, 1, 10, 8 * 4) and ex._bound[0].flags.c_contiguous
            assert plan._kernel is pad_plan._kernel(F32, False, "C", True)[0]   # rows of 20 fit windows
        ex.run()
        np.testing.assert_array_equal(bits(out), bits(reference.circular_pad2d_backward(go, shape, pads)))


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("np_dtype", [np.float32, np.float64])
def test_row_buffers_past_the_stack_row_take_the_workspace(layout, np_dtype):
    """A chunk's row buffer of W' sums (W' * C for channels-last rows of pixels) lives on the
    kernel's stack up to pad_kernel.ROW_STACK_BYTES, and the plan needs no workspace;
    one pixel more and each chunk's row is in the workspace. Serial and threaded plans, on
    either side of the limit, give the reference's bits."""
    from padloss_numba.pad_kernel import AXES, ROW_STACK_BYTES

    size = np.dtype(np_dtype).itemsize
    channels = 3 if layout == "channels_last" else 1
    most = ROW_STACK_BYTES // size // channels          # W' of the longest row on the stack
    pads = (2, 1, 1, 1)
    for padded, planes in ((most, 1), (most + 1, 1), (most, 16), (most + 1, 16)):
        shape = (planes, channels, 3, padded - 3)
        go = with_layout(np.random.default_rng(padded).standard_normal(
            (planes, channels, 5, padded)).astype(np_dtype), layout)
        out = with_layout(np.zeros(shape, np_dtype), layout)
        ws, ex = padloss.circular_pad2d_backward_get_workspace_size(go, out, pads, out, backend="numba")
        row = padded * channels * size
        assert ws == (0 if padded == most else ex._plan._axes[AXES.chunks] * row)
        assert ex._plan._parallel == (planes > 1)
        ex.run()
        np.testing.assert_array_equal(bits(out), bits(reference.circular_pad2d_backward(go, shape, pads)))


def test_a_stack_array_is_line_aligned_and_left_unfilled():
    """indirect.stack_array (the pad's row on the stack, L1's stage) allocates in the
    function's entry block, line-aligned, and writes nothing there: Numba's own
    cgutils.alloca_once zero-fills what it allocates, an 8 KiB memset on every call of
    the pad's entry, for a row that every piece writes before it reads."""
    from numba import njit

    from padloss_numba.indirect import STACK_ALIGN, stack_array

    @njit(_nrt=False, cache=False)
    def stored_then_read(like, i, j, value):
        row = stack_array(like, 4096)
        row[i] = value
        return row[j]

    assert stored_then_read(np.zeros(1, np.float32), 7, 7, np.float32(1.5)) == 1.5
    ir = stored_then_read.inspect_llvm(stored_then_read.signatures[0])
    own, = [f for f in ir.split("\ndefine ")[1:] if "stored_then_read" in f.split("(")[0]
            and "@_ZN7cpython" not in f.split("(")[0] and "@cfunc" not in f.split("(")[0]]
    body = own[:own.index("\n}")]                      # the function itself, not its wrappers
    allocas = [line for line in body.splitlines() if " alloca " in line]
    assert len(allocas) == 1 and allocas[0].endswith(f"alloca [64 x <64 x i8>], align {STACK_ALIGN}"), allocas
    assert "memset" not in body and "zeroinitializer" not in body


def test_layouts_add_no_compiled_variant():
    """Contiguous, strided, channels-last, read-only, broadcast and Fortran-ordered
    buffers all run one of two kernels per dtype, threading mode and body (with windows or
    without), the C-contiguous one and the any-layout one, each compiled for one signature
    (compiling on call once made up to 10 variants of each)."""
    from padloss_numba import pad_kernel, pad_plan
    from padloss_numba.convert import F32

    shape, pads = (2, 3, 8, 8), (1, 2, 2, 1)
    base = np.random.default_rng(0).standard_normal((2, 3, 11, 11)).astype(np.float32)
    read_only = base.copy()
    read_only.flags.writeable = False
    channels_last = np.moveaxis(np.ascontiguousarray(np.moveaxis(base, 1, -1)), -1, 1)
    grads = [base, np.repeat(base, 2, axis=-1)[..., ::2], channels_last, read_only,
             np.broadcast_to(base[:1], base.shape), np.asfortranarray(base)]
    for go in grads:
        expected = bits(reference.circular_pad2d_backward(go, shape, pads))
        for out in (np.empty(shape, np.float32), np.empty((3, 2, 8, 8), np.float32).transpose(1, 0, 2, 3)):
            np.testing.assert_array_equal(bits(padloss.circular_pad2d_backward(go, out, pads, out=out)),
                                          expected)
    for windowed in (False, True):   # rows of 8 have no windows; channels-last rows of 24 have
        bodies = pad_kernel.chunk_body(F32, windowed).signatures
        layouts = {b[0].layout for b in bodies}
        assert len(bodies) == len(layouts) <= 2   # one signature a layout, shared by both entries
        for layout in layouts:
            assert len(pad_plan._kernel(F32, False, layout, windowed)[0].signatures) == 1
