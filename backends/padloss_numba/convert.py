"""Scalar conversions between storage dtypes and compute floats, for use inside @njit kernels.

Numba's CPU target has no float16/bfloat16 type, so such tensors travel as uint16 bit patterns
and are widened/narrowed here, one element at a time, in code that LLVM can inline and
vectorize (no Python objects, branchless selects).

Kernels call ``load(kind, x)``, ``store_nearest_even(kind, v)`` and ``store_half_away(kind, v)``
with ``kind`` a compile-time integer literal (a closure constant of the kernel; the Python entry
points below use ``numba.literally``); the choice of conversion is made while typing, so no
branch on ``kind`` is left at run time.

Rounding: ``store_nearest_even`` is IEEE round-to-nearest-even from the value's own precision
(float64 inputs are rounded once, never float64 -> float32 -> float16). ``store_half_away`` is
CANN's CAST_ROUND: round half away from zero. Both keep NaN a quiet NaN with its sign and send
finite values that round past the largest finite value to infinity.

The helpers pin fastmath=False, so a fastmath caller cannot fold away their exact NaN/inf/tie
comparisons. The kind-dispatched overloads are not inlined by Numba (``inline="always"``
copies and retypes the callee's IR at every call site: 22% of the pad body's compile
time); each is compiled once per kind and type, and LLVM inlines it, vectorising the same.
"""

import llvmlite.binding as llvm
import numba
import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import errors
from numba.extending import intrinsic, overload

F16 = 0
BF16 = 1
F32 = 2
F64 = 3
STORAGE_CODE = {"float16": F16, "bfloat16": BF16, "float32": F32, "float64": F64}
# What kernels read where Numba has no type of its own (bool arrives as bytes), as
# dtype instances: a view to one is 20% faster than to a type.
STORAGE_VIEW = {"float16": np.dtype(np.uint16), "bfloat16": np.dtype(np.uint16), "bool": np.dtype(np.uint8)}


# --- LLVM-level casts (numba has no half type and no scalar bit reinterpretation) -----------------


def _llvm_cast(src, dst, build):
    """Make an intrinsic ``dst(src)`` whose body is ``build(builder, value)`` in LLVM IR.

    Integer sources accept any integer type and wrap it to ``src`` first, because numba widens
    small unsigned arithmetic (``uint16 + uint16`` is 64-bit).
    """

    @intrinsic
    def cast(typingctx, x):
        if x != src and not (isinstance(src, types.Integer) and isinstance(x, types.Integer)):
            return None

        def codegen(context, builder, sig, args):
            return build(builder, context.cast(builder, args[0], sig.args[0], src))

        return dst(x), codegen

    return cast


def _provide_half_libcalls():
    """Without F16C (e.g. NUMBA_CPU_NAME=generic) LLVM calls __extendhfsf2/__truncsfhf2, which the
    JIT cannot resolve (LLVM aborts the process); libgcc_s from GCC >= 12 exports them."""
    if llvm.address_of_symbol("__extendhfsf2") is None:
        try:
            llvm.load_library_permanently("libgcc_s.so.1")
        except RuntimeError:  # no libgcc_s (not Linux): compile for a CPU with F16C instead
            pass


_provide_half_libcalls()
_HALF, _FLOAT = ir.HalfType(), ir.FloatType()


def _target_features() -> set[str]:
    """The CPU features Numba compiles for, chosen as Numba chooses them (its disk cache
    keys compiled code on the same): NUMBA_CPU_FEATURES, else the host's, with the AVX
    ones off under NUMBA_ENABLE_AVX=0; none where LLVM cannot read the host's."""
    if numba.config.CPU_FEATURES is not None:
        return set(numba.config.CPU_FEATURES.split(","))
    try:
        host = llvm.get_host_cpu_features()
    except RuntimeError:
        return set()
    return {f for f in host.flatten().split(",") if numba.config.ENABLE_AVX or not f[1:].startswith("avx")}


# LLVM compares two widened float16 values as float16 (the widening is exact). With
# AVX512-FP16 (which AVX10 implies) that is one native compare of 32 lanes; without it the
# compare is done on widened lanes, but its mask comes out packed to 16 bits and is
# unpacked again (AVX2: 14 of a 16-element loop's 30 instructions). Kernels that compare
# float16 values can test this to compare something LLVM cannot shrink instead.
HALF_COMPARES_NATIVE = any(f == "+avx512fp16" or f.startswith("+avx10") for f in _target_features())

# fpext/fptrunc on LLVM's half type become single vcvtph2ps/vcvtps2ph instructions with F16C
# (scalar or vector); fptrunc rounds to nearest even. Only float<->half is used: a direct
# double->half fptrunc has no instruction on most CPUs and would become a libcall.
_half_bits_to_f32 = _llvm_cast(
    types.uint16, types.float32, lambda b, v: b.fpext(b.bitcast(v, _HALF), _FLOAT)
)
_f32_to_half_bits = _llvm_cast(
    types.float32, types.uint16, lambda b, v: b.bitcast(b.fptrunc(v, _HALF), ir.IntType(16))
)


def _build_f32_to_half_bits_half_away(b, x):
    """RNE to half, then the exact-tie fix, in LLVM IR so that every step stays in float
    registers (numba cannot hold a half value between its own statements)."""
    fabs = b.module.declare_intrinsic("llvm.fabs", [_FLOAT])
    r = b.fptrunc(x, _HALF)
    lo = b.fpext(r, _FLOAT)
    t = b.fadd(b.fsub(x, lo), x)                       # 2x - lo, exact when |x| > |lo|
    up = b.fptrunc(t, _HALF)
    away = b.fcmp_ordered(">", b.call(fabs, [x]), b.call(fabs, [lo]))
    on_grid = b.fcmp_ordered("==", b.fpext(up, _FLOAT), t)
    return b.bitcast(b.select(b.and_(away, on_grid), up, r), ir.IntType(16))


_f32_to_half_bits_half_away = _llvm_cast(types.float32, types.uint16, _build_f32_to_half_bits_half_away)


@intrinsic
def opaque(typingctx, x):
    """``x`` through an empty asm statement, which LLVM cannot see into: a loop storing
    it stays a (vector) loop instead of becoming a memset call."""
    if not isinstance(x, (types.Integer, types.Float)):
        return None

    def codegen(context, builder, sig, args):
        value = args[0]
        bits = ir.IntType(context.get_abi_sizeof(value.type) * 8)   # floats pass as integers:
        asm = ir.InlineAsm(ir.FunctionType(bits, [bits]), "", "=r,0")  # "r" exists on every target
        hidden = builder.call(asm, [builder.bitcast(value, bits)])
        return builder.bitcast(hidden, value.type)

    return x(x), codegen


_f32_as_u32 = _llvm_cast(types.float32, types.uint32, lambda b, v: b.bitcast(v, ir.IntType(32)))
_u32_as_f32 = _llvm_cast(types.uint32, types.float32, lambda b, v: b.bitcast(v, _FLOAT))
_f64_as_u64 = _llvm_cast(types.float64, types.uint64, lambda b, v: b.bitcast(v, ir.IntType(64)))
_u64_as_f64 = _llvm_cast(types.uint64, types.float64, lambda b, v: b.bitcast(v, ir.DoubleType()))


# --- scalar helpers -------------------------------------------------------------------------------

# Explicit fastmath=False: numba callees otherwise inherit a fastmath caller's flags, and nnan/ninf
# would fold away the exact NaN/inf/tie comparisons below.
_strict = njit(fastmath=False)


@_strict
def f16_bits_to_f32(bits):
    """float16 bits -> float32, exact; numba cannot type float16, LLVM's half type can."""
    return _half_bits_to_f32(bits)


@_strict
def f32_to_f16_bits_rne(x):
    """float32 -> float16 bits, nearest even (LLVM fptrunc == numpy's astype(float16))."""
    return _f32_to_half_bits(np.float32(x))


@_strict
def f32_to_f16_bits_half_away(x):
    """float32 -> float16 bits, ties away from zero (CANN CAST_ROUND): RNE, then fix exact ties.

    Tie test in float registers only: ``lo`` = RNE(x) widened, ``t = 2x - lo`` (exact when
    |x| > |lo|). x was a tie that RNE rounded toward zero exactly when |x| > |lo| and ``t`` is a
    float16 value (then it is the neighbour away from zero); for other x, t lies strictly between
    two float16 neighbours. NaN and overflow fail both tests.
    """
    return _f32_to_half_bits_half_away(np.float32(x))


@_strict
def bf16_bits_to_f32(bits):
    """bfloat16 bits -> float32, exact: bfloat16 is the top half of a float32."""
    return _u32_as_f32(np.uint32(bits) << 16)


@_strict
def _bf16_round(x, bias):
    """bfloat16 narrowing: add ``bias`` to the float32 bits, keep the top half; NaN stays quiet NaN.

    The ``np.uint32`` wrap keeps the arithmetic 32-bit (numba widens it to 64), so LLVM vectorizes
    with 32-bit lanes; the sum only wraps for NaN patterns, which the select discards.
    """
    x = np.float32(x)
    b = _f32_as_u32(x)
    rounded = np.uint32(b + bias) >> 16
    quiet_nan = (b >> 16) | 0x0040
    return np.uint16(quiet_nan if x != x else rounded)


@_strict
def f32_to_bf16_bits_rne(x):
    """float32 -> bfloat16 bits, nearest even; the ``+ lsb`` in the bias sends ties to even."""
    b = _f32_as_u32(np.float32(x))
    return _bf16_round(x, 0x7FFF + ((b >> 16) & 1))


@_strict
def f32_to_bf16_bits_exact(x):
    """float32 -> bfloat16 bits of a value bfloat16 represents: its top half, no rounding work
    (any NaN keeps its top half, still a NaN: a NaN's payload is not the contract's)."""
    return np.uint16(_f32_as_u32(np.float32(x)) >> 16)


@_strict
def f32_to_bf16_bits_half_away(x):
    """float32 -> bfloat16 bits, ties away from zero: bias 0x8000 on the sign-magnitude pattern."""
    return _bf16_round(x, np.uint32(0x8000))


@_strict
def f64_to_f32_round_odd(x):
    """float64 -> float32 rounded to odd, so a further rounding to <= 22 bits is correctly rounded.

    Inexact results take the neighbour with an odd last bit: truncate toward zero (undo RNE's
    round-up), then set the last bit. Overflow gives +-FLT_MAX (odd), which still narrows to inf.
    """
    x = np.float64(x)
    r = np.float32(x)
    b = _f32_as_u32(r)
    b -= np.uint32(abs(np.float64(r)) > abs(x))
    b |= np.uint32(np.float64(r) != x)  # NaN: sets a payload bit of a quiet NaN, harmless
    return _u32_as_f32(b)


@_strict
def f64_to_f16_bits_rne(x):
    """float64 -> float16 bits, nearest even, single rounding (via round-to-odd float32)."""
    return _f32_to_half_bits(f64_to_f32_round_odd(x))


@_strict
def f64_to_bf16_bits_rne(x):
    """float64 -> bfloat16 bits, nearest even, single rounding (via round-to-odd float32)."""
    return f32_to_bf16_bits_rne(f64_to_f32_round_odd(x))


@_strict
def f64_to_f16_bits_half_away(x):
    """float64 -> float16 bits, ties away, single rounding (round-to-odd keeps ties exact)."""
    return f32_to_f16_bits_half_away(f64_to_f32_round_odd(x))


@_strict
def f64_to_bf16_bits_exact(x):
    """float64 -> bfloat16 bits of a value bfloat16 represents (exact through float32)."""
    return f32_to_bf16_bits_exact(np.float32(x))


@_strict
def f64_to_bf16_bits_half_away(x):
    """float64 -> bfloat16 bits, ties away, single rounding (round-to-odd keeps ties exact)."""
    return f32_to_bf16_bits_half_away(f64_to_f32_round_odd(x))


# --- kind-dispatched API (resolved at compile time) -----------------------------------------------


def load(kind, x):
    """Widen one stored element: float32 for F16/BF16 (uint16 bits) and F32, float64 for F64."""
    return _load_py(kind, x)


def store_nearest_even(kind, v):
    """Narrow a float32/float64 value to ``kind``'s storage: nearest even, single rounding."""
    return _store_nearest_even_py(kind, v)


def store_half_away(kind, v):
    """Narrow to ``kind``'s storage with ties away from zero; F32 and F64 are plain casts."""
    return _store_half_away_py(kind, v)


def store_exact(kind, v):
    """Narrow a value that ``kind`` represents exactly (the caller knows it does), with the
    least work: what every rounding returns for it (bfloat16 truncates; the others cast)."""
    return _store_exact_py(kind, v)


def float_bits(x):
    """A float32's bits as uint32, a float64's as uint64 (a vector lane's worth: no widening)."""
    x = np.asarray(x)
    return x.view(np.uint32 if x.dtype == np.float32 else np.uint64)[()]


def float_from_bits(bits, like):
    """The float of ``like``'s type (float32 or float64) whose bits are ``bits`` (the low 32 or 64)."""
    dtype = np.asarray(like).dtype
    return np.asarray(bits).astype(np.uint32 if dtype == np.float32 else np.uint64).view(dtype)[()]


@overload(float_bits)
def _ol_float_bits(x):
    if x == types.float32:
        return lambda x: _f32_as_u32(x)
    if x == types.float64:
        return lambda x: _f64_as_u64(x)
    raise errors.TypingError(f"float_bits takes float32 or float64, not {x}")


@overload(float_from_bits)
def _ol_float_from_bits(bits, like):
    if like == types.float32:
        return lambda bits, like: _u32_as_f32(bits)
    if like == types.float64:
        return lambda bits, like: _u64_as_f64(bits)
    raise errors.TypingError(f"float_from_bits makes float32 or float64, not {like}")


def _literal_kind(kind):
    literal = isinstance(kind, types.IntegerLiteral)
    if not literal or kind.literal_value not in (F16, BF16, F32, F64):
        raise errors.TypingError(
            f"kind must be a literal storage code 0..3 (use numba.literally(kind)), got {kind}"
        )
    return kind.literal_value


def _require_float(v):
    if v not in (types.float32, types.float64):
        raise errors.TypingError(f"compute value must be float32 or float64, got {v}")


@overload(load, prefer_literal=True)
def _ol_load(kind, x):
    k = _literal_kind(kind)
    if k in (F16, BF16) and not isinstance(x, types.Integer):
        raise errors.TypingError(f"float16/bfloat16 elements are uint16 bits, got {x}")
    widen = {F16: f16_bits_to_f32, BF16: bf16_bits_to_f32}.get(k)
    if widen is not None:
        return lambda kind, x: widen(x)
    if k == F32:
        return lambda kind, x: np.float32(x)
    return lambda kind, x: np.float64(x)


def _store_overload(f16_narrowers, bf16_narrowers):
    """The typing of a store: for float16/bfloat16 the (from float32, from float64)
    narrowing helper that matches ``v``; float32 and float64 are plain casts (so a
    float64 -> float32 store rounds to nearest even whatever the mode)."""

    def typing(kind, v):
        k = _literal_kind(kind)
        _require_float(v)
        wide = int(v == types.float64)
        narrow = {F16: f16_narrowers[wide], BF16: bf16_narrowers[wide]}.get(k)
        if narrow is not None:
            return lambda kind, v: narrow(v)
        if k == F32:
            return lambda kind, v: np.float32(v)
        return lambda kind, v: np.float64(v)

    return typing


overload(store_nearest_even, prefer_literal=True)(_store_overload(
    (f32_to_f16_bits_rne, f64_to_f16_bits_rne), (f32_to_bf16_bits_rne, f64_to_bf16_bits_rne)))
overload(store_half_away, prefer_literal=True)(_store_overload(
    (f32_to_f16_bits_half_away, f64_to_f16_bits_half_away),
    (f32_to_bf16_bits_half_away, f64_to_bf16_bits_half_away)))
overload(store_exact, prefer_literal=True)(_store_overload(
    (f32_to_f16_bits_rne, f64_to_f16_bits_rne), (f32_to_bf16_bits_exact, f64_to_bf16_bits_exact)))


# Entry points so the API also works when called from plain Python (e.g. in a REPL).
@_strict
def _load_py(kind, x):
    numba.literally(kind)
    return load(kind, x)


@_strict
def _store_nearest_even_py(kind, v):
    numba.literally(kind)
    return store_nearest_even(kind, v)


@_strict
def _store_half_away_py(kind, v):
    numba.literally(kind)
    return store_half_away(kind, v)


@_strict
def _store_exact_py(kind, v):
    numba.literally(kind)
    return store_exact(kind, v)
