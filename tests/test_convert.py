"""Tests for padloss_numba.convert against independent oracles.

Oracles: numpy's float16 casts and ml_dtypes' float32 -> bfloat16 cast for round-to-nearest-even;
for ties-away (and for float64 -> bfloat16, which ml_dtypes double-rounds through float32) an exact
model below, built from np.nextafter neighbours and float64 midpoint comparisons.
All conversions run inside small @njit kernels, so the tests also cover compiled loops.
"""

import json
import os
import subprocess
import sys

import ml_dtypes
import numba
import numpy as np
import pytest
from numba import njit, prange

from padloss_numba import convert
from padloss_numba.convert import (
    BF16,
    F16,
    F32,
    F64,
    load,
    store_exact,
    store_half_away,
    store_nearest_even,
    store_sum_half_away,
)

# The oracles cast inf/NaN/out-of-range values on purpose.
pytestmark = pytest.mark.filterwarnings("ignore:.*encountered in:RuntimeWarning")

BF = ml_dtypes.bfloat16
DTYPE = {F16: np.float16, BF16: BF}
FLT_MAX = float(np.finfo(np.float32).max)
RNG_SEED = 20240611
KINDS = [pytest.param(F16, id="f16"), pytest.param(BF16, id="bf16")]


# --- kernels under test ---------------------------------------------------------------------------


@njit
def load_kernel(kind, a, out):
    numba.literally(kind)
    for i in range(a.size):
        out[i] = load(kind, a[i])


@njit
def nearest_even_kernel(kind, v, out):
    numba.literally(kind)
    for i in range(v.size):
        out[i] = store_nearest_even(kind, v[i])


@njit
def half_away_kernel(kind, v, out):
    numba.literally(kind)
    for i in range(v.size):
        out[i] = store_half_away(kind, v[i])


@njit
def sum_half_away_kernel(kind, v, out):
    numba.literally(kind)
    for i in range(v.size):
        out[i] = store_sum_half_away(kind, v[i])


@njit(parallel=True)
def half_away_parallel(kind, v, out):
    numba.literally(kind)
    for i in prange(v.size):
        out[i] = store_half_away(kind, v[i])


@njit(parallel=True)
def roundtrip_parallel(kind, a, scale, out):
    numba.literally(kind)
    for i in prange(a.size):
        out[i] = store_half_away(kind, load(kind, a[i]) * scale)


@njit(fastmath=True)
def fastmath_caller(kind, v, away, even):
    numba.literally(kind)
    for i in range(v.size):
        away[i] = store_half_away(kind, v[i])
        even[i] = store_nearest_even(kind, np.float64(v[i]))


@njit
def f16_load_global_kind(a, out):
    for i in range(a.size):
        out[i] = load(F16, a[i])  # a module-level constant is a literal too


def run(kernel, kind, values, out_dtype, *extra):
    out = np.empty(values.size, out_dtype)
    kernel(kind, values, *extra, out)
    return out


# --- oracles --------------------------------------------------------------------------------------


def bits_of(values, dtype):
    return np.asarray(values).astype(dtype).view(np.uint16)


def assert_same_float_bits(got, want):
    """Bit-identical, except that any NaN matches any NaN of the same sign."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype
    fgot, fwant = got.astype(np.float64), want.astype(np.float64)
    nan = np.isnan(fwant)
    np.testing.assert_array_equal(np.isnan(fgot), nan)
    np.testing.assert_array_equal(np.signbit(fgot[nan]), np.signbit(fwant[nan]))
    bad = np.flatnonzero(got[~nan].view(f"u{got.itemsize}") != want[~nan].view(f"u{want.itemsize}"))
    assert bad.size == 0, f"{bad.size} mismatches, first inputs: {fwant[~nan][bad[:5]]}"


def assert_same_storage(got_bits, want_bits, dtype, inputs):
    got, want = got_bits.view(dtype), want_bits.view(dtype)
    nan = np.isnan(want.astype(np.float32))
    np.testing.assert_array_equal(np.isnan(got.astype(np.float32)), nan)
    np.testing.assert_array_equal(got_bits[nan] >> 15, want_bits[nan] >> 15)  # NaN keeps its sign
    bad = np.flatnonzero(got_bits[~nan] != want_bits[~nan])
    assert bad.size == 0, (
        f"{bad.size} mismatches; inputs {np.asarray(inputs)[~nan][bad[:5]]!r} "
        f"got {got_bits[~nan][bad[:5]]} want {want_bits[~nan][bad[:5]]}"
    )


def rounding_model(x, dtype, ties):
    """Correctly rounded x -> dtype bits, by exact float64 arithmetic on the neighbours of |x|.

    The seed cast only has to land on one of the two neighbours (so a double-rounding cast is fine);
    the choice between them is made here by comparing |x| with their exact midpoint.
    """
    x = np.asarray(x, np.float64)
    a = np.abs(x)
    with np.errstate(all="ignore"):
        seed = a.astype(dtype)
        s = seed.astype(np.float64)
        below = np.nextafter(seed, np.zeros_like(seed)).astype(np.float64)
        above = np.nextafter(seed, np.full_like(seed, np.inf)).astype(np.float64)
        lo = np.where(s <= a, s, below)
        hi = np.where(s <= a, above, s)
        # Past the largest finite value the grid goes on with the same spacing; landing there: inf.
        top = dtype(ml_dtypes.finfo(dtype).max)
        virtual = float(top) + (float(top) - float(np.nextafter(top, dtype(0))))
        hi = np.where(np.isinf(hi) & (lo == float(top)), virtual, hi)
        mid = (lo + hi) / 2  # exact: both have <= 11 significant bits
        lo_odd = (lo.astype(dtype).view(np.uint16) & 1) == 1
        tie_up = (a == mid) & (lo_odd if ties == "even" else True)
        r = np.where(a == lo, lo, np.where((a > mid) | tie_up, hi, lo))
        r = np.where(r == virtual, np.inf, r)
        out = np.copysign(r, x).astype(dtype)
    out[np.isnan(x)] = np.copysign(np.nan, x[np.isnan(x)]).astype(dtype)
    return out.view(np.uint16)


# --- input sets -----------------------------------------------------------------------------------


def with_signs(v):
    return np.concatenate([v, -v])


def f32_from_bits(bits):
    return np.asarray(bits, np.uint32).view(np.float32)


NAN_BITS = [0x7F800001, 0x7F80FFFF, 0x7FA00000, 0x7FC00000, 0x7FC00001, 0x7FFFFFFF, 0x7F801000]


def f16_dense():
    """Every float16 value, every tie between neighbours (incl. 2^-25 and 65520), and the float32
    values just below/above each, plus overflow, float32 subnormals, inf and NaNs; both signs."""
    grid = np.arange(0x7C01, dtype=np.uint16).view(np.float16).astype(np.float64)  # 0 .. inf
    grid[-1] = 65536.0  # next grid point after 65504; rounding onto it means overflow
    mids = (grid[:-1] + grid[1:]) / 2
    base = np.concatenate([grid, mids, [1e5, FLT_MAX, np.inf]]).astype(np.float32)
    below, above = np.nextafter(base, np.float32(0)), np.nextafter(base, np.float32(np.inf))
    near = np.concatenate([base, below, above])
    f32_subnormals = f32_from_bits(np.arange(1, 1 << 23, 4099))
    nans = f32_from_bits(NAN_BITS)
    return with_signs(np.concatenate([near, f32_subnormals, nans, [np.float32(0)]]))


def bf16_dense():
    """Every bfloat16 value, every tie (0x8000 in the low half) and the float32 values one bit
    either side of it, plus NaNs whose top half looks like inf; both signs."""
    top = np.arange(0x7F81, dtype=np.uint32) << 16
    low = np.array([0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF], np.uint32)
    bits = (top[:, None] | low[None, :]).ravel()
    bits = bits[bits <= 0x7F800000]  # finite values and +inf; NaNs come below
    return with_signs(f32_from_bits(np.concatenate([bits, NAN_BITS])))


def random_f32(n=4_000_000):
    bits = np.random.default_rng(RNG_SEED).integers(0, 1 << 32, n, dtype=np.uint64)
    return f32_from_bits(bits.astype(np.uint32))


def random_f64_in_range(lo_exp, hi_exp, n=1_000_000):
    rng = np.random.default_rng(RNG_SEED + lo_exp)
    x = np.exp2(rng.uniform(lo_exp, hi_exp, n)) * rng.choice([-1.0, 1.0], n)
    bits = rng.integers(0, 1 << 64, n, dtype=np.uint64)
    return np.concatenate([x, bits.view(np.float64)])


def near_ties_f64(dtype):
    """Exact float64 ties of ``dtype``, and those ties perturbed by less than float32 can hold."""
    if dtype is np.float16:
        grid = np.arange(0x7C01, dtype=np.uint16).view(np.float16).astype(np.float64)
        grid[-1] = 65536.0
    else:
        grid = (np.arange(0x7F81, dtype=np.uint32) << 16).view(np.float32).astype(np.float64)
        grid[-1] = 2.0**128
    mids = (grid[:-1] + grid[1:]) / 2
    mids = mids[mids > 0]
    eps = [2.0**-30, 2.0**-40, 2.0**-50]
    up = [mids * (1 + e) for e in eps] + [np.nextafter(mids, np.inf)]
    down = [mids * (1 - e) for e in eps] + [np.nextafter(mids, 0)]
    return with_signs(np.concatenate([mids, *up, *down]))


# --- load -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_load_exhaustive(kind):
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    got = run(load_kernel, kind, bits, np.float32)
    want = bits.view(DTYPE[kind]).astype(np.float32)
    assert_same_float_bits(got, want)
    if kind == BF16:  # widening is exactly the 16-bit shift, NaN payloads included
        np.testing.assert_array_equal(got.view(np.uint32), bits.astype(np.uint32) << 16)


def test_load_global_constant_kind():
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    out = np.empty(bits.size, np.float32)
    f16_load_global_kind(bits, out)
    assert_same_float_bits(out, bits.view(np.float16).astype(np.float32))


def test_load_wide_kinds():
    x32 = random_f32(10_000)
    assert_same_float_bits(run(load_kernel, F32, x32, np.float32), x32)
    x64 = random_f64_in_range(-1000, 1000, 10_000)
    got = np.empty(x64.size, np.float64)
    load_kernel(F64, x64, got)
    assert_same_float_bits(got, x64)
    assert load(F64, 1.5) == 1.5 and isinstance(load(F32, np.float32(1.5)), float)


# --- store from float32 ---------------------------------------------------------------------------


INPUTS_F32 = {
    F16: [("dense", f16_dense), ("random", random_f32)],
    BF16: [("dense", bf16_dense), ("random", random_f32)],
}


def cases_f32():
    names = {F16: "f16", BF16: "bf16"}
    return [
        pytest.param(kind, make, id=f"{names[kind]}-{name}")
        for kind, sets in INPUTS_F32.items()
        for name, make in sets
    ]


@pytest.mark.parametrize("kind,make", cases_f32())
def test_nearest_even_from_f32(kind, make):
    x = make()
    got = run(nearest_even_kernel, kind, x, np.uint16)
    with np.errstate(over="ignore"):
        want = bits_of(x, DTYPE[kind])  # numpy float16 / ml_dtypes bfloat16 casts
    assert_same_storage(got, want, DTYPE[kind], x)
    # the exact model agrees with the library casts, so it can be trusted for ties-away
    assert_same_storage(rounding_model(x, DTYPE[kind], "even"), want, DTYPE[kind], x)


@pytest.mark.parametrize("kind,make", cases_f32())
def test_half_away_from_f32(kind, make):
    x = make()
    want = rounding_model(x, DTYPE[kind], "away")
    assert_same_storage(run(half_away_kernel, kind, x, np.uint16), want, DTYPE[kind], x)
    assert_same_storage(run(half_away_parallel, kind, x, np.uint16), want, DTYPE[kind], x)


@pytest.mark.parametrize("kind", KINDS)
def test_half_away_spot_values(kind):
    if kind == F16:
        cases = {
            1 + 2.0**-11: 0x3C01,  # tie between 1 and 1+2^-10: away, not even
            1 + 3 * 2.0**-11: 0x3C02,
            2.0**-25: 0x0001,  # half the smallest subnormal
            -(2.0**-25): 0x8001,
            2.0**-26: 0x0000,
            -(2.0**-26): 0x8000,
            65504.0: 0x7BFF,
            65519.99609375: 0x7BFF,  # largest float32 below 65520
            65520.0: 0x7C00,  # tie past the max: overflow
            -65520.0: 0xFC00,
            float(FLT_MAX): 0x7C00,
            np.inf: 0x7C00,
            -0.0: 0x8000,
        }
    else:
        cases = {
            1 + 2.0**-8: 0x3F81,
            1 + 3 * 2.0**-8: 0x3F82,
            float(f32_from_bits(0x7F7F8000)): 0x7F80,  # tie past bf16 max: inf
            float(f32_from_bits(0x7F7F7FFF)): 0x7F7F,
            float(f32_from_bits(0x00008000)): 0x0001,  # float32 subnormal tie
            -np.inf: 0xFF80,
            -0.0: 0x8000,
        }
    x = np.array(list(cases), np.float32)
    want = np.array(list(cases.values()), np.uint16)
    np.testing.assert_array_equal(run(half_away_kernel, kind, x, np.uint16), want)


@pytest.mark.parametrize("kind", KINDS)
def test_nan_stays_quiet_nan_with_sign(kind):
    x = with_signs(f32_from_bits(NAN_BITS))
    quiet = 0x0200 if kind == F16 else 0x0040
    exp = 0x7C00 if kind == F16 else 0x7F80
    for kernel in (nearest_even_kernel, half_away_kernel):
        got = run(kernel, kind, x, np.uint16)
        assert np.all(got & exp == exp) and np.all(got & quiet), got
        np.testing.assert_array_equal(got >> 15, np.signbit(x).astype(np.uint16))


def test_wide_kinds_are_plain_casts():
    x32 = random_f32(10_000)
    for kernel in (nearest_even_kernel, half_away_kernel):
        assert_same_float_bits(run(kernel, F32, x32, np.float32), x32)
        assert_same_float_bits(run(kernel, F64, x32, np.float64), x32.astype(np.float64))
        x64 = random_f64_in_range(-200, 200, 10_000)
        with np.errstate(over="ignore"):
            assert_same_float_bits(run(kernel, F32, x64, np.float32), x64.astype(np.float32))
        assert_same_float_bits(run(kernel, F64, x64, np.float64), x64)


# --- store from float64 ---------------------------------------------------------------------------


def f64_inputs(kind):
    if kind == F16:
        rand = random_f64_in_range(-30, 17)
    else:
        rand = random_f64_in_range(-140, 129)
    specials = [0.0, np.inf, np.nan, 1e300, 1e-300, FLT_MAX * 1.5]
    return np.concatenate([near_ties_f64(DTYPE[kind]), rand, with_signs(np.array(specials))])


@pytest.mark.parametrize("kind", KINDS)
def test_nearest_even_from_f64_single_rounding(kind):
    x = f64_inputs(kind)
    got = run(nearest_even_kernel, kind, x, np.uint16)
    want = rounding_model(x, DTYPE[kind], "even")
    assert_same_storage(got, want, DTYPE[kind], x)
    if kind == F16:
        with np.errstate(over="ignore"):
            assert_same_storage(got, bits_of(x, np.float16), np.float16, x)  # numpy: direct cast
    # the inputs really distinguish single from double rounding (through float32)
    with np.errstate(over="ignore"):
        twice = bits_of(x.astype(np.float32), DTYPE[kind])
    assert np.count_nonzero(twice != want) > 10_000


@pytest.mark.parametrize("kind", KINDS)
def test_half_away_from_f64_single_rounding(kind):
    x = f64_inputs(kind)
    want = rounding_model(x, DTYPE[kind], "away")
    assert_same_storage(run(half_away_kernel, kind, x, np.uint16), want, DTYPE[kind], x)


# --- store of a sum of stored values (the pad's) -------------------------------------------------


def sums_of(dtype):
    """Sums of ``dtype`` (float16 or bfloat16) values made in float32, as the pad makes them
    (for float16 every partial sum a multiple of 2^-24): each 16-bit pattern (NaNs and infs
    too) plus a random one, and plus a random one again, and plus the ties' halves."""
    a = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(dtype).astype(np.float32)
    rng = np.random.default_rng(RNG_SEED)
    b, c = (rng.permutation(a) for _ in range(2))
    half_ulp = 2.0**-11 if dtype is np.float16 else 2.0**-8
    with np.errstate(invalid="ignore", over="ignore"):
        return np.concatenate([a + b, (a + b) + c, a + np.float32(half_ulp), a + np.float32(2.0**-24)])


def f32_float16_grid():
    """Every float32 the tie test could misjudge and a sum of float16 values can be: the
    multiples of 2^-24 below 2^-14 (float16's subnormals, where the test does not apply),
    and from 2^-14 up every exponent and sign with 15-bit tails around the tie patterns."""
    small = np.arange(1 << 10, dtype=np.float32) * np.float32(2.0**-24)
    tails = np.array([0, 1, 0x0FFF, 0x1000, 0x1001, 0x2000, 0x2FFF, 0x3000, 0x3001, 0x5000, 0x7000],
                     np.uint32)
    heads = (np.arange(0x38800000 >> 15, (0x7F800000 >> 15) + 1, dtype=np.uint32) << 15)
    normal = f32_from_bits((heads[:, None] | tails[None, :]).ravel())
    return with_signs(np.concatenate([small, normal]))


@pytest.mark.parametrize("make", [lambda: sums_of(np.float16), f32_float16_grid], ids=["sums", "grid"])
def test_sum_half_away_is_half_away_on_sums(make):
    """store_sum_half_away's cheaper float16 tie test gives store_half_away's bits (and the
    exact model's) on every value a sum of float16 values can be."""
    x = make()
    want = rounding_model(x, np.float16, "away")
    got = run(sum_half_away_kernel, F16, x, np.uint16)
    assert_same_storage(got, want, np.float16, x)
    assert_same_storage(got, run(half_away_kernel, F16, x, np.uint16), np.float16, x)
    assert np.count_nonzero(got != run(nearest_even_kernel, F16, x, np.uint16)) > 100   # ties were met
    x64 = x[np.isfinite(x)].astype(np.float64)                                          # from float64 too
    assert_same_storage(run(sum_half_away_kernel, F16, x64, np.uint16), want[np.isfinite(x)], np.float16, x64)


def test_sum_half_away_bfloat16_is_half_away_on_sums():
    """Without the NaN test, bfloat16 sums (their NaNs included, quiet and with their sign)
    round as store_half_away rounds them."""
    x = np.concatenate([sums_of(BF), with_signs(np.array([np.inf, 0.0], np.float32))])
    got = run(sum_half_away_kernel, BF16, x, np.uint16)
    assert_same_storage(got, rounding_model(x, BF, "away"), BF, x)
    assert_same_storage(got, run(half_away_kernel, BF16, x, np.uint16), BF, x)
    nan = np.isnan(x)
    assert nan.any() and np.all(got[nan] & 0x7FC0 == 0x7FC0)                           # quiet NaNs
    assert np.count_nonzero(got != run(nearest_even_kernel, BF16, x, np.uint16)) > 100  # ties were met


def test_sum_half_away_wide_kinds_are_plain_casts():
    x = random_f32(100_000)
    assert_same_float_bits(run(sum_half_away_kernel, F32, x, np.float32), x)


def test_round_to_odd_helper():
    x = np.array([1 + 2.0**-30, 1 - 2.0**-40, 1.0, -(1 + 2.0**-30), 1e-50, -1e-50, 1e300, np.inf])
    want = f32_from_bits([0x3F800001, 0x3F7FFFFF, 0x3F800000, 0xBF800001, 0x00000001, 0x80000001,
                          0x7F7FFFFF, 0x7F800000])
    got = np.array([convert.f64_to_f32_round_odd(v) for v in x], np.float32)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@njit
def exact_kernel(kind, a, out):
    numba.literally(kind)
    for i in range(a.size):
        out[i] = store_exact(kind, load(kind, a[i]))


@pytest.mark.parametrize("kind", KINDS)
def test_store_exact_returns_every_representable_value(kind):
    """Every 16-bit pattern, widened and stored back without rounding work, is itself
    (a NaN stays a NaN); from float64 too."""
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    got = np.empty_like(bits)
    exact_kernel(kind, bits, got)
    nan = np.isnan(bits.view(DTYPE[kind]).astype(np.float32))
    np.testing.assert_array_equal(got[~nan], bits[~nan])
    assert np.all(np.isnan(got[nan].view(DTYPE[kind]).astype(np.float32)))
    wide = bits[~nan].view(DTYPE[kind]).astype(np.float64)
    assert [store_exact(kind, v) for v in wide[::97]] == list(bits[~nan][::97])


# --- compiled-loop behaviour ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_parallel_roundtrip_is_identity(kind):
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    got = np.empty_like(bits)
    roundtrip_parallel(kind, bits, np.float32(1.0), got)
    nan = np.isnan(bits.view(DTYPE[kind]).astype(np.float32))
    np.testing.assert_array_equal(got[~nan], bits[~nan])
    assert np.all(np.isnan(got[nan].view(DTYPE[kind]).astype(np.float32)))


FASTMATH_SCRIPT = """
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import test_convert as t

out = {}
for kind, make in [(t.F16, t.f16_dense), (t.BF16, t.bf16_dense)]:
    x = make()
    away, even = np.empty(x.size, np.uint16), np.empty(x.size, np.uint16)
    t.fastmath_caller(kind, x, away, even)
    out[f"away{kind}"], out[f"even{kind}"] = away, even
np.savez(sys.argv[2], **out)
"""


def test_fastmath_caller_does_not_leak_into_conversions(tmp_path):
    """numba callees inherit a caller's fastmath unless they pin it, but only on their first
    compilation; so this runs in a fresh process where the fastmath kernel compiles them first."""
    script, result = tmp_path / "fastmath_first.py", tmp_path / "out.npz"
    script.write_text(FASTMATH_SCRIPT)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    tests_dir = os.path.dirname(os.path.abspath(__file__))
    command = [sys.executable, str(script), tests_dir, str(result)]
    proc = subprocess.run(command, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    got = np.load(result)
    for kind, make in [(F16, f16_dense), (BF16, bf16_dense)]:
        x = make()
        for ties in ("away", "even"):
            want = rounding_model(x, DTYPE[kind], ties)
            assert_same_storage(got[f"{ties}{kind}"], want, DTYPE[kind], x)


def test_kind_must_be_literal():
    @njit
    def not_literal(kind, x):
        return load(kind, x)

    with pytest.raises(numba.core.errors.TypingError, match="literal storage code"):
        not_literal(F16, np.uint16(0))


def test_storage_codes():
    assert (F16, BF16, F32, F64) == (0, 1, 2, 3)
    want = {"float16": F16, "bfloat16": BF16, "float32": F32, "float64": F64}
    assert convert.STORAGE_CODE == want


CACHED_SCRIPT = """
import json, numba, numpy as np
from numba import njit, prange
from padloss_numba.convert import load, store_half_away, store_nearest_even

@njit(parallel=True, cache=True)
def kernel(kind, a, scale, away, even):
    numba.literally(kind)
    for i in prange(a.size):
        v = load(kind, a[i]) * scale
        away[i] = store_half_away(kind, v)
        even[i] = store_nearest_even(kind, np.float64(v))

a = np.array([0x3C00, 0x3C01, 0x3C03], np.uint16)
away, even = np.empty_like(a), np.empty_like(a)
kernel(0, a, np.float32(1.5), away, even)  # 1.5 * (1 + k 2^-10) puts odd k exactly on a tie
print(json.dumps([away.tolist(), even.tolist(), sum(kernel.stats.cache_hits.values())]))
"""


def test_parallel_cached_kernel(tmp_path):
    """A cache=True, parallel=True kernel using numba.literally(kind) caches and reloads."""
    script = tmp_path / "cached_kernel.py"
    script.write_text(CACHED_SCRIPT)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    results = []
    for _ in range(2):
        command = [sys.executable, str(script)]
        proc = subprocess.run(command, env=env, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        results.append(json.loads(proc.stdout))
    # 1.5 + 1.5 ulp is a tie where away and even agree; at 1.5 + 4.5 ulp they differ
    want_away = [0x3E00, 0x3E02, 0x3E05]
    want_even = [0x3E00, 0x3E02, 0x3E04]
    assert results[0][:2] == results[1][:2] == [want_away, want_even]
    assert results[0][2] == 0 and results[1][2] >= 1, results


def test_target_features_are_the_ones_numba_compiles_for(monkeypatch):
    """HALF_COMPARES_NATIVE is read from the features Numba targets: NUMBA_CPU_FEATURES
    when set, else the host's, with AVX off under NUMBA_ENABLE_AVX=0."""
    monkeypatch.setattr(numba.config, "CPU_FEATURES", "+avx2,-avx512fp16,+f16c")
    assert convert._target_features() == {"+avx2", "-avx512fp16", "+f16c"}
    monkeypatch.setattr(numba.config, "CPU_FEATURES", None)
    monkeypatch.setattr(numba.config, "ENABLE_AVX", False)
    features = convert._target_features()
    assert features and not any(f[1:].startswith("avx") for f in features)


def test_float_bits_round_trip_in_python_and_kernels():
    @njit
    def negated(x):   # -x through bits, in a kernel: x's bits xor its sign bit
        sign = convert.float_bits(x) ^ convert.float_bits(-x)
        return convert.float_from_bits(convert.float_bits(x) ^ sign, x)

    for x in (np.float32(-0.0), np.float32(1.5), np.float64(-2.25), np.float64(np.inf)):
        width = np.uint32 if x.dtype == np.float32 else np.uint64
        bits = convert.float_bits(x)
        assert bits == np.asarray(x).view(width)[()]
        back = convert.float_from_bits(bits, x)
        assert back.dtype == x.dtype and np.asarray(back).view(width) == bits
        got = x.dtype.type(negated(x))   # a kernel returns a Python float: float32 is exact in it
        assert np.asarray(got).view(width) == np.asarray(-x).view(width)
