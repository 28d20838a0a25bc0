"""Hand-worked checks of padloss.reference, the NumPy oracle of the operator numerics.

Every expected array below was worked out by hand (or with exact Fraction arithmetic,
shown inline); torch is used only as an independent cross-check, within the rounding
bounds of what each side computes (tests/bounds.py).
"""

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import bounds
from padloss import reference as ref

torch = pytest.importorskip("torch")
F = torch.nn.functional

BF16 = np.dtype(ml_dtypes.bfloat16)


def bits_equal(a, b):
    """Bit-exact equality (distinguishes -0.0 from +0.0, NaN payloads compared as NaN)."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype, (a.dtype, b.dtype)
    assert a.shape == b.shape, (a.shape, b.shape)
    nan = np.isnan(a.astype(np.float64))
    assert np.array_equal(nan, np.isnan(b.astype(np.float64)))
    width = {2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize]
    assert np.array_equal(a.view(width)[~nan], b.view(width)[~nan]), (a, b)
    return True


def f32_from_bits(u):
    return np.array(u, dtype=np.uint32).view(np.float32)[()]


# ======================================================================================
# circular_pad2d
# ======================================================================================

def test_spec_example():
    g = np.ones((1, 1, 7), dtype=np.float32)
    out = ref.circular_pad2d_backward(g, (1, 1, 5), [1, 1, 0, 0])
    bits_equal(out, np.array([[[2, 1, 1, 1, 2]]], dtype=np.float32))


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float32, np.float64])
def test_spec_example_all_dtypes(dtype):
    g = np.ones((1, 1, 7), dtype=dtype)
    out = ref.circular_pad2d_backward(g, (1, 1, 5), [1, 1, 0, 0])
    bits_equal(out, np.array([[[2, 1, 1, 1, 2]]], dtype=dtype))


def test_4d_corners_collect_four_terms():
    # self (1,1,3,3), pads 1 on every side, grad g[i, j] = 5*i + j on the 5x5 output.
    # Rows: input row 0 <- padded rows {1 (centre), 4 (bottom wrap)}; row 1 <- {2};
    #       row 2 <- {3 (centre), 0 (top wrap)}.  Columns likewise.
    # (0,0): g11+g41+g14+g44 = 6+21+9+24 = 60     (0,1): g12+g42 = 7+22 = 29
    # (0,2): g13+g43+g10+g40 = 8+23+5+20 = 56     (1,0): g21+g24 = 11+14 = 25
    # (1,1): g22 = 12                             (1,2): g23+g20 = 13+10 = 23
    # (2,0): g31+g01+g34+g04 = 16+1+19+4 = 40     (2,1): g32+g02 = 17+2 = 19
    # (2,2): g33+g03+g30+g00 = 18+3+15+0 = 36     (total 300 = sum(0..24))
    g = np.arange(25, dtype=np.float32).reshape(1, 1, 5, 5)
    out = ref.circular_pad2d_backward(g, (1, 1, 3, 3), [1, 1, 1, 1])
    expected = np.array([[60, 29, 56], [25, 12, 23], [40, 19, 36]], dtype=np.float32)
    bits_equal(out, expected.reshape(1, 1, 3, 3))
    # leading dims are independent planes
    g2 = np.stack([g[0, 0], 2 * g[0, 0]]).reshape(2, 1, 5, 5)
    out2 = ref.circular_pad2d_backward(g2, (2, 1, 3, 3), [1, 1, 1, 1])
    bits_equal(out2, np.stack([expected, 2 * expected]).reshape(2, 1, 3, 3))


def test_row_order_center_top_then_bottom():
    # self (1,3,1), pads top=2 bottom=2 -> H'=7.  Input row 1 <- centre 3, top wrap 0,
    # bottom wrap 6: (g3 + g0) + g6 = (1 + 2^-24) + 2^-24 = 1 + 2^-24 (tie -> even 1.0) + ...
    # = 1.0 in float32; the other association would give 1 + 2^-23.
    e = 2.0 ** -24
    g = np.zeros((1, 7, 1), dtype=np.float32)
    g[0, 3, 0], g[0, 0, 0], g[0, 6, 0] = 1.0, e, e
    out = ref.circular_pad2d_backward(g, (1, 3, 1), [0, 0, 2, 2])
    bits_equal(out, np.array([[[0.0], [1.0], [0.0]]], dtype=np.float32))
    # the same along W: (centre + left) + right
    gw = g.reshape(1, 1, 7)
    outw = ref.circular_pad2d_backward(gw, (1, 1, 3), [2, 2, 0, 0])
    bits_equal(outw, np.array([[[0.0, 1.0, 0.0]]], dtype=np.float32))


def test_rows_before_columns():
    # self (1,2,2), pads top=1, left=1 -> grad 3x3.  Input (1,1) <- rows {2 centre, 0 top},
    # cols {2 centre, 0 left}.  Set g[2,2]=1, g[0,2]=2^-24, g[2,0]=-1, g[0,0]=0.
    # rows first: (1 + 2^-24) = 1.0 (tie to even), (-1 + 0) = -1, then 1 + -1 = 0.
    # columns first would give (1 + -1) + (2^-24 + 0) = 2^-24.
    g = np.zeros((1, 3, 3), dtype=np.float32)
    g[0, 2, 2], g[0, 0, 2], g[0, 2, 0], g[0, 0, 0] = 1.0, 2.0 ** -24, -1.0, 0.0
    out = ref.circular_pad2d_backward(g, (1, 2, 2), [1, 0, 1, 0])
    assert out[0, 1, 1] == 0.0 and not np.signbit(out[0, 1, 1])


def test_negative_pad_crop_hand_values():
    # W=4, pads [-1, 1]: crop -> [x1, x2, x3], wrap right 1 -> [x1, x2, x3, x1].
    # grad [1, 2, 3, 4] -> gradInput [0, 1+4, 2, 3]
    out = ref.circular_pad2d_backward(np.array([[[1, 2, 3, 4]]], np.float32), (1, 1, 4), [-1, 1, 0, 0])
    bits_equal(out, np.array([[[0, 5, 2, 3]]], np.float32))
    assert not np.signbit(out[0, 0, 0])  # cropped -> +0.0
    # W=4, pads [2, -1]: crop -> [x0, x1, x2], wrap left 2 -> [x1, x2, x0, x1, x2].
    # grad [1, 2, 3, 4, 5] -> x0: 3, x1: 1+4, x2: 2+5, x3 (cropped): 0
    out = ref.circular_pad2d_backward(np.array([[[1, 2, 3, 4, 5]]], np.float32), (1, 1, 4), [2, -1, 0, 0])
    bits_equal(out, np.array([[[3, 5, 7, 0]]], np.float32))
    # forward, by hand
    x = np.array([[[10, 11, 12, 13]]], np.float32)
    bits_equal(ref.circular_pad2d_forward(x, [-1, 1, 0, 0]), np.array([[[11, 12, 13, 11]]], np.float32))
    bits_equal(ref.circular_pad2d_forward(x, [2, -1, 0, 0]), np.array([[[11, 12, 10, 11, 12]]], np.float32))


@pytest.mark.parametrize(
    "shape,pad",
    [
        ((2, 3, 5, 6), [-1, 2, 1, -2]),
        ((2, 3, 5, 6), [2, -3, -1, 3]),
        ((3, 4, 7), [-2, -1, 2, 2]),
        ((1, 2, 4, 4), [3, 4, 4, 3]),   # wrap bands overlap: up to 3 terms per dim
        ((2, 2, 6, 5), [1, 1, 1, 1]),
    ],
)
def test_against_torch_forward_and_autograd(shape, pad):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    xt = torch.tensor(x, requires_grad=True)
    yt = F.pad(xt, pad, mode="circular")
    bits_equal(ref.circular_pad2d_forward(x, pad), yt.detach().numpy())
    g = rng.standard_normal(tuple(yt.shape)).astype(np.float32)
    yt.backward(torch.tensor(g))
    # against torch's float64 sums: the model and torch's float32 each within their roundings
    exact, abs_sum, terms, exact_error = bounds.pad_terms(g, shape, pad)
    ours = ref.circular_pad2d_backward(g, shape, pad)
    bounds.assert_within(ours, exact, bounds.padloss_pad_bound(np.float32, terms, abs_sum, exact)
                         + exact_error, "reference")
    bounds.assert_within(xt.grad, exact, bounds.sum_bound(np.float32, terms, abs_sum) + exact_error, "torch")
    # float64 too: both sums within float64's roundings of the exact one
    g64 = g.astype(np.float64)
    bounds.assert_within(ref.circular_pad2d_backward(g64, shape, pad), exact,
                         bounds.sum_bound(np.float64, terms, abs_sum) + exact_error, "reference float64")


def test_negative_zero_single_term_preserved():
    # interior element (one term) and a 2-term element whose terms are both -0.0 keep -0.0;
    # -0.0 + +0.0 is +0.0.
    for dtype in (np.float16, BF16, np.float32, np.float64):
        g = np.zeros((1, 1, 7), dtype=dtype)
        # W=5, pads [1,1]: padded 0 -> x4 (left wrap), 1..5 -> x0..x4, 6 -> x0 (right wrap)
        g[0, 0, 3] = -0.0                    # x2 <- g3 only (interior, 1 term)
        g[0, 0, 0] = -0.0
        g[0, 0, 5] = -0.0                    # x4 <- g5 (centre) + g0 (left wrap)
        out = ref.circular_pad2d_backward(g, (1, 1, 5), [1, 1, 0, 0])
        assert np.signbit(out[0, 0, 2]) and out[0, 0, 2] == 0
        assert np.signbit(out[0, 0, 4])      # -0.0 + -0.0 = -0.0
        assert not np.signbit(out[0, 0, 0])  # x0 <- g1 + g6 = +0 + +0
        assert not np.signbit(out[0, 0, 1])


def test_float16_tie_half_away_differs_from_even():
    # self W=5, pads [1,1]: x0 <- g1 (centre) + g6 (right wrap); x4 <- g5 + g0 (left wrap).
    # g1 = 1.0, g6 = 2^-11: float32 sum 1 + 2^-11 is exactly halfway between the float16
    # neighbours 1.0 and 1 + 2^-10.  Half away from zero -> 1 + 2^-10; RNE would give 1.0.
    g = np.zeros((1, 1, 7), dtype=np.float16)
    g[0, 0, 1], g[0, 0, 6] = 1.0, 2.0 ** -11
    g[0, 0, 5], g[0, 0, 0] = -1.0, -(2.0 ** -11)    # x4 <- g5 + g0 = -(1 + 2^-11)
    g[0, 0, 3] = 1.0 + 2.0 ** -10                   # x2 <- g3 only, exact
    out = ref.circular_pad2d_backward(g, (1, 1, 5), [1, 1, 0, 0])
    expected = np.array([[[1 + 2.0 ** -10, 0, 1 + 2.0 ** -10, 0, -(1 + 2.0 ** -10)]]], np.float16)
    bits_equal(out, expected)
    # round-to-even would have given 1.0 / -1.0:
    assert np.float16(np.float32(1 + 2.0 ** -11)) == 1.0
    # a tie whose even neighbour is the away one: 1 + 3*2^-11 -> 1 + 2^-9 under both rules
    g2 = np.zeros((1, 1, 7), dtype=np.float16)
    g2[0, 0, 1], g2[0, 0, 6] = 1.0 + 2.0 ** -10, 2.0 ** -11
    out2 = ref.circular_pad2d_backward(g2, (1, 1, 5), [1, 1, 0, 0])
    assert out2[0, 0, 0] == np.float16(1 + 2.0 ** -9)


def test_bfloat16_tie_half_away_differs_from_even():
    # bfloat16 ulp at 1 is 2^-7: 1 + 2^-8 is a tie; half away -> 1 + 2^-7 = 1.0078125,
    # RNE -> 1.0.  Negative mirror -> -1.0078125.
    g = np.zeros((1, 1, 7), dtype=BF16)
    g[0, 0, 1], g[0, 0, 6] = 1.0, 2.0 ** -8
    g[0, 0, 5], g[0, 0, 0] = -1.0, -(2.0 ** -8)
    out = ref.circular_pad2d_backward(g, (1, 1, 5), [1, 1, 0, 0])
    bits_equal(out, np.array([[[1.0078125, 0, 0, 0, -1.0078125]]], BF16))
    assert np.float32(1 + 2.0 ** -8).astype(BF16) == 1.0  # what RNE gives


def test_float16_overflow_to_inf():
    # x0 <- g1 + g6.  60000 + 60000 = 120000 > max -> inf; 65504 + 16 = 65520 is the
    # midpoint between max and 2^16 -> inf; 65504 + 8 = 65512 -> 65504; negatives mirror.
    cases = [(60000.0, 60000.0, np.inf), (65504.0, 16.0, np.inf), (65504.0, 8.0, 65504.0),
             (-65504.0, -16.0, -np.inf), (-60000.0, -60000.0, -np.inf)]
    for a, b, want in cases:
        g = np.zeros((1, 1, 7), dtype=np.float16)
        g[0, 0, 1], g[0, 0, 6] = a, b
        out = ref.circular_pad2d_backward(g, (1, 1, 5), [1, 1, 0, 0])
        assert out[0, 0, 0] == np.float16(want), (a, b, out)



@pytest.mark.parametrize("dtype", [np.dtype(np.float16), BF16, np.dtype(np.float32)], ids=str)
def test_rounding_at_the_overflow_threshold(dtype):
    # Half an ulp past the largest finite value is the tie between it and inf: both tie
    # rules give inf there (the largest value's last bit is odd), just below it stays finite.
    fi = ml_dtypes.finfo(dtype)
    top, half_ulp = float(fi.max), 2.0 ** (fi.maxexp - fi.nmant - 2)
    x = np.array([top + 0.99 * half_ulp, top + half_ulp, -(top + half_ulp), -(top + 0.99 * half_ulp)])
    want = np.array([top, np.inf, -np.inf, -top], dtype)
    bits_equal(ref.round_half_to_even(x, dtype), want)
    bits_equal(ref.round_half_away_from_zero(x, dtype), want)

def test_nan_propagates():
    for dtype in (np.float16, BF16, np.float32, np.float64):
        g = np.ones((1, 1, 7), dtype=dtype)
        g[0, 0, 6] = np.nan  # right wrap -> x0
        out = ref.circular_pad2d_backward(g, (1, 1, 5), [1, 1, 0, 0])
        assert np.isnan(out[0, 0, 0].astype(np.float64))
        assert not np.isnan(out[0, 0, 1:].astype(np.float64)).any()
        # inf - inf = NaN too
        g = np.ones((1, 1, 7), dtype=dtype)
        g[0, 0, 1], g[0, 0, 6] = np.inf, -np.inf
        out = ref.circular_pad2d_backward(g, (1, 1, 5), [1, 1, 0, 0])
        assert np.isnan(out[0, 0, 0].astype(np.float64))


def test_backward_does_not_mutate_and_accepts_strides():
    rng = np.random.default_rng(1)
    big = rng.standard_normal((4, 3, 12, 14)).astype(np.float16)
    g = big[:, :, ::2, ::2]  # (4,3,6,7), non-contiguous
    before = g.copy()
    out = ref.circular_pad2d_backward(g, (4, 3, 4, 5), [1, 1, 1, 1])
    bits_equal(g, before)
    bits_equal(out, ref.circular_pad2d_backward(np.ascontiguousarray(g), (4, 3, 4, 5), [1, 1, 1, 1]))
    assert out.dtype == np.float16 and out.shape == (4, 3, 4, 5)


def test_backward_low_precision_matches_float32_then_half_away():
    # f16/bf16 result == pad_final_round of the float32 result computed from the widened input.
    rng = np.random.default_rng(2)
    for dtype in (np.float16, BF16):
        g = rng.standard_normal((2, 3, 9, 10)).astype(dtype)
        out = ref.circular_pad2d_backward(g, (2, 3, 6, 7), [2, 1, 1, 2])
        acc = ref.circular_pad2d_backward(g.astype(np.float32), (2, 3, 6, 7), [2, 1, 1, 2])
        bits_equal(out, ref.round_half_away_from_zero(acc, dtype))


# ---- the rounding helpers themselves ------------------------------------------------

def test_rounding_helpers_ties_and_overflow():
    x = np.array([1 + 2.0 ** -11, -(1 + 2.0 ** -11), 1 + 3 * 2.0 ** -11, 65520.0, 65519.0,
                  2.0 ** -25, -(2.0 ** -25), 3 * 2.0 ** -25, -0.0, np.nan, np.inf], np.float32)
    # f16 smallest subnormal is 2^-24: 2^-25 is a tie between 0 and 2^-24.
    even = [1.0, -1.0, 1 + 2.0 ** -9, np.inf, 65504.0, 0.0, -0.0, 2.0 ** -23, -0.0, np.nan, np.inf]
    away = [1 + 2.0 ** -10, -(1 + 2.0 ** -10), 1 + 2.0 ** -9, np.inf, 65504.0, 2.0 ** -24,
            -(2.0 ** -24), 2.0 ** -23, -0.0, np.nan, np.inf]
    bits_equal(ref.round_half_to_even(x, np.float16), np.array(even, np.float16))
    bits_equal(ref.round_half_away_from_zero(x, np.float16), np.array(away, np.float16))
    assert np.signbit(ref.round_half_to_even(np.array([-(2.0 ** -26)]), np.float16)[0])


def test_round_half_even_float64_to_bfloat16_single_rounding():
    # 1 + 2^-8 + 2^-30 is just above the bf16 tie 1 + 2^-8 -> correct RNE is 1 + 2^-7.
    # (Rounding through float32 first lands exactly on the tie and then goes to 1.0.)
    x = np.array([1 + 2.0 ** -8 + 2.0 ** -30, -(1 + 2.0 ** -8 + 2.0 ** -30)])
    bits_equal(ref.round_half_to_even(x, BF16), np.array([1.0078125, -1.0078125], BF16))


# ======================================================================================
# l1_loss_backward
# ======================================================================================

def test_promote_table():
    P = ref.promote
    f16, f32, f64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
    assert P(f16, f16) == f16 and P(BF16, BF16) == BF16 and P(f32, f32) == f32
    assert P(f16, f32) == f32 and P(BF16, f32) == f32 and P(f16, BF16) == f32
    assert P(BF16, f16) == f32 and P(f16, f64) == f64 and P(BF16, f64) == f64
    assert P(np.int32, f16) == f16 and P(bool, BF16) == BF16 and P(np.int64, np.uint8, f16) == f16
    assert P(np.int64, f32, np.float16) == f32
    with pytest.raises(TypeError):
        P(np.int32, np.int64)


@pytest.mark.parametrize("reduction", [0, "none"])
def test_l1_sign_cases(reduction):
    nan, inf = np.nan, np.inf
    s = np.array([3, 1, 2, nan, 1, 2, 2, 1, 1], np.float32)
    t = np.array([1, 3, 2, 1, nan, 2, 2, 2, 2], np.float32)
    g = np.array([1, 1, 1, 1, 1, inf, -2, 0, -0.0], np.float32)
    # >: +1;  <: -1;  ==: 0;  NaN on either side: 0;  0*inf = NaN;  0 * -2 = -0.0;
    # -1 * +0 = -0.0;  -1 * -0.0 = +0.0
    want = np.array([1, -1, 0, 0, 0, nan, -0.0, -0.0, 0.0], np.float32)
    bits_equal(ref.l1_loss_backward(g, s, t, reduction), want)


def test_l1_broadcast_and_mean_coefficient():
    # self (2,3), target (3,), grad 0-d; B = (2,3); coef = float32(float32(1/2)/3)
    # = float32(1/6) = 0x3E2AAAAB.  grad 3.0 * coef = 0.5 exactly? 3 * 0x3E2AAAAB =
    # 3 * 11184811 * 2^-26 = 33554433 * 2^-26 -> rounds to 2^25 * 2^-26 = 0.5 (float32).
    s = np.array([[1, 5, 3], [0, 0, 9]], np.float32)
    t = np.array([2, 2, 3], np.float32)
    g = np.array(3.0, np.float32)
    coef = ref.mean_coefficient((2, 3), np.float32)
    assert coef.dtype == np.float32 and coef == f32_from_bits(0x3E2AAAAB)
    out = ref.l1_loss_backward(g, s, t, "mean")
    bits_equal(out, np.array([[-0.5, 0.5, 0], [-0.5, -0.5, 0.5]], np.float32))
    out_sum = ref.l1_loss_backward(g, s, t, 2)
    bits_equal(out_sum, np.array([[-3, 3, 0], [-3, -3, 3]], np.float32))
    # mean counts the grad_output dims too: grad (4,1,1) -> B = (4,2,3)
    g4 = np.full((4, 1, 1), 24.0, np.float32)
    out4 = ref.l1_loss_backward(g4, s, t, 1)
    assert out4.shape == (4, 2, 3)
    assert ref.mean_coefficient((), np.float32) == 1.0
    assert ref.mean_coefficient((4, 2, 3), np.float32) == np.float32(np.float32(np.float32(1 / 4) / 2) / 3)


def _is_nearest_f32(value, exact):
    """value (np.float32) is the float32 nearest to the Fraction ``exact``."""
    v = Fraction(float(value))
    lo = Fraction(float(np.nextafter(value, np.float32(-np.inf))))
    hi = Fraction(float(np.nextafter(value, np.float32(np.inf))))
    return abs(v - exact) < abs(lo - exact) and abs(v - exact) < abs(hi - exact)


def test_l1_mean_divides_one_dim_at_a_time():
    # Found by search: for B = (7, 5), 1/7/5 != 1/35 in float32.
    # float32(1/7) = 0x3E124925; /5 -> 0x3CEA0EA2.   float32(1/35) = 0x3CEA0EA1.
    c7 = f32_from_bits(0x3E124925)
    assert _is_nearest_f32(c7, Fraction(1, 7))
    c75 = f32_from_bits(0x3CEA0EA2)
    assert _is_nearest_f32(c75, Fraction(float(c7)) / 5)
    c35 = f32_from_bits(0x3CEA0EA1)
    assert _is_nearest_f32(c35, Fraction(1, 35))
    assert ref.mean_coefficient((7, 5), np.float32) == c75 != c35
    s = np.ones((7, 5), np.float32)
    t = np.zeros((7, 5), np.float32)
    out = ref.l1_loss_backward(np.array(1.0, np.float32), s, t, "mean")
    assert out.dtype == np.float32
    assert (out.view(np.uint32) == 0x3CEA0EA2).all()


def test_l1_f16_plus_bf16_is_f32():
    s = np.array([1.0, 2.0], np.float16)
    t = np.array([2.0, 1.0], BF16)
    g = np.array([1 + 2.0 ** -11, 3.0], np.float16)  # float16: 1 + 2^-11 is not representable
    out = ref.l1_loss_backward(g, s, t, "none")
    # g[0] is stored as float16 -> 1.0 (tie to even); result dtype float32
    bits_equal(out, np.array([-1.0, 3.0], np.float32))
    g2 = np.array([1.5, 3.0], BF16)
    bits_equal(ref.l1_loss_backward(g2, s, t, 0), np.array([-1.5, 3.0], np.float32))


def test_l1_int_target_with_f16_self_is_f16():
    # P = f16 (float16 ulp in [2048, 4096) is 2).  int 2049 -> tie between 2048 (even) and
    # 2050 -> 2048 == self -> sign 0.  int 2051 -> tie between 2050 and 2052 (even) -> 2052
    # == self -> sign 0.  (Converting to float32 instead would give sign -1 and +1.)
    # target 5 vs self 2048 -> +1 -> 2.0.
    s = np.array([2048, 2052, 2048], np.float16)
    t = np.array([2049, 2051, 5], np.int32)
    g = np.array(2.0, np.float16)
    out = ref.l1_loss_backward(g, s, t, "none")
    bits_equal(out, np.array([0, 0, 2], np.float16))
    # bool target, f16 self: True -> 1.0
    out_b = ref.l1_loss_backward(g, np.array([0.5, 1.0], np.float16), np.array([True, True]), 2)
    bits_equal(out_b, np.array([-2, 0], np.float16))


def test_l1_large_int_to_bfloat16_single_rounding():
    # P = bf16.  target 2^60 + 2^52 + 1 is just above the bf16 tie (ulp there = 2^53),
    # so it rounds to 2^60 + 2^53 (a single rounding); through float64 it would land on the
    # tie and go to 2^60.  self = 2^60 + 2^53 -> equal -> sign 0.
    s = np.array([2.0 ** 60 + 2.0 ** 53], BF16)
    t = np.array([2 ** 60 + 2 ** 52 + 1], np.int64)
    out = ref.l1_loss_backward(np.array(1.0, BF16), s, t, "none")
    bits_equal(out, np.array([0.0], BF16))


def test_l1_out_dtype_downcast_rne():
    # P = f32, out f16.  results 1+2^-11 (tie -> even 1.0), -(1+2^-11) -> -1.0,
    # 1+3*2^-11 (tie -> even 1+2^-9), 65520 (tie -> inf), 1+2^-11+2^-20 (above tie).
    g = np.array([1 + 2.0 ** -11, -(1 + 2.0 ** -11), 1 + 3 * 2.0 ** -11, 65520.0,
                  1 + 2.0 ** -11 + 2.0 ** -20], np.float32)
    s = np.ones(5, np.float32)
    t = np.zeros(5, np.float32)
    out = ref.l1_loss_backward(g, s, t, "sum", out_dtype=np.float16)
    bits_equal(out, np.array([1.0, -1.0, 1 + 2.0 ** -9, np.inf, 1 + 2.0 ** -10], np.float16))
    # upcast is exact
    bits_equal(ref.l1_loss_backward(g, s, t, "none", out_dtype=np.float64), g.astype(np.float64))


def test_l1_float64_to_narrow_out_single_rounding():
    g = np.array([1 + 2.0 ** -8 + 2.0 ** -30, 1 + 2.0 ** -11 + 2.0 ** -40])
    s = np.ones(2, np.float64)
    t = np.zeros(2, np.float32)
    # bf16: 1 + 2^-8 + 2^-30 -> 1 + 2^-7;  f16: 1 + 2^-11 + 2^-40 -> 1 + 2^-10
    bits_equal(ref.l1_loss_backward(g, s, t, 0, out_dtype=BF16), np.array([1.0078125, 1.0], BF16))
    bits_equal(ref.l1_loss_backward(g, s, t, 0, out_dtype=np.float16),
               np.array([1.00390625, 1 + 2.0 ** -10], np.float16))


def test_l1_does_not_mutate_and_empty():
    s = np.array([1.0, 2.0], np.float32)
    t = np.array([2.0, 1.0], np.float32)
    g = np.array(1.0, np.float32)
    s0, t0 = s.copy(), t.copy()
    ref.l1_loss_backward(g, s, t, "mean")
    bits_equal(s, s0)
    bits_equal(t, t0)
    e = ref.l1_loss_backward(g, np.zeros((0, 3), np.float32), np.zeros(3, np.float32), "mean")
    assert e.shape == (0, 3) and e.dtype == np.float32
    with pytest.raises(ValueError):
        ref.l1_loss_backward(g, s, t, 3)


@pytest.mark.parametrize("reduction,name", [(0, "none"), (1, "mean"), (2, "sum")])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_l1_against_torch_autograd(reduction, name, dtype):
    rng = np.random.default_rng(4)
    s = rng.standard_normal((3, 4, 5)).astype(dtype)
    t = rng.standard_normal((3, 4, 5)).astype(dtype)
    t[0, 0, :] = s[0, 0, :]  # some equal elements -> sign 0
    st = torch.tensor(s, requires_grad=True)
    loss = F.l1_loss(st, torch.tensor(t), reduction=name)
    gshape = s.shape if name == "none" else ()
    g = rng.standard_normal(gshape).astype(dtype)
    loss.backward(torch.tensor(g))
    ours = ref.l1_loss_backward(g, s, t, reduction)
    _assert_l1_within_roundings(ours, st.grad, g, s, t, name)


def test_l1_float16_against_torch():
    rng = np.random.default_rng(5)
    s = rng.standard_normal((6, 7)).astype(np.float16)
    t = rng.standard_normal((6, 7)).astype(np.float16)
    st = torch.tensor(s, requires_grad=True)
    F.l1_loss(st, torch.tensor(t), reduction="mean").backward(torch.tensor(np.float16(1.5)))
    ours = ref.l1_loss_backward(np.array(1.5, np.float16), s, t, "mean")
    assert ours.dtype == np.float16
    _assert_l1_within_roundings(ours, st.grad, np.array(1.5, np.float16), s, t, "mean")


def _assert_l1_within_roundings(ours, theirs, g, s, t, reduction):
    """Against sign(s - t) * g / N in float64 (one rounding of its own): the model within
    its factor's roundings (one a dim), the product's and the cast's; torch's autograd
    within its division's (two, where it multiplies by a rounded 1/N)."""
    exact, exact_error = bounds.l1_terms(g, s, t, reduction)
    bounds.assert_within(ours, exact, bounds.rounding_bound(s.dtype, s.ndim + 2, np.abs(exact)) + exact_error,
                         "reference")
    bounds.assert_within(theirs, exact, bounds.rounding_bound(s.dtype, 2, np.abs(exact)) + exact_error,
                         "torch")


def test_the_pad_rounding_mode_has_one_owner(monkeypatch):
    """padloss.rules.PAD_FINAL_ROUNDING decides every implementation's final cast: the
    reference and the torch backend read it per call, the Numba kernel when compiled
    (its compile cache hashes rules.py)."""
    import padloss_numba.disk_cache as disk_cache
    from padloss import rules
    from padloss_numba import convert, pad_kernel

    assert rules.PAD_FINAL_ROUNDING == "half_away_from_zero"
    assert pad_kernel.final_round is convert.store_sum_half_away
    assert disk_cache.RULES_FILE.name == "rules.py"
    tie = np.array([2049.0], np.float32)          # halfway between float16 2048 and 2050
    assert ref.pad_final_round(tie, np.float16)[0] == 2050
    monkeypatch.setattr(rules, "PAD_FINAL_ROUNDING", "half_to_even")
    assert ref.pad_final_round(tie, np.float16)[0] == 2048
    from padloss_torch.rounding import pad_final_round

    assert pad_final_round(torch.tensor([2049.0]), torch.float16).item() == 2048
    monkeypatch.setattr(rules, "PAD_FINAL_ROUNDING", "half_away_from_zero")
    assert pad_final_round(torch.tensor([2049.0]), torch.float16).item() == 2050


def test_the_mean_factor_is_computed_independently_of_the_kernels_rule():
    """reference.mean_coefficient divides in float64 and rounds (innocuous double rounding);
    padloss.rules.mean_coefficient, which the kernels use, divides in the compute dtype:
    the two agree bit for bit, dims past float32's exact integers included."""
    from padloss import rules

    dims = [1, 2, 3, 5, 7, 35, 255, 1000, 4097, 65537, 2**24 + 1, 2**25 + 3]
    rng = np.random.default_rng(11)
    for _ in range(3000):
        shape = tuple(int(d) for d in rng.choice(dims, size=rng.integers(0, 5)))
        for dtype in (np.float32, np.float64):
            ours = ref.mean_coefficient(shape, dtype)
            rule = rules.mean_coefficient(shape, np.dtype(dtype).name)
            assert ours.dtype == rule.dtype and ours.tobytes() == rule.tobytes(), (shape, dtype)
