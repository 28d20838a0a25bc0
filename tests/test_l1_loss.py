"""l1_loss_backward on the default (Numba) backend, against three oracles:
hand-worked values, the NumPy model in padloss.reference (bit-exact), and
PyTorch autograd of F.l1_loss (within a derived rounding bound: tests/bounds.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bounds
import padloss
from layouts import LAYOUTS, bits, output_at, with_layout
from padloss import reference
from padloss_numba import l1_kernel
from padloss_numba.l1_kernel import RANK
from padloss_numba.l1_plan import L1LossBackwardPlan, coalesce
from shared import json_at_thread_counts, peer_examples

# The oracles cast inf/NaN/out-of-range values on purpose.
pytestmark = pytest.mark.filterwarnings("ignore:.*encountered in:RuntimeWarning")

BF16 = ml_dtypes.bfloat16
F16, F32, F64 = np.float16, np.float32, np.float64
REDUCTIONS = (0, 1, 2, "none", "mean", "sum")

# (grad_output, self, target, out) dtypes; out None means P. A short list, so the
# property tests compile a bounded number of kernel variants.
DTYPE_MIXES = [
    (F32, F32, F32, None), (F16, F16, F16, None), (BF16, BF16, BF16, None), (F64, F64, F64, None),
    (F16, BF16, F16, None),                       # f16 + bf16 -> f32
    (F32, F16, BF16, None), (BF16, F32, BF16, None), (F16, F64, F32, None),
    (F32, F32, F32, F16), (F32, F32, F32, BF16),  # downcasts, rounded to nearest even
    (BF16, BF16, BF16, F32), (F64, F32, F64, BF16), (F16, F16, F16, F64),
    (F16, F16, np.int32, None), (BF16, np.int64, np.uint64, None), (np.bool_, F32, np.int8, None),
    (F64, np.uint64, np.int64, None), (np.int16, np.uint8, F16, F32),
]


def _values(rng, shape, dtype, special):
    """Random values of ``dtype``: floats at several scales, integers over their full
    range or near 0; with ``special``, signed zeros, inf, NaN and repeats (equal inputs)."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        wide = rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
        small = rng.integers(max(info.min, -4), 5, size=shape).astype(dtype)
        return np.where(rng.random(shape) < 0.5, wide, small)
    v = rng.standard_normal(shape) * rng.choice([1e-3, 1.0, 3e4, 1e38], size=shape)
    if special:
        pool = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 2.0])
        v = np.where(rng.random(shape) < 0.4, rng.choice(pool, size=shape), v)
    with np.errstate(over="ignore"):                 # 1e38 overflows float16 to inf on purpose
        return v.astype(dtype)


def _laid_out(values, layout):
    """``with_layout`` that also takes 0-d values (which have one layout)."""
    values = np.asarray(values)
    return with_layout(values, layout) if values.ndim else values.copy()


@st.composite
def broadcast_case(draw, max_rank=RANK, max_elements=3000):
    """B up to 8-D and three input shapes broadcasting to it (dims dropped or set to 1)."""
    rank = draw(st.integers(0, max_rank))
    shape = []
    for _ in range(rank):
        n = draw(st.sampled_from([1, 2, 2, 3, 3, 4, 5, 7]))
        if np.prod(shape + [n]) > max_elements:
            n = 1
        shape.append(n)
    if rank and draw(st.integers(0, 30)) == 0:
        shape[draw(st.integers(0, rank - 1))] = 0                  # now and then empty
    B = tuple(shape)

    def input_shape():
        lead = draw(st.integers(0, rank))
        return tuple(1 if draw(st.integers(0, 3)) == 0 else n for n in B[lead:])

    shapes = [input_shape() for _ in range(3)]
    if np.broadcast_shapes(*shapes) != B:                       # make one input carry B
        shapes[draw(st.integers(0, 2))] = B
    return B, shapes


@settings(max_examples=3000)
@given(broadcast_case(), st.sampled_from(DTYPE_MIXES), st.sampled_from(REDUCTIONS),
       st.lists(st.sampled_from(LAYOUTS + ("broadcast_view",)), min_size=4, max_size=4),
       st.integers(0, 2**32 - 1), st.booleans())
def test_bit_exact_against_reference(case, mix, reduction, layouts, seed, special):
    B, shapes = case
    rng = np.random.default_rng(seed)
    inputs = []
    for shape, dtype, layout in zip(shapes, mix[:3], layouts):
        v = _values(rng, shape, dtype, special)
        if special and rng.random() < 0.2:                       # equal inputs: sign 0
            v = np.zeros(shape, dtype)
        if layout == "broadcast_view" and v.ndim:                # a stride-0 dim, read-only
            inputs.append(np.broadcast_to(v[..., :1], shape))
        else:
            inputs.append(_laid_out(v, layout if layout in LAYOUTS else "contiguous"))
    expected = reference.l1_loss_backward(*inputs, reduction, out_dtype=mix[3])
    out_layout = layouts[3] if layouts[3] != "broadcast_view" else "sliced"
    out = _laid_out(np.full(B, 7, expected.dtype), out_layout)
    result = padloss.l1_loss_backward(*inputs, reduction, out=out)
    assert result is out
    np.testing.assert_array_equal(bits(out), bits(expected))


@pytest.mark.parametrize("mix", [(F32, F32, F32), (F16, F16, F16), (BF16, BF16, BF16),
                                 (F16, BF16, np.int64)], ids=str)
@pytest.mark.parametrize("shapes", [
    ((), (3, 70001), (3, 70001)),              # rows of several blocks; chunks split rows
    ((40000, 3), (40000, 3), (1, 3)),         # short inner dim, many rows
    ((5, 1, 1), (5, 7, 1000), (1000,)),       # three dims after coalescing
])
@pytest.mark.parametrize("reduction", ["none", "mean"])
@pytest.mark.parametrize("out_layout", ["contiguous", "permuted"])
def test_parallel_kernel_bit_exact(mix, shapes, reduction, out_layout):
    """Large enough for the parallel kernel: work split inside rows and across them."""
    rng = np.random.default_rng(3)
    go, x, t = (_values(rng, s, d, special=True) for s, d in zip(shapes, mix))
    x = with_layout(x, "reversed")
    expected = reference.l1_loss_backward(go, x, t, reduction)
    out = with_layout(np.empty(expected.shape, expected.dtype), out_layout)
    padloss.l1_loss_backward(go, x, t, reduction, out=out)
    np.testing.assert_array_equal(bits(out), bits(expected))


def test_sign_rules_worked_by_hand():
    nan, inf = np.nan, np.inf
    s = np.array([3, 1, 2, nan, 1, 2, 2, 1, 1, inf, -inf], F32)
    t = np.array([1, 3, 2, 1, nan, 2, 2, 2, 2, inf, 0], F32)
    g = np.array([1, 1, 1, 1, 1, inf, -2, 0, -0.0, 5, 5], F32)
    # >: +1; <: -1; equal: 0; NaN either side: 0; 0 * inf = NaN; 0 * -2 = -0.0;
    # -1 * +0 = -0.0; -1 * -0.0 = +0.0; inf == inf: 0; -inf < 0: -1
    out = padloss.l1_loss_backward(g, s, t, "none")
    assert out.dtype == F32
    np.testing.assert_array_equal(bits(out[[0, 1, 2, 3, 4, 6, 7, 8, 9, 10]]),
                                  bits(np.array([1, -1, 0, 0, 0, -0.0, -0.0, 0.0, 0, -5], F32)))
    assert np.isnan(out[5])


@pytest.mark.parametrize("reduction", ["none", "sum"])
@pytest.mark.parametrize("self_dtype", [BF16, F16, F32])
def test_unrounded_store_when_grad_has_the_output_dtype(reduction, self_dtype):
    """bfloat16 grad_output into a bfloat16 output, unscaled: every result is +-grad,
    a zero or a NaN, stored without rounding work; the bits still match the model."""
    g = np.array([1.5, -2.0, 0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, 3e38, 7.0], BF16)
    s = np.array([2, 1, 2, 1, 2, 1, 2, 1, 2, 1], self_dtype)
    t = np.array([1, 2, 1, 2, 2, 2, 1, 2, 1, np.nan], self_dtype)
    gi = g if reduction == "none" else g[4:5].reshape(())
    out = np.empty(10, BF16)
    padloss.l1_loss_backward(gi, s, t, reduction, out=out)
    np.testing.assert_array_equal(bits(out), bits(reference.l1_loss_backward(gi, s, t, reduction, BF16)))


@pytest.mark.parametrize("g", [3.4e38, -3.4e38, 1e-45, -1e-45, np.inf, np.nan, 0.1])
@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_fixed_grad_rounded_once_per_row(g, reduction):
    """A 0-d grad_output is rounded to the output dtype once per row, then flipped by the
    sign: the same bits as rounding every element, including a float32 grad that rounds
    past bfloat16's range (sign 0 must still give 0, not 0 * inf) or to a signed zero."""
    s = np.array([2, 1, 1, np.nan, 5], F32)
    t = np.array([1, 2, 1, 1, 5], F32)
    for out_dtype in (BF16, F16, F32, F64):
        out = np.empty(5, out_dtype)
        padloss.l1_loss_backward(np.float32(g), s, t, reduction, out=out)
        want = reference.l1_loss_backward(np.float32(g), s, t, reduction, out_dtype)
        np.testing.assert_array_equal(bits(out), bits(want), err_msg=f"{np.dtype(out_dtype).name}")


def test_mean_coefficient_divides_one_dim_at_a_time():
    # For B = (7, 5): float32(float32(1/7)/5) = 0x3CEA0EA2 but float32(1/35) = 0x3CEA0EA1.
    sequential = F32(F32(F32(1) / F32(7)) / F32(5))
    assert sequential.view(np.uint32) == 0x3CEA0EA2 and F32(1 / 35).view(np.uint32) == 0x3CEA0EA1
    out = padloss.l1_loss_backward(F32(1.0), np.ones((7, 5), F32), np.zeros(5, F32), "mean")
    assert (out.view(np.uint32) == 0x3CEA0EA2).all()
    # grad_output's dims count too: B = (2, 7, 5) divides by 2 once more (exact here)
    out3 = padloss.l1_loss_backward(np.ones((2, 1, 1), F32), np.ones((7, 5), F32), F32(0), "mean")
    assert out3.shape == (2, 7, 5) and (out3 == sequential / 2).all()


def test_integer_inputs_convert_to_the_promoted_dtype():
    # P = float16: int 2049 rounds to 2048 (tie to even), 2051 to 2052, so both equal self.
    out = padloss.l1_loss_backward(F16(2.0), np.array([2048, 2052, 2048], F16),
                                   np.array([2049, 2051, 5], np.int32), "none")
    assert out.dtype == F16 and out.tolist() == [0.0, 0.0, 2.0]
    # P = bfloat16: 2**60 + 2**52 + 1 is just above a tie; one rounding gives 2**60 + 2**53.
    out = padloss.l1_loss_backward(BF16(1.0), np.array([2.0**60 + 2.0**53], BF16),
                                   np.array([2**60 + 2**52 + 1], np.int64), "none")
    assert out.tolist() == [0.0]
    # uint64 above 2**63 and the int64 minimum, into float32
    big = np.array([2**64 - 1, 2**63 + 2**39 + 1], np.uint64)
    out = padloss.l1_loss_backward(F32(1.0), np.array([2.0**64, 2.0**63 + 2**40], F32), big, "sum")
    assert out.tolist() == [0.0, 0.0]
    out = padloss.l1_loss_backward(F32(1.0), np.array([-(2.0**63)], F32),
                                   np.array([-2**63], np.int64), "sum")
    assert out.tolist() == [0.0]
    # all-int inputs but a bool grad_output and a float target still promote to the float
    out = padloss.l1_loss_backward(np.array(True), np.array([3], np.uint8), F16(1.0), "sum")
    assert out.dtype == F16 and out.tolist() == [1.0]
    np.testing.assert_array_equal(out, reference.l1_loss_backward(True, np.array([3], np.uint8),
                                                                  F16(1.0), "sum"))


def test_dtype_promotion_and_downcast_output():
    s, t = np.array([1.0, 2.0], F16), np.array([2.0, 1.0], BF16)
    out = padloss.l1_loss_backward(np.array([1 + 2.0**-11, 3.0], F16), s, t, "none")
    assert out.dtype == F32 and out.tolist() == [-1.0, 3.0]      # f16 + bf16 -> f32
    g = np.array([1 + 2.0**-11, 1 + 3 * 2.0**-11, 65520.0], F32)
    out = padloss.l1_loss_backward(g, np.ones(3, F32), np.zeros(3, F32), "sum",
                                   out=np.empty(3, F16))
    assert out.tolist() == [1.0, 1 + 2.0**-9, np.inf]              # ties to even, 65520 -> inf


def test_two_phase_form_and_repeat_runs():
    rng = np.random.default_rng(1)
    x, t = rng.standard_normal((4, 6)).astype(F32), rng.standard_normal(6).astype(F32)
    gi = np.full((4, 6), np.nan, F32)
    ws, ex = padloss.l1_loss_backward_get_workspace_size(F32(2.0), x, t, "mean", gi)
    assert ws == 0 and ex.workspace_size == 0
    assert np.isnan(gi).all()                                    # phase 1 writes nothing
    assert ex.run() is gi
    np.testing.assert_array_equal(bits(gi), bits(reference.l1_loss_backward(F32(2.0), x, t, 1)))
    x2 = rng.standard_normal((4, 6)).astype(F32)
    ex.run(self=x2, grad_output=np.array(-1.0, F32))
    np.testing.assert_array_equal(bits(gi), bits(reference.l1_loss_backward(F32(-1.0), x2, t, 1)))


def test_empty_tensors():
    x, t = np.zeros((0, 3), F32), np.zeros(3, F32)
    ws, ex = padloss.l1_loss_backward_get_workspace_size(F32(1), x, t, "mean", np.empty((0, 3), F32))
    assert ws == 0 and ex.run().shape == (0, 3)
    out = padloss.l1_loss_backward(np.ones((2, 1, 1), F16), np.zeros((0, 1), F16), t, "sum")
    assert out.shape == (2, 0, 3) and out.dtype == F32


def test_zero_dim_everything():
    out = padloss.l1_loss_backward(F32(3.0), F32(2.0), F32(1.0), "mean")
    assert out.shape == () and out == 3.0                        # coef of a 0-d B is 1


def test_common_layouts_coalesce_to_few_dims():
    """The plan merges what it can, so kernels see one or two dims in the common cases."""
    def plan(*arrays):
        problem = padloss.l1_loss_backward_get_workspace_size(*arrays[:3], 1, arrays[3])[1].problem
        return L1LossBackwardPlan(problem, threads=2).loop_shape
    a = np.ones((4, 5, 6), F32)
    assert plan(F32(1), a, a, a.copy()) == (120,)
    assert plan(F32(1), a, np.ones(6, F32), a.copy()) == (20, 6)             # self (B, N), target (N,)
    t = np.ones((4, 5, 6), F32, order="F")
    assert plan(F32(1), t, t, np.empty((4, 5, 6), F32, order="F")) == (120,)  # walked in memory order
    r = a[::-1, ::-1, ::-1]
    assert plan(F32(1), r, r, np.empty((4, 5, 6), F32)[::-1, ::-1, ::-1]) == (120,)
    # the output walks backwards: every tensor's dims flip, bases move to the far end
    shape, strides, bases = coalesce((2, 3), [(3, 1), (0, 0), (-3, -1)], [0, 0, 5])
    assert shape == (6,) and strides == ((-1,), (0,), (1,)) and bases == (5, 0, 0)


@pytest.mark.vs_peer
@settings(max_examples=peer_examples(200))
@given(broadcast_case(max_rank=4, max_elements=500), st.sampled_from([F32, F64, F16, BF16]),
       st.sampled_from(["none", "mean", "sum"]), st.integers(0, 2**32 - 1))
def test_matches_torch_autograd(case, dtype, reduction, seed):
    """F.l1_loss's gradient in float64, where torch's shapes agree: self carries B (torch
    sums the gradient of a broadcast self back to its shape), grad_output is 0-d unless
    "none". padloss is within its roundings of that: the mean's factor (one a dim of B)
    and the product in float32 or float64, and the cast into the dtype (one)."""
    torch = pytest.importorskip("torch")
    B, shapes = case
    if 0 in B:
        return
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(B).astype(dtype)
    t = rng.standard_normal(shapes[2]).astype(dtype)
    if t.size:
        t.reshape(-1)[:: 3] = np.broadcast_to(x, B).reshape(-1)[0]  # a few equal elements
    g = rng.standard_normal(B if reduction == "none" else ()).astype(dtype)

    def as_torch(a):
        return torch.from_numpy(np.asarray(a, F64))

    xt = as_torch(x).requires_grad_()
    torch.nn.functional.l1_loss(xt, as_torch(t).expand(B), reduction=reduction).backward(as_torch(g))
    exact = xt.grad.numpy()
    exact_error = bounds.rounding_bound(F64, 2, np.abs(exact))   # grad / N, or times a rounded 1/N
    ours = padloss.l1_loss_backward(g, x, t, reduction)
    assert ours.dtype == dtype
    bounds.assert_within(ours, exact, bounds.rounding_bound(dtype, len(B) + 2, np.abs(exact)) + exact_error,
                         "padloss")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_torch_tensors_zero_copy(dtype):
    torch = pytest.importorskip("torch")
    tdtype = getattr(torch, dtype)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(5, 8, generator=generator).to(tdtype)
    t = torch.randn(8, generator=generator).to(tdtype)
    out = torch.empty(8, 5, dtype=tdtype).t()                     # strided output
    result = padloss.l1_loss_backward(torch.tensor(2.0, dtype=tdtype), x, t, "mean", out=out)
    assert result is out
    as_int = torch.int16 if x.element_size() == 2 else torch.int32
    np_dtype = {"float16": F16, "bfloat16": BF16, "float32": F32}[dtype]

    def view(a):
        return a.contiguous().view(as_int).numpy().view(np_dtype)

    expected = reference.l1_loss_backward(np.array(2.0, np_dtype), view(x), view(t), "mean")
    np.testing.assert_array_equal(view(out), expected)
    allocated = padloss.l1_loss_backward(torch.tensor(2.0, dtype=tdtype), x, t, "mean")
    assert isinstance(allocated, torch.Tensor) and allocated.dtype == tdtype
    assert torch.equal(allocated, out)
    # torch's autograd divides by numel in the input dtype (one rounding, two where it
    # multiplies by a rounded 1/numel); padloss rounds the factor once a dim, the product
    # once and the cast once: each within its roundings of the exact value
    xg = x.clone().requires_grad_()
    torch.nn.functional.l1_loss(xg, t.expand(5, 8)).backward(torch.tensor(2.0, dtype=tdtype))
    exact = np.sign(view(x).astype(F64) - view(t).astype(F64)) * 2.0 / 40
    bounds.assert_within(xg.grad, exact, bounds.rounding_bound(tdtype, 2, np.abs(exact)), "torch")
    bounds.assert_within(allocated, exact, bounds.rounding_bound(tdtype, 2 + 2, np.abs(exact)), "padloss")


_THREADS_SCRIPT = """
import json, numpy as np, ml_dtypes, numba, padloss
rng = np.random.default_rng(7)
digests = {}
for name, dt in [("float16", np.float16), ("bfloat16", ml_dtypes.bfloat16), ("float32", np.float32)]:
    x = rng.standard_normal((300, 1001)).astype(dt)
    t = rng.standard_normal(1001).astype(dt)
    for reduction in ("none", "mean"):
        go = rng.standard_normal((300, 1001)).astype(dt) if reduction == "none" else np.array(0.7, dt)
        out = padloss.l1_loss_backward(go, x, t, reduction)
        digests[name + reduction] = out.view(np.uint16 if out.itemsize == 2 else np.uint32).tolist()
print(json.dumps({"threads": numba.get_num_threads(), "digests": digests}))
"""


def test_bits_do_not_depend_on_thread_count():
    runs = json_at_thread_counts(_THREADS_SCRIPT)
    assert runs[1]["digests"] == runs[2]["digests"]



@pytest.mark.parametrize("mix", [(F32, F32, F32, None), (F16, F16, F16, None), (BF16, BF16, BF16, None),
                                 (F16, F16, F16, F64), (F32, F32, F32, BF16), (F16, BF16, np.int64, None)],
                         ids=str)
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("skip", [0, 4, 26, 60, 1])
def test_streamed_output_bit_exact(streamed, mix, reduction, skip):
    """Non-temporal stores: runs before a row's first line boundary, whole steps of lines,
    and the rest, in rows starting at every alignment; rows of other strides in runs;
    misaligned elements store normally."""
    rng = np.random.default_rng(skip)
    n = 40_009                                        # parallel, and not a whole number of lines
    go_shape = () if reduction != "none" else (n,)
    go, x, t = (_values(rng, s, d, special=True) for s, d in zip((go_shape, (n,), (n,)), mix))
    expected = reference.l1_loss_backward(go, x, t, reduction, out_dtype=mix[3])
    out = output_at((n,), expected.dtype, skip)
    out[...] = 7
    _, executor = padloss.l1_loss_backward_get_workspace_size(go, x, t, reduction, out)
    assert L1LossBackwardPlan(executor.problem, threads=2).streams
    executor.run()
    np.testing.assert_array_equal(bits(out), bits(expected))
    # rows that do not coalesce (a column slice of the output): each starts at a new alignment
    x2, t2 = (_values(rng, (37, 1001), d, special=True) for d in mix[1:3])
    go2 = _values(rng, go_shape and (1001,), mix[0], special=True)
    expected = reference.l1_loss_backward(go2, x2, t2, reduction, out_dtype=mix[3])
    out = output_at((37, 1030), expected.dtype, skip)[:, 3:1004]
    out[...] = 7
    padloss.l1_loss_backward(go2, x2, t2, reduction, out=out)
    np.testing.assert_array_equal(bits(out), bits(expected))
    # a target broadcast along the rows (inner stride 0): no whole steps, runs only
    t3 = _values(rng, (37, 1), mix[2], special=True)
    expected = reference.l1_loss_backward(go2, x2, t3, reduction, out_dtype=mix[3])
    out = output_at((37, 1001), expected.dtype, skip)
    out[...] = 7
    padloss.l1_loss_backward(go2, x2, t3, reduction, out=out)
    np.testing.assert_array_equal(bits(out), bits(expected))


@pytest.mark.parametrize("dtype", [F16, BF16])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("gap", [-2000, -192, -16, 0, 16, 48, 192, 2048])
def test_runs_walk_either_way_by_where_the_output_lies(dtype, reduction, gap):
    """The 16-bit rows walk their vector runs backward where the output lies just ahead of
    its inputs modulo a page (l1_kernel._runs_walk): the same bits either way, in rows of
    several runs and a remainder."""
    rng = np.random.default_rng(gap % 97)
    n = 70_001
    shapes = ((n,) if reduction == "none" else (), (n,), (n,))
    page = 4096
    skips = (256, 256, 256) if reduction == "none" else (0, 256, 256)
    go, x, t = (output_at(s, dtype, skip, page) for s, skip in zip(shapes, skips))
    for a in (go, x, t):
        a[...] = _values(rng, a.shape, dtype, special=True)
    expected = reference.l1_loss_backward(go, x, t, reduction)
    out = output_at((n,), dtype, 256 + gap % page, page)
    out[...] = 7
    padloss.l1_loss_backward(go, x, t, reduction, out=out)
    np.testing.assert_array_equal(bits(out), bits(expected))
    # and the way the walk goes: backward just ahead, forward otherwise
    ahead = 1 if 0 < gap < l1_kernel.ALIAS_NEAR else -1 if -l1_kernel.ALIAS_NEAR < gap < 0 else 0
    o16, x16 = out.view(np.uint16), x.view(np.uint16)
    assert l1_kernel._ahead(o16, 0, x16, 0) == ahead
    lanes = l1_kernel.VARYING_PICK_LANES if reduction == "none" else l1_kernel.FIXED_PICK_LANES
    first, step = l1_kernel._runs_walk(0, 5, lanes, 3 * ahead)
    assert (first, step) == ((4 * lanes, -lanes) if ahead > 0 else (0, lanes))


# Numba compiling for an AVX2 CPU without AVX512-FP16, whatever the host.
AVX2_TARGET = {"NUMBA_CPU_NAME": "haswell", "NUMBA_CPU_FEATURES": ",".join(
    "+" + f for f in ("64bit adx aes avx avx2 bmi bmi2 cmov crc32 cx16 cx8 f16c fma fsgsbase fxsr "
                      "invpcid lzcnt mmx movbe pclmul popcnt rdrnd sahf sse sse2 sse3 sse4.1 sse4.2 "
                      "ssse3 xsave xsaveopt").split())}

_SIGNS_SCRIPT = """
import json
import ml_dtypes
import numpy as np
import padloss
from padloss import reference
from padloss_numba import convert

rng = np.random.default_rng(0)
mismatches = {}
for dtype, grads in ((np.float16, (np.float16, np.float32)), (ml_dtypes.bfloat16, (ml_dtypes.bfloat16,))):
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    every = bits.view(dtype)   # every value, NaNs and infs too
    x = np.concatenate([every, every, every, every])
    t = np.concatenate([every, -every, rng.permutation(every), (bits + np.uint16(1)).view(dtype)])
    for g_dtype in grads:
        for reduction in ("mean", "none"):
            g = g_dtype(0.75) if reduction == "mean" else rng.permutation(x).astype(g_dtype)
            got = padloss.l1_loss_backward(g, x, t, reduction)
            want = reference.l1_loss_backward(g, x, t, reduction)
            differ = got.view(f"u{got.itemsize}") != want.view(f"u{want.itemsize}")
            nans = np.isnan(got.astype(np.float32)) & np.isnan(want.astype(np.float32))
            key = f"{np.dtype(dtype).name} {np.dtype(g_dtype).name} {reduction}"
            mismatches[key] = int(np.count_nonzero(differ & ~nans))   # NaN = NaN
print(json.dumps({"native": convert.HALF_COMPARES_NATIVE, "sign_lanes": convert.SIGN_LANES,
                  "mismatches": mismatches}))
"""


def test_16_bit_signs_on_an_avx2_target():
    """In a process that compiles for an AVX2 CPU: every float16 and bfloat16 value against
    itself, its negation, a shuffle and the next bit pattern, bit-exact to the reference (a
    NaN's sign and payload are not the contract's: none picks a NaN grad's bits). A grad of
    their own kind picks on the stored bits in 16-bit lanes, ordered by psignw
    (l1_kernel._picked); a float32 grad with float16 operands signs their float32
    difference, as float16 compares are not native there (l1_kernel._sign)."""
    env = dict(os.environ, **AVX2_TARGET)
    proc = subprocess.run([sys.executable, "-c", _SIGNS_SCRIPT], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.splitlines()[-1])
    cases = [f"{d} {g} {r}" for d, grads in (("float16", ("float16", "float32")), ("bfloat16", ("bfloat16",)))
             for g in grads for r in ("mean", "none")]
    assert result == {"native": False, "sign_lanes": 16, "mismatches": dict.fromkeys(cases, 0)}


@pytest.mark.parametrize("pair, g_dtype, out_dtype", [
    ((F16, F16), F32, F16),              # float16's difference, its sign bit flipping g's
    ((F16, F16), np.float64, F16),       # the difference in float64, g in float32
    ((F16, F16), F32, np.float64),       # the difference in float32, g in float64
    ((BF16, BF16), F32, BF16),           # compared as they are
    ((F16, F16), F16, F16),              # one kind throughout: picked on the stored bits
    ((BF16, BF16), BF16, BF16),
    ((F16, BF16), F16, F32),             # a mixed pair
    ((F32, F32), F32, F16),              # float32, compared as they are
    ((np.float64, F32), np.float64, np.float64),   # float64 bits
], ids=str)
def test_fixed_grad_signs_picked_across_widths(pair, g_dtype, out_dtype):
    """A fixed grad's results, g's bits picked by the sign for 16-bit pairs and multiplied
    for the others (l1_kernel.signed_term), in every mix of compute width (float64 with a
    float64 grad) and output width: greater, less, equal, NaN, signed zeros and infinities,
    negative and positive grads. Mean only: sum takes the same path, and each mix is a
    kernel variant to compile."""
    s = np.array([1, 2, 3, np.nan, 5, -0.0, np.inf, -np.inf, 65504, 1e-7], np.float32)
    t = np.array([2, 2, 1, 1, np.inf, 0.0, np.inf, 0, -65504, 0], np.float32)
    x, y = s.astype(pair[0]), t.astype(pair[1])
    for g in (-2.5, 3.0, -0.0):
        out = np.empty(s.shape, out_dtype)
        padloss.l1_loss_backward(np.asarray(g, g_dtype), x, y, "mean", out=out)
        want = reference.l1_loss_backward(np.asarray(g, g_dtype), x, y, "mean", out_dtype)
        np.testing.assert_array_equal(bits(out), bits(want), err_msg=f"g={g}")
