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
CANN's CAST_ROUND: round half away from zero; ``store_sum_half_away`` the same for a value that
is a sum of stored values (the pad's), where float16's tie test is cheaper. All keep NaN a quiet
NaN with its sign and send finite values that round past the largest finite value to infinity.

Each conversion is a few LLVM instructions that typing picks and lowering writes into the
calling kernel (Numba's low-level ``type_callable``/``lower_builtin``): nothing is compiled for
them on their own. A fastmath caller cannot fold away their exact NaN/inf/tie tests (see the
IR builders below).
"""

import functools
import inspect

import llvmlite.binding as llvm
import numba
import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils, errors
from numba.extending import intrinsic, lower_builtin, type_callable

F16 = 0
BF16 = 1
F32 = 2
F64 = 3
STORAGE_CODE = {"float16": F16, "bfloat16": BF16, "float32": F32, "float64": F64}
# What kernels are typed to read where Numba has no type of its own (bool arrives as bytes).
# Plans hand such arrays to the compiled wrappers as they are, which read them as these
# (numba_internals.compiled_wrapper); a kernel called through its dispatcher takes views.
STORAGE_VIEW = {"float16": np.dtype(np.uint16), "bfloat16": np.dtype(np.uint16), "bool": np.dtype(np.uint8)}


def _provide_half_libcalls():
    """Without F16C (e.g. NUMBA_CPU_NAME=generic) LLVM calls __extendhfsf2/__truncsfhf2, which the
    JIT cannot resolve (LLVM aborts the process); libgcc_s from GCC >= 12 exports them."""
    if llvm.address_of_symbol("__extendhfsf2") is None:
        try:
            llvm.load_library_permanently("libgcc_s.so.1")
        except RuntimeError:  # no libgcc_s (not Linux): compile for a CPU with F16C instead
            pass


_provide_half_libcalls()


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
_FEATURES = _target_features()   # read once: LLVM takes ~0.3 ms to list the host's
HALF_COMPARES_NATIVE = any(f == "+avx512fp16" or f.startswith("+avx10") for f in _FEATURES)

# The bytes of the target's widest vector register of 16-bit lanes (AVX-512BW's 64, else
# AVX2's 32): for kernels that write fixed-width vectors of them, sized to the registers.
VECTOR_BYTES = 64 if "+avx512bw" in _FEATURES else 32

# The 16-bit lanes of one x86 ``psignw`` (negate each lane where another operand's is
# negative) on the target's registers: AVX2's 16 where those are 32 bytes; 0 with AVX-512,
# which has no psignw of 64 bytes, and off x86. LLVM does not form it from the generic IR.
SIGN_LANES = 16 if "+avx2" in _FEATURES and VECTOR_BYTES == 32 else 0


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


# --- the conversions, as LLVM IR ------------------------------------------------------------------
# Each ``_to_*``/``_from_*`` builder takes an IR builder and a value and returns the converted
# value. fpext/fptrunc on LLVM's half type become single vcvtph2ps/vcvtps2ph instructions with
# F16C (scalar or vector); fptrunc rounds to nearest even. Only float<->half is used: a direct
# double->half fptrunc has no instruction on most CPUs and would become a libcall. The
# builders are element-wise: a value may be a scalar or a vector of lanes (padloss_numba.window
# folds eight at once), and every type and constant takes the value's shape (``_shaped``).
#
# Numba's fastmath option adds its flags to every flagless float operation of a kernel, and
# nnan/reassoc would fold away the exact NaN and tie tests below. So each float operation
# here carries ``afn`` (approximate library functions: nothing these operations do), and
# magnitudes are taken on the bits, not through a call of llvm.fabs (calls get the flags too).

_I16, _I32 = ir.IntType(16), ir.IntType(32)
_HALF, _FLOAT = ir.HalfType(), ir.FloatType()
_EXACT = ("afn",)


def _shaped(element, like):
    """The type ``element`` (a scalar type) in the shape of ``like`` (a value or a type):
    itself for a scalar, a vector of as many lanes for a vector."""
    like = getattr(like, "type", like)
    return ir.VectorType(element, like.count) if isinstance(like, ir.VectorType) else element


def constant_like(element, value, like):
    """The constant ``value`` of type ``element``, in every lane of ``like``'s shape."""
    shaped = _shaped(element, like)
    return ir.Constant(shaped, [value] * shaped.count if isinstance(shaped, ir.VectorType) else value)


def splat(b, value, lanes):
    """``value`` in every lane of a vector."""
    vector = ir.VectorType(value.type, lanes)
    first = b.insert_element(ir.Constant(vector, ir.Undefined), value, ir.Constant(ir.IntType(32), 0))
    return b.shuffle_vector(first, ir.Constant(vector, ir.Undefined),
                            ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes))


def vector_at(context, builder, aryty, ary, indices, vector):
    """A pointer of type ``vector*`` to the element of array ``ary`` at ``indices`` (intp
    values; no wraparound, no bounds check: a vector may reach past a row's end)."""
    array = context.make_array(aryty)(context, builder, ary)
    item = cgutils.get_item_pointer(context, builder, aryty, array, indices)
    return builder.bitcast(item, vector.as_pointer())


def _lanes_of(ty):
    """A vector type's element type; a scalar type itself."""
    return ty.element if isinstance(ty, ir.VectorType) else ty


def _magnitude(b, x):
    """|x|, by clearing the sign bit."""
    width = 32 if _lanes_of(x.type) == _FLOAT else 64
    bits = _shaped(ir.IntType(width), x)
    return b.bitcast(b.and_(b.bitcast(x, bits), constant_like(ir.IntType(width), (1 << (width - 1)) - 1, x)),
                     x.type)


def _from_half(b, bits):
    return b.fpext(b.bitcast(bits, _shaped(_HALF, bits)), _shaped(_FLOAT, bits))


def _from_bfloat16(b, bits):
    """bfloat16 is the top half of a float32."""
    wide = b.zext(bits, _shaped(_I32, bits))
    return b.bitcast(b.shl(wide, constant_like(_I32, 16, bits)), _shaped(_FLOAT, bits))


def _round_to_odd(b, x):
    """float64 -> float32 rounded to odd, so a further rounding to <= 22 bits is correctly
    rounded: inexact results take the neighbour with an odd last bit (undo RNE's round-up,
    then set the last bit). Overflow gives +-FLT_MAX (odd), which still narrows to inf; a
    NaN gets a payload bit, harmless."""
    r = b.fptrunc(x, _shaped(_FLOAT, x))
    wide = b.fpext(r, x.type)
    bits = b.bitcast(r, _shaped(_I32, x))
    rounded_up = b.fcmp_ordered(">", _magnitude(b, wide), _magnitude(b, x), flags=_EXACT)
    bits = b.sub(bits, b.zext(rounded_up, bits.type))
    bits = b.or_(bits, b.zext(b.fcmp_unordered("!=", wide, x, flags=_EXACT), bits.type))
    return b.bitcast(bits, r.type)


def _to_half(b, x):
    return b.bitcast(b.fptrunc(x, _shaped(_HALF, x)), _shaped(_I16, x))


def _to_half_away(b, x):
    """float32 -> float16 bits, ties away from zero (CANN CAST_ROUND): RNE, then the exact-tie
    fix, all in float registers. ``lo`` = RNE(x) widened, ``t = 2x - lo`` (exact when
    |x| > |lo|). x was a tie that RNE rounded toward zero exactly when |x| > |lo| and ``t`` is
    a float16 value (then it is the neighbour away from zero); for other x, t lies strictly
    between two float16 neighbours. NaN and overflow fail both tests."""
    r = b.fptrunc(x, _shaped(_HALF, x))
    lo = b.fpext(r, x.type)
    t = b.fadd(b.fsub(x, lo, flags=_EXACT), x, flags=_EXACT)
    up = b.fptrunc(t, r.type)
    away = b.fcmp_ordered(">", _magnitude(b, x), _magnitude(b, lo), flags=_EXACT)
    on_grid = b.fcmp_ordered("==", b.fpext(up, x.type), t, flags=_EXACT)
    return b.bitcast(b.select(b.and_(away, on_grid), up, r), _shaped(_I16, x))


def _to_half_away_sum(b, x):
    """``_to_half_away`` for a float32 that is a sum of float16 values (a multiple of 2^-24,
    as every partial sum of them in float32 stays), in one conversion where that takes four.
    Below 2^-14 such a value is a float16 subnormal, exact; above, float16 keeps 11 of
    float32's 24 bits, so x is a tie that RNE rounded toward zero exactly when its 14 low
    bits are 0x1000 (the 13 dropped bits a half, the last kept bit even). Setting its lowest
    bit then makes the dropped bits more than a half, and RNE rounds away from zero; RNE
    overflows to infinity from 65520 up either way, and a NaN stays a NaN (its low 13 bits
    are a float16 payload's, zero, so it never matches). Set in 32-bit lanes before the
    conversion, not added to its 16-bit result: no mask packed to 16-bit lanes, 4 instructions
    to a window where that took 9 under AVX2 (docs/performance.md, "Pad kernel")."""
    bits = b.bitcast(x, _shaped(_I32, x))
    low = b.and_(bits, constant_like(_I32, 0x3FFF, x))
    tie_down = b.zext(b.icmp_unsigned("==", low, constant_like(_I32, 0x1000, x)), bits.type)
    return _to_half(b, b.bitcast(b.or_(bits, tie_down), x.type))


def _biased_top(b, x, bias):
    """The top half of the float32 bits of ``x`` plus ``bias`` (as 32-bit lanes)."""
    return b.lshr(b.add(b.bitcast(x, _shaped(_I32, x)), bias), constant_like(_I32, 16, x))


def _bfloat16_rounded(b, x, bias):
    """Add ``bias`` to the float32 bits and keep the top half; NaN stays a quiet NaN. The
    sum only wraps for NaN patterns, which the select discards."""
    top = b.lshr(b.bitcast(x, _shaped(_I32, x)), constant_like(_I32, 16, x))
    rounded = _biased_top(b, x, bias)
    quiet_nan = b.or_(top, constant_like(_I32, 0x0040, x))
    is_nan = b.fcmp_unordered("uno", x, x, flags=_EXACT)
    return b.trunc(b.select(is_nan, quiet_nan, rounded), _shaped(_I16, x))


def _to_bfloat16(b, x):
    """Nearest even: the ``+ lsb`` in the bias sends ties to even."""
    bits = b.bitcast(x, _shaped(_I32, x))
    lsb = b.and_(b.lshr(bits, constant_like(_I32, 16, x)), constant_like(_I32, 1, x))
    return _bfloat16_rounded(b, x, b.add(constant_like(_I32, 0x7FFF, x), lsb))


def _to_bfloat16_away(b, x):
    """Ties away from zero: bias 0x8000 on the sign-magnitude pattern."""
    return _bfloat16_rounded(b, x, constant_like(_I32, 0x8000, x))


def _to_bfloat16_away_sum(b, x):
    """``_to_bfloat16_away`` for a float32 that is a sum of bfloat16 values: no NaN test.
    Such a NaN is an operand's (quieted) or the default NaN, with a zero low half, so the
    bias cannot carry into its top half."""
    return b.trunc(_biased_top(b, x, constant_like(_I32, 0x8000, x)), _shaped(_I16, x))


def _to_bfloat16_exact(b, x):
    """The top half of a value bfloat16 represents: no rounding work (a NaN keeps its top
    half, still a NaN: a NaN's payload is not the contract's)."""
    return b.trunc(b.lshr(b.bitcast(x, _shaped(_I32, x)), constant_like(_I32, 16, x)), _shaped(_I16, x))


def _from_double(narrow, exact=False):
    """``narrow`` (from float32) applied to a float64 with a single rounding: through
    round-to-odd float32, or a plain fptrunc for a value ``exact`` in the target."""
    return lambda b, x: narrow(b, b.fptrunc(x, _shaped(_FLOAT, x)) if exact else _round_to_odd(b, x))


# --- kind-dispatched API (resolved at compile time) -----------------------------------------------
#
# Kernels call these with ``kind`` a literal (a closure constant of the kernel): typing picks
# the conversion and lowering writes its IR into the calling kernel, so nothing is compiled
# for them (as overloads, each a function compiled once per kind and type, they were a fifth
# of the L1 kernel's first compile). From plain Python they run through small kernels.


def load(kind, x):
    """Widen one stored element: float32 for F16/BF16 (uint16 bits) and F32, float64 for F64."""
    return _load_py(kind, x)


def store_nearest_even(kind, v):
    """Narrow a float32/float64 value to ``kind``'s storage: nearest even, single rounding."""
    return _store_nearest_even_py(kind, v)


def store_half_away(kind, v):
    """Narrow to ``kind``'s storage with ties away from zero; F32 and F64 are plain casts."""
    return _store_half_away_py(kind, v)


def store_sum_half_away(kind, v):
    """``store_half_away`` of a sum of ``kind``'s stored values (the pad's sums): the
    same bits with less work (float16: a cheaper tie test; bfloat16: no NaN test),
    valid on such sums only."""
    return _store_sum_half_away_py(kind, v)


def store_exact(kind, v):
    """Narrow a value that ``kind`` represents exactly (the caller knows it does), with the
    least work: what every rounding returns for it (bfloat16 truncates; the others cast)."""
    return _store_exact_py(kind, v)


def f64_to_f32_round_odd(x):
    """float64 -> float32 rounded to odd (the first step of a float64's single rounding)."""
    return _round_to_odd_py(np.float64(x))


def float_bits(x):
    """A float32's bits as uint32, a float64's as uint64 (a vector lane's worth: no widening)."""
    x = np.asarray(x)
    return x.view(np.uint32 if x.dtype == np.float32 else np.uint64)[()]


def float_from_bits(bits, like):
    """The float of ``like``'s type (float32 or float64) whose bits are ``bits`` (the low 32 or 64)."""
    dtype = np.asarray(like).dtype
    return np.asarray(bits).astype(np.uint32 if dtype == np.float32 else np.uint64).view(dtype)[()]


def builtin(function):
    """Register ``typing(*argument types) -> (return type, emit)`` as how kernels call
    ``function``: ``emit(context, builder, signature, argument values)`` writes its IR. A
    typing that raises TypingError for non-literal arguments is tried again with the
    literals (Numba types a call with plain types first)."""

    def register(typing):
        @type_callable(function)
        def typer(context):
            @functools.wraps(typing)   # Numba reads the parameters from typing's signature
            def resolve(*args):
                return typing(*args)[0]
            return resolve

        arity = len(inspect.signature(typing).parameters)

        @lower_builtin(function, *[types.Any] * arity)
        def lower(context, builder, sig, args):
            return typing(*sig.args)[1](context, builder, sig, args)

        return typing

    return register


def _literal_kind(kind):
    literal = isinstance(kind, types.IntegerLiteral)
    if not literal or kind.literal_value not in (F16, BF16, F32, F64):
        raise errors.TypingError(
            f"kind must be a literal storage code 0..3 (use numba.literally(kind)), got {kind}"
        )
    return kind.literal_value


def _cast_to(to):
    """Lowering of a plain Numba cast of the value argument (the last) to ``to``."""
    return lambda context, builder, sig, args: context.cast(builder, args[-1], sig.args[-1], to)


def _ir(build, source=None):
    """Lowering of ``build`` on the value argument (the last), first cast to ``source``."""
    def emit(context, builder, sig, args):
        value = args[-1] if source is None else context.cast(builder, args[-1], sig.args[-1], source)
        return build(builder, value)
    return emit


@builtin(load)
def load_typing(kind, x):
    k = _literal_kind(kind)
    if k in (F16, BF16):
        if not isinstance(x, types.Integer):
            raise errors.TypingError(f"float16/bfloat16 elements are uint16 bits, got {x}")
        return types.float32, _ir(_from_half if k == F16 else _from_bfloat16, types.uint16)
    to = types.float32 if k == F32 else types.float64
    return to, _cast_to(to)


def _store_typing(narrowers: dict, exact: bool = False):
    """The typing of a store: for float16/bfloat16 the narrowing from float32 of
    ``narrowers`` (kind -> IR builder), from float64 with a single rounding (through
    round-to-odd float32; a plain fptrunc for a value the target represents, ``exact``);
    float32 and float64 are plain casts (so a float64 -> float32 store rounds to nearest
    even whatever the mode)."""

    def typing(kind, v):
        k = _literal_kind(kind)
        if v not in (types.float32, types.float64):
            raise errors.TypingError(f"compute value must be float32 or float64, got {v}")
        if k in narrowers:
            narrow = narrowers[k]
            return types.uint16, _ir(narrow if v == types.float32 else _from_double(narrow, exact))
        to = types.float32 if k == F32 else types.float64
        return to, _cast_to(to)

    return typing


# The IR builders of the 16-bit kinds, by kind: widening to float32, and each store's
# narrowing from float32. Builtins that convert whole vectors (padloss_numba.window) use them.
WIDEN = {F16: _from_half, BF16: _from_bfloat16}
NARROW = {store_nearest_even: {F16: _to_half, BF16: _to_bfloat16},
          store_half_away: {F16: _to_half_away, BF16: _to_bfloat16_away},
          store_sum_half_away: {F16: _to_half_away_sum, BF16: _to_bfloat16_away_sum},
          store_exact: {F16: _to_half, BF16: _to_bfloat16_exact}}
builtin(store_nearest_even)(_store_typing(NARROW[store_nearest_even]))
builtin(store_half_away)(_store_typing(NARROW[store_half_away]))
builtin(store_sum_half_away)(_store_typing(NARROW[store_sum_half_away]))
builtin(store_exact)(_store_typing(NARROW[store_exact], exact=True))


@builtin(f64_to_f32_round_odd)
def _type_round_to_odd(x):
    if x != types.float64:
        raise errors.TypingError(f"f64_to_f32_round_odd takes a float64, got {x}")
    return types.float32, _ir(_round_to_odd)


@builtin(float_bits)
def _type_float_bits(x):
    if x not in (types.float32, types.float64):
        raise errors.TypingError(f"float_bits takes float32 or float64, not {x}")
    return (types.uint32 if x == types.float32 else types.uint64), _ir(
        lambda b, v: b.bitcast(v, ir.IntType(32 if x == types.float32 else 64)))


@builtin(float_from_bits)
def _type_float_from_bits(bits, like):
    if like not in (types.float32, types.float64) or not isinstance(bits, types.Integer):
        raise errors.TypingError(f"float_from_bits makes float32 or float64 from an integer, not {like}")
    width = types.uint32 if like == types.float32 else types.uint64

    def emit(context, builder, sig, args):
        bits = context.cast(builder, args[0], sig.args[0], width)
        return builder.bitcast(bits, context.get_value_type(like))
    return like, emit


# Entry points so the API also works when called from plain Python (e.g. in a REPL).
@njit
def _load_py(kind, x):
    numba.literally(kind)
    return load(kind, x)


@njit
def _store_nearest_even_py(kind, v):
    numba.literally(kind)
    return store_nearest_even(kind, v)


@njit
def _store_half_away_py(kind, v):
    numba.literally(kind)
    return store_half_away(kind, v)


@njit
def _store_sum_half_away_py(kind, v):
    numba.literally(kind)
    return store_sum_half_away(kind, v)


@njit
def _store_exact_py(kind, v):
    numba.literally(kind)
    return store_exact(kind, v)


@njit
def _round_to_odd_py(x):
    return f64_to_f32_round_odd(x)
