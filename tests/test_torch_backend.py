"""The ``torch`` backend (padloss_torch: the device-generic torch ops) on torch's CPU device.

The same code serves NPU and CUDA tensors; here it is checked bit for bit against
the NumPy model in padloss.reference, for both ops and every dtype, and it is
checked that it is chosen only where it should be."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

import padloss  # noqa: E402
from layouts import bits, with_layout  # noqa: E402
from padloss import reference  # noqa: E402
from padloss.arrays import TensorMeta  # noqa: E402
from padloss.dispatch import select_backend  # noqa: E402
from padloss.problem import Problem  # noqa: E402
from padloss_torch.rounding import round_half_away_from_zero, round_nearest_even  # noqa: E402
from shared import pad_axis  # noqa: E402

NUMPY = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32,
         "float64": np.float64, "bool": np.bool_, "int8": np.int8, "int16": np.int16,
         "int32": np.int32, "int64": np.int64, "uint8": np.uint8}
FLOATS = ("float16", "bfloat16", "float32", "float64")
INTEGERS = ("bool", "int8", "int16", "int32", "int64", "uint8")
TORCH_LAYOUTS = ("contiguous", "fortran", "sliced", "permuted")   # torch has no negative strides
# Values whose sums and casts land on ties, signed zeros, overflow and NaN.
SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 2**-11, -2**-11, 2**-8, -2**-9,
                    3 * 2**-12, 65504.0, 2**-24, -2.5])


def to_torch(a: np.ndarray) -> "torch.Tensor":
    """A torch CPU tensor over the same memory (bfloat16 through int16)."""
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def laid_out(values: np.ndarray, layout: str) -> np.ndarray:
    """``values`` in ``layout`` (layouts.with_layout), a 0-d array as it is."""
    return with_layout(values, layout) if values.ndim else values.copy()


def to_numpy(t: "torch.Tensor") -> np.ndarray:
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def assert_same_bits(actual: np.ndarray, expected: np.ndarray) -> None:
    """Bit for bit, except a NaN's payload and sign: the spec says NaN stays NaN, and
    torch's casts produce their own NaN patterns (NumPy's keep the payload)."""
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    actual, expected = actual.reshape(-1), expected.reshape(-1)
    nan = np.isnan(expected.astype(np.float64))
    np.testing.assert_array_equal(np.isnan(actual.astype(np.float64)), nan)
    np.testing.assert_array_equal(bits(actual)[~nan], bits(expected)[~nan])


def random_values(rng, shape, dtype: str, special: bool) -> np.ndarray:
    if dtype in INTEGERS:
        return random_integers(rng, shape, dtype)
    v = rng.standard_normal(shape) * rng.choice([1e-3, 1.0, 3e4], size=shape)
    if special:
        v = np.where(rng.random(shape) < 0.4, rng.choice(SPECIAL, size=shape), v)
    return np.asarray(v).astype(NUMPY[dtype])


# Integers that double-round through float32 on their way to bfloat16 (one rounding
# gives 2**30 + 2**23) and other edges; int64 stays below 2**53 (see padloss_torch.l1.as_float).
INTEGER_EDGES = np.array([0, 1, -1, 2**24 + 1, 2**30 + 2**22 + 1, -(2**30 + 2**22 + 1), 2**31 - 1,
                          -2**31, 2**53 - 1, -(2**53 - 1)], dtype=np.int64)


def random_integers(rng, shape, dtype: str) -> np.ndarray:
    if dtype == "bool":
        return np.asarray(rng.random(shape) < 0.5)
    info = np.iinfo(NUMPY[dtype])
    low, high = max(info.min, -(2**53 - 1)), min(info.max, 2**53 - 1)
    v = rng.integers(low, high, size=shape, endpoint=True)
    edges = INTEGER_EDGES[(INTEGER_EDGES >= low) & (INTEGER_EDGES <= high)]
    v = np.where(rng.random(shape) < 0.3, rng.choice(edges, size=shape), v)
    return np.asarray(v).astype(NUMPY[dtype])


# --- circular_pad2d_backward ---------------------------------------------------------------------


@st.composite
def pad_case(draw):
    dtype = draw(st.sampled_from(FLOATS))
    lead = draw(st.sampled_from([(), (1,), (2,), (3,)]))
    (h, top, bottom), (w, left, right) = draw(pad_axis()), draw(pad_axis())
    shape = lead + (draw(st.integers(1, 3)), h, w)
    pads = (left, right, top, bottom)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    grad_shape = shape[:-2] + (h + top + bottom, w + left + right)
    values = random_values(rng, grad_shape, dtype, special=draw(st.booleans()))
    return dtype, shape, pads, values, draw(st.sampled_from(TORCH_LAYOUTS)), \
        draw(st.sampled_from(TORCH_LAYOUTS))


@settings(max_examples=600)
@given(pad_case())
def test_pad_bit_exact_against_reference(case):
    dtype, shape, pads, values, go_layout, out_layout = case
    go = to_torch(with_layout(values, go_layout))
    out = to_torch(with_layout(np.full(shape, 7, NUMPY[dtype]), out_layout))
    self_ = torch.empty(shape, dtype=out.dtype)
    result = padloss.circular_pad2d_backward(go, self_, pads, out=out, backend="torch")
    assert result is out
    assert_same_bits(to_numpy(out), reference.circular_pad2d_backward(values, shape, pads))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_pad_rounds_ties_away_from_zero(dtype):
    # W = 2, left pad 1: grad_input[1] = centre + left band = go[2] + go[0], an exact tie
    # between two neighbours of the storage format; ties to even would give 1.0.
    half_ulp = {"float16": 2**-11, "bfloat16": 2**-8}[dtype]
    go = to_torch(np.array([[[half_ulp, 3.0, 1.0]], [[-half_ulp, 3.0, -1.0]]], NUMPY[dtype]))
    out = padloss.circular_pad2d_backward(go, torch.empty(2, 1, 2, dtype=go.dtype), [1, 0, 0, 0],
                                          backend="torch")
    expected = np.array([[[3.0, 1 + 2 * half_ulp]], [[3.0, -1 - 2 * half_ulp]]], NUMPY[dtype])
    assert_same_bits(to_numpy(out), expected)


def test_pad_numpy_arrays_on_request():
    rng = np.random.default_rng(3)
    go = rng.standard_normal((2, 3, 8, 9)).astype(ml_dtypes.bfloat16)
    go.flags.writeable = False                       # inputs are only read
    out = np.full((2, 3, 6, 5), np.nan, ml_dtypes.bfloat16)
    assert padloss.circular_pad2d_backward(go, out, [2, 2, 1, 1], out=out, backend="torch") is out
    assert_same_bits(out, reference.circular_pad2d_backward(go, out.shape, [2, 2, 1, 1]))


def test_pad_two_phase_repeat_runs():
    pads = [2, 2, 1, 1]
    go = torch.randn(2, 3, 8, 9).to(torch.float16)
    gi = torch.full((2, 3, 6, 5), float("nan"), dtype=torch.float16)
    ws, ex = padloss.circular_pad2d_backward_get_workspace_size(go, gi, pads, gi, backend="torch")
    assert ws == 0 and ex.backend.name == "torch"
    assert torch.isnan(gi).all()                     # phase 1 writes nothing
    assert ex.run() is gi
    assert_same_bits(gi.numpy(), reference.circular_pad2d_backward(go.numpy(), gi.shape, pads))
    go2 = torch.randn(2, 3, 8, 9).to(torch.float16)
    assert ex.run(grad_output=go2) is gi
    assert_same_bits(gi.numpy(), reference.circular_pad2d_backward(go2.numpy(), gi.shape, pads))


# --- l1_loss_backward ---------------------------------------------------------------------------


@st.composite
def l1_case(draw):
    out_shape = tuple(draw(st.lists(st.integers(1, 4), max_size=4)))
    shapes = []
    for _ in range(3):   # each input: a suffix of B with some dims broadcast from 1
        rank = draw(st.integers(0, len(out_shape)))
        dims = out_shape[len(out_shape) - rank:]
        shapes.append(tuple(d if draw(st.booleans()) else 1 for d in dims))
    dtypes = [draw(st.sampled_from(FLOATS + INTEGERS)) for _ in range(3)]
    if not any(d in FLOATS for d in dtypes[:2]):
        # a float among grad_output and self: reference.promote is undefined for two integers
        dtypes[draw(st.integers(0, 1))] = draw(st.sampled_from(FLOATS))
    promoted = reference.promote(*(NUMPY[d] for d in dtypes)).name
    out_dtype = draw(st.sampled_from((promoted,) + FLOATS))
    reduction = draw(st.sampled_from([0, 1, 2, "none", "mean", "sum"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    special = draw(st.booleans())
    values = [random_values(rng, s, d, special) for s, d in zip(shapes, dtypes)]
    layouts = [draw(st.sampled_from(TORCH_LAYOUTS)) for _ in range(4)]
    return values, reduction, out_dtype, layouts


@settings(max_examples=600)
@given(l1_case())
def test_l1_bit_exact_against_reference(case):
    (g, s, t), reduction, out_dtype, layouts = case
    expected = reference.l1_loss_backward(g, s, t, reduction, out_dtype=NUMPY[out_dtype])
    out = to_torch(laid_out(np.full(expected.shape, 7, NUMPY[out_dtype]), layouts[-1]))
    inputs = [to_torch(laid_out(v, layout)) for v, layout in zip((g, s, t), layouts)]
    result = padloss.l1_loss_backward(*inputs, reduction, out=out, backend="torch")
    assert result is out
    assert_same_bits(to_numpy(out), expected)


def test_l1_integer_to_bfloat16_rounds_once():
    # 2**30 + 2**22 + 1 is 2**30 + 2**23 in bfloat16; through float32 it would tie to 2**30.
    g = torch.tensor([2**30 + 2**22 + 1, 3], dtype=torch.int32)
    s = torch.tensor([2**30 + 2**22 + 1, 2**30 + 2**22 + 1], dtype=torch.int64)
    t = torch.tensor([-1.0, 2.0**30], dtype=torch.bfloat16)
    out = padloss.l1_loss_backward(g, s, t, "sum", backend="torch")
    assert out.dtype == torch.bfloat16
    assert out.float().tolist() == [2.0**30 + 2**23, 3.0]   # and self > target in the second


def test_l1_numpy_arrays_on_request_and_mean_divides_per_dim():
    shape = (3, 7, 11)
    g = np.float32(1.0)
    s = np.ones(shape, np.float32)
    t = np.zeros((7, 1), np.float16)
    out = padloss.l1_loss_backward(g, s, t, "mean", backend="torch")
    coef = np.float32(np.float32(np.float32(1.0) / np.float32(3)) / np.float32(7)) / np.float32(11)
    assert out.dtype == np.float32 and (out == coef).all()
    assert_same_bits(out, reference.l1_loss_backward(g, s, t, "mean"))


# --- the rounding helpers, exhaustively where the formats are small -----------------------------


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_round_half_away_on_every_midpoint(dtype):
    np_dtype = NUMPY[dtype]
    patterns = np.arange(0x7C00 if dtype == "float16" else 0x7F80, dtype=np.uint16)   # finite >= 0
    values = patterns.view(np_dtype).astype(np.float64)
    above = (patterns + 1).view(np_dtype).astype(np.float64)
    finite = np.isfinite(above)
    mid = ((values + above) / 2)[finite].astype(np.float32)             # exact: 1 bit more
    near = np.concatenate([mid, np.nextafter(mid, np.float32(np.inf)), np.nextafter(mid, np.float32(0))])
    rng = np.random.default_rng(0)
    random = rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    x = np.concatenate([near, -near, random, np.float32([np.inf, -np.inf, np.nan, 65520.0, 3.4e38])])
    got = round_half_away_from_zero(torch.from_numpy(x), getattr(torch, dtype))
    assert_same_bits(to_numpy(got), reference.round_half_away_from_zero(x, np_dtype))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_round_nearest_even_from_float64_rounds_once(dtype):
    np_dtype = NUMPY[dtype]
    rng = np.random.default_rng(1)
    base = rng.standard_normal(100_000) * rng.choice([1e-6, 1.0, 6e4, 1e38], 100_000)
    nearest = reference.round_half_to_even(base, np_dtype)
    low = nearest.astype(np.float64)
    high = np.nextafter(nearest, np.full_like(nearest, np.inf)).astype(np.float64)
    keep = np.isfinite(low) & np.isfinite(high)
    mid, off = (low + high)[keep] / 2, np.abs(high - low)[keep] * 2**-30
    # just off exact midpoints: where rounding through float32 goes wrong
    x = np.concatenate([base, mid + off, mid - off, [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e300, -1e-300]])
    got = round_nearest_even(torch.from_numpy(x), getattr(torch, dtype))
    assert_same_bits(to_numpy(got), reference.round_half_to_even(x, np_dtype))


# --- how the torch backend is chosen -------------------------------------------------------------


def pad_args():
    go = torch.ones(2, 3, 7, 9)
    return go, torch.empty(2, 3, 5, 5), [2, 2, 1, 1], torch.empty(2, 3, 5, 5)


def test_torch_cpu_tensors_go_to_numba_by_default():
    _, ex = padloss.circular_pad2d_backward_get_workspace_size(*pad_args())
    assert ex.backend.name == "numba"
    g, s = torch.tensor(1.0), torch.randn(4, 5)
    _, ex = padloss.l1_loss_backward_get_workspace_size(g, s, torch.zeros(5), "mean", torch.empty(4, 5))
    assert ex.backend.name == "numba"


def test_torch_backend_on_request(monkeypatch):
    _, ex = padloss.circular_pad2d_backward_get_workspace_size(*pad_args(), backend="torch")
    assert ex.backend.name == "torch"
    with padloss.use_backend("torch"):
        _, ex = padloss.circular_pad2d_backward_get_workspace_size(*pad_args())
    assert ex.backend.name == "torch"
    monkeypatch.setattr(padloss.config.current, "backend", "torch")
    _, ex = padloss.circular_pad2d_backward_get_workspace_size(*pad_args())
    assert ex.backend.name == "torch"


def test_cuda_data_goes_to_torch_automatically():
    # Metadata only: no CUDA device is needed to see where a CUDA call would go.
    meta = TensorMeta("float32", (2, 3, 5, 5), (75, 25, 5, 1))
    go_meta = TensorMeta("float32", (2, 3, 7, 9), (189, 63, 9, 1))
    problem = Problem("circular_pad2d_backward", "cuda:0", (go_meta, meta), (2, 2, 1, 1))
    assert select_backend(problem).name == "torch"
    info = {b.name: b for b in padloss.available_backends()}["torch"]
    assert info.available and info.devices == ("cuda",)


def test_negative_strides_refused_by_name():
    go = np.ones((1, 3, 7, 9), np.float32)[..., ::-1]
    with pytest.raises(padloss.InvalidArgumentError, match="negative strides"):
        padloss.circular_pad2d_backward(go, np.empty((1, 3, 5, 5), np.float32), [2, 2, 1, 1],
                                        backend="torch")


def test_stream_is_ignored_on_the_cpu():
    go, x, pads, out = pad_args()
    _, ex = padloss.circular_pad2d_backward_get_workspace_size(go, x, pads, out, backend="torch")
    ex.run(stream=object())   # the spec: the stream is ignored on the CPU
    assert_same_bits(out.numpy(), reference.circular_pad2d_backward(go.numpy(), out.shape, pads))
