"""The L1-loss backward kernel: one fused pass, one source for every dtype mix.

Each output element is ``sign(self - target) * (grad_output * coef)``, from the
three inputs read in place through their own storage kinds and strides (a
broadcast dim has stride 0) and rounded once to the output's kind. Elements
are independent, so any split over threads gives the same bits.

Arrays arrive flat: 1-D views of each tensor's memory from its lowest address,
with a base offset and per-dim strides in elements, over the plan's coalesced
shape padded to ``RANK`` dims. The last dim is the inner loop; the rows (all
other dims) and blocks of ``block`` inner elements form the work items that
the threads share, walked with an odometer. A row along which grad_output does
not change (the 0-d grad of mean/sum) loads it once; LLVM versions the inner
loops for unit strides and vectorizes them (float16 through F16C/AVX-512 half
conversions, bfloat16 with integer shifts). A large output with unit inner
stride is streamed (``nontemporal``): its whole lines computed two at a time
and stored in one non-temporal store each step (``staged``), the rest in runs
through a small staging buffer, which drains in non-temporal line stores.

``chunk_body(kinds, promoted, exact, streams)`` instantiates the source for
one combination of storage kinds (closure constants, which Numba folds and keys
its on-disk cache on); ``make_kernel(parallel)`` the serial or the parallel
entry point that calls it by address (padloss_numba.indirect).
"""
from __future__ import annotations

import functools

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import errors

from .building import jit, with_globals
from .convert import (
    BF16,
    F16,
    F64,
    HALF_COMPARES_NATIVE,
    SIGN_LANES,
    VECTOR_BYTES,
    builtin,
    constant_like,
    float_bits,
    float_from_bits,
    load,
    load_typing,
    splat,
    store_exact,
    store_nearest_even,
    vector_at,
)
from .indirect import call_body, flat, stack_array
from .nontemporal import LINE, STAGE_BYTES, drain, fence, item_bytes, lead_in, stream_lines
from .numba_internals import BodyCompiler, caller_thread_count
from .scalars import apart, greater, lesser
from .slots import Slots

INT = 4    # storage kind of an integer or bool input (bool travels as uint8)
RANK = 8   # the padded rank of the coalesced shape
ODOMETER_BYTES, OFFSETS_BYTES = 8 * (RANK - 1), 8 * 4   # int64 scratch: outer-dim index, 4 offsets


def load_input(kind, promoted, x):
    """One input element in the compute type (float32, float64 when ``promoted`` is F64);
    kernels only (a builtin, like convert.load).

    Floats widen exactly. Integers are converted to the promoted dtype P with one
    rounding to nearest even, then widened (an int converted to float16 rounds).
    """


@njit(inline="always")
def _unsigned_to_f64_round_odd(magnitude):
    """An unsigned integer as float64: exact below 2**53; above, rounded to odd at bit 11.

    Rounding to odd keeps a sticky bit, so a later rounding to 40 bits or fewer
    (float32, float16, bfloat16) is the single correct rounding of the integer;
    converting through a nearest-even float64 or float32 would round twice.
    """
    magnitude = np.uint64(magnitude)
    sticky = np.uint64((magnitude & np.uint64(0x7FF)) != np.uint64(0))
    coarse = ((magnitude >> np.uint64(11)) | sticky) << np.uint64(11)
    return np.float64(coarse if magnitude >= np.uint64(1 << 53) else magnitude)   # exact


@njit(inline="always")
def _signed_to_f64_round_odd(n):
    """A signed integer as float64, like ``_unsigned_to_f64_round_odd`` (-2**63 included)."""
    if n < 0:
        return -_unsigned_to_f64_round_odd(np.uint64(0) - np.uint64(n))
    return _unsigned_to_f64_round_odd(n)


def _compiled(impl):
    """Lowering that compiles ``impl`` (of the value argument, the last) into the kernel."""
    def emit(context, builder, sig, args):
        return context.compile_internal(builder, impl, sig.return_type(sig.args[-1]), [args[-1]])
    return emit


@builtin(load_input)
def _type_load_input(kind, promoted, x):
    """Floats as ``convert.load`` writes them (widened to float64 for a float64 P);
    integers through a small function compiled into the kernel (integer inputs are rare)."""
    if not isinstance(kind, types.IntegerLiteral) or not isinstance(promoted, types.IntegerLiteral):
        raise errors.TypingError("load_input needs literal kinds")
    k, p = kind.literal_value, promoted.literal_value
    if k == INT:
        if not isinstance(x, types.Integer):
            raise errors.TypingError(f"integer inputs must be integer arrays, got {x}")
        if p == F64:
            return types.float64, _compiled(lambda x: np.float64(x))
        to_f64 = _signed_to_f64_round_odd if x.signed else _unsigned_to_f64_round_odd
        return types.float32, _compiled(lambda x: np.float32(load(p, store_nearest_even(p, to_f64(x)))))
    loaded, emit_load = load_typing(kind, x)
    if p != F64:
        return loaded, emit_load

    def emit(context, builder, sig, args):
        return context.cast(builder, emit_load(context, builder, sig, args), loaded, types.float64)
    return types.float64, emit


@njit(inline="always")
def _signed(a, b, scale):
    """``sign(a - b) * scale`` for a finite ``scale`` > 0: ``scale``, ``-scale``, or +0.0
    (equal, or a NaN).

    A difference of two selects: LLVM keeps this branch-free and spill-free
    (docs/performance.md, "L1: signs and picks").
    """
    zero = np.float32(0.0)                            # exact in either compute type
    return (scale if a > b else zero) - (scale if a < b else zero)


@njit(inline="always")
def _sign(xk, tk, pk, scale, x_raw, t_raw):
    """``_signed`` of the raw self/target elements, loaded in the compute type.

    Two float16 operands without native float16 compares (convert.HALF_COMPARES_NATIVE)
    go through their float32 difference, which has the same sign: exact-signed, never 0
    unless they are equal and never subnormal (float16 values are multiples of 2**-24),
    so even a flush-to-zero mode keeps it; NaN for inf - inf, as for NaN operands. Where
    AVX512-FP16 compares natively, the operands are compared as they are
    (docs/performance.md, "L1: signs and picks").
    """
    if xk == F16 and tk == F16 and not HALF_COMPARES_NATIVE:
        d = load_input(xk, pk, x_raw) - load_input(tk, pk, t_raw)
        return _signed(d, np.float32(0.0), scale)
    return _signed(load_input(xk, pk, x_raw), load_input(tk, pk, t_raw), scale)


def signed_term(xk: int, tk: int, ok: int, pk: int):
    """The function ``term(xk, tk, ok, pk, exact, g, x_raw, t_raw)``: the stored
    ``sign(self - target) * g`` for a finite ``g`` (``_store``'s ``exact``), made the way
    these kinds call for. The kernel body picks it, so only that way is compiled.

    16-bit self and target pick its bits instead of multiplying: ``g``'s, ``-g``'s, or
    ``+0 * g``'s (equal, or a NaN); those products are exact, so the bits are the same.
    Where self, target, P and the output are all one 16-bit kind, the pick is made on
    the stored bits in 16-bit lanes (``picked_bits``): no element is widened or narrowed.
    Otherwise the operands compare as in ``_sign``: float16 pairs through their
    difference where half compares are not native, whose sign bit then flips ``g``'s
    (both float32) or which is compared with 0. float32 and float64 pairs multiply
    (picking did not pay for them: docs/performance.md, "L1: signs and picks"). The
    patterns depend on ``g`` alone, constant along a row, so LLVM makes them once per row.
    """
    if xk not in (F16, BF16) or tk not in (F16, BF16):
        return _multiplied_term
    if xk == tk == ok == pk:
        return _picked_in_storage
    if xk == tk == F16 and not HALF_COMPARES_NATIVE:
        return _picked_by_difference_sign if F64 not in (pk, ok) else _picked_by_difference
    return _picked_by_comparison


@njit(inline="always")
def _patterns(g):
    """g's bits, -g's (a sign flip) and +0 * g's (a zero of g's sign)."""
    return float_bits(g), float_bits(-g), float_bits(np.copysign(g - g, g))


@njit(inline="always")
def _pick(ok, exact, g, a, b):
    """The stored g, -g or +0 * g as a > b, a < b, or neither (equal, or a NaN)."""
    g_bits, flipped, zero = _patterns(g)
    return _store(ok, exact, float_from_bits(g_bits if a > b else (flipped if a < b else zero), g))


@njit(inline="always")
def _picked_by_comparison(xk, tk, ok, pk, exact, g, x_raw, t_raw):
    return _pick(ok, exact, g, load_input(xk, pk, x_raw), load_input(tk, pk, t_raw))


@njit(inline="always")
def _picked_by_difference(xk, tk, ok, pk, exact, g, x_raw, t_raw):
    return _pick(ok, exact, g, load_input(xk, pk, x_raw) - load_input(tk, pk, t_raw), 0)


@njit(inline="always")
def _picked_by_difference_sign(xk, tk, ok, pk, exact, g, x_raw, t_raw):
    g_bits, flipped, zero = _patterns(g)
    d = load_input(xk, pk, x_raw) - load_input(tk, pk, t_raw)
    nonzero = (d < 0) | (d > 0)
    bits = (g_bits ^ (float_bits(d) & (g_bits ^ flipped))) if nonzero else zero
    return _store(ok, exact, float_from_bits(bits, g))


@njit(inline="always")
def _picked_in_storage(xk, tk, ok, pk, exact, g, x_raw, t_raw):
    return picked_bits(x_raw, t_raw, _store(ok, exact, g), ok)


@njit(inline="always")
def _multiplied_term(xk, tk, ok, pk, exact, g, x_raw, t_raw):
    return _store(ok, exact, _sign(xk, tk, pk, np.float32(1.0), x_raw, t_raw) * g)


INFINITY = {F16: 0x7C00, BF16: 0x7F80}   # their bits, by kind; every larger magnitude is a NaN


def picked_bits(x, t, g, kind):
    """The stored bits of ``sign(x - t) * g`` for x, t and g stored in one 16-bit float
    kind (``kind``, a literal F16 or BF16): g's, g's with the sign flipped, or
    ``+0 * g``'s (x = t, or a NaN): a zero of g's sign, or for an inf or NaN g a quiet
    NaN; kernels only (a builtin).

    The comparison is on the bits: a sign-magnitude value as a two's complement int16
    orders as the float does (-0 and +0 both 0), so all of it runs in 16-bit integer
    lanes, 32 to an AVX-512 register. (A NaN g keeps its bits where it is picked or
    flipped, as the pad copies them: a signalling NaN is not quieted.)"""


@builtin(picked_bits)
def _type_picked_bits(x, t, g, kind):
    if not all(isinstance(a, types.Integer) for a in (x, t, g)):
        raise errors.TypingError("picked_bits takes the 16-bit patterns of x, t and g")
    infinity = _infinity_of(kind, "picked_bits")

    def emit(context, builder, sig, args):
        x, t, g = (context.cast(builder, v, ty, types.uint16) for v, ty in zip(args[:3], sig.args[:3]))
        return _picked(builder, x, t, g, infinity)

    return types.uint16, emit


def _infinity_of(kind, name: str) -> int:
    """The bits of a literal 16-bit ``kind``'s infinity; else the TypingError naming ``name``."""
    if not isinstance(kind, types.IntegerLiteral) or kind.literal_value not in INFINITY:
        raise errors.TypingError(f"{name} takes a literal 16-bit kind, got {kind}")
    return INFINITY[kind.literal_value]


def _negated_where_negative(b, m, v):
    """``m``'s lanes negated where ``v``'s are negative, for an ``m`` that is 0 where ``v``
    is: ``(m ^ s) - s`` for ``v``'s sign lanes ``s``; on AVX2 registers one ``psignw`` each
    (convert.SIGN_LANES), which LLVM does not make of the first: the pick's fifteen
    instructions a register become eleven (docs/performance.md, "L1: signs and picks")."""
    lanes = m.type.count if isinstance(m.type, ir.VectorType) else 1
    registers = lanes // SIGN_LANES if SIGN_LANES and lanes % SIGN_LANES == 0 else 0
    if not registers or registers & (registers - 1):   # (a power of two of them: joined pairwise)
        s = b.ashr(v, constant_like(ir.IntType(16), 15, v))
        return b.sub(b.xor(m, s), s)
    register = ir.VectorType(ir.IntType(16), SIGN_LANES)
    psign = b.module.declare_intrinsic("llvm.x86.avx2.psign.w",
                                       fnty=ir.FunctionType(register, [register, register]))
    signed = [b.call(psign, [_lanes(b, m, first, SIGN_LANES), _lanes(b, v, first, SIGN_LANES)])
              for first in range(0, lanes, SIGN_LANES)]
    while len(signed) > 1:   # joined pairwise back into one vector
        signed = [_lanes(b, low, 0, 2 * low.type.count, high) for low, high in zip(signed[::2], signed[1::2])]
    return signed[0]


def _lanes(b, v, first: int, count: int, after=None):
    """Lanes ``first .. first + count`` of ``v``, or of ``v`` and ``after`` end to end."""
    indices = ir.Constant(ir.VectorType(ir.IntType(32), count), list(range(first, first + count)))
    return b.shuffle_vector(v, after if after is not None else ir.Constant(v.type, ir.Undefined), indices)


def _picked(b, x, t, g, infinity: int):
    """``picked_bits``' IR, on 16-bit integers or vectors of them alike."""
    i16 = ir.IntType(16)

    def constant(value):
        return constant_like(i16, value, x)

    limit, sign, magnitude = constant(infinity), constant(0x8000), constant(0x7FFF)

    def ordered(v):   # (the value as an int16 that orders as the float, its magnitude)
        m = b.and_(v, magnitude)
        return _negated_where_negative(b, m, v), m

    (kx, mx), (kt, mt) = ordered(x), ordered(t)
    quiet_nan = constant(infinity | infinity >> 1)   # the exponent and the top fraction bit
    finite = b.icmp_unsigned("<", b.and_(g, magnitude), limit)
    zero = b.select(finite, b.and_(g, sign), b.or_(g, quiet_nan))
    flipped = b.xor(g, sign)
    nan = b.or_(b.icmp_unsigned(">", mx, limit), b.icmp_unsigned(">", mt, limit))
    picked = b.select(b.icmp_signed(">", kx, kt), g, b.select(b.icmp_signed("<", kx, kt), flipped, zero))
    return b.select(nan, zero, picked)


# Elements ``pick_lanes`` takes at once, by how g comes (docs/performance.md, "L1: signs and
# picks"). One pattern for the row (a fixed grad): two vector registers of 16-bit lanes (64
# with AVX-512BW, 32 with AVX2), where LLVM vectorised the element loop one register wide.
# One g a lane: as many with AVX-512's 32 registers; with AVX2's 16, one register, as two
# spilled the grad's patterns, made lane by lane, to the stack.
FIXED_PICK_LANES = VECTOR_BYTES
VARYING_PICK_LANES = VECTOR_BYTES if VECTOR_BYTES == 64 else VECTOR_BYTES // 2


def pick_lanes(out, o, x, xo, t, to, g, go, kind):
    """``out[o + i] = picked_bits(x[xo + i], t[to + i], g[go + i], kind)`` for the
    ``VARYING_PICK_LANES`` lanes i, as vectors (1-D uint16 arrays, unit stride); or, for
    ``g`` one 16-bit pattern for every lane (``go`` unused then), ``FIXED_PICK_LANES`` of
    them; kernels only (a builtin)."""


@builtin(pick_lanes)
def _type_pick_lanes(out, o, x, xo, t, to, g, go, kind):
    per_lane = isinstance(g, types.Array)
    arrays = (out, x, t, g) if per_lane else (out, x, t)
    if not all(isinstance(a, types.Array) and a.ndim == 1 and a.dtype == types.uint16 for a in arrays):
        raise errors.TypingError("pick_lanes takes 1-D uint16 arrays (g: one, or a 16-bit pattern)")
    if not per_lane and not isinstance(g, types.Integer):
        raise errors.TypingError("pick_lanes takes g as a 1-D uint16 array or a 16-bit pattern")
    infinity = _infinity_of(kind, "pick_lanes")
    lanes = VARYING_PICK_LANES if per_lane else FIXED_PICK_LANES
    vector = ir.VectorType(ir.IntType(16), lanes)

    def emit(context, builder, sig, args):
        def at(array, offset):   # a vector* to args[array][args[offset]]
            index = context.cast(builder, args[offset], sig.args[offset], types.intp)
            return vector_at(context, builder, sig.args[array], args[array], [index], vector)

        x, t = (builder.load(at(array, offset), align=1) for array, offset in ((2, 3), (4, 5)))
        if per_lane:
            g = builder.load(at(6, 7), align=1)
        else:
            g = splat(builder, context.cast(builder, args[6], sig.args[6], types.uint16), lanes)
        builder.store(_picked(builder, x, t, g, infinity), at(0, 1), align=1)
        return context.get_dummy_value()

    return types.void, emit


@njit(inline="always")
def _store(ok, exact, v):
    """An output element: rounded once to nearest even; or, when the plan proved every
    result representable in the output dtype (``exact``, a constant), narrowed without
    rounding work (bfloat16 takes the top half)."""
    if exact:
        return store_exact(ok, v)
    return store_nearest_even(ok, v)


# The row loops index with unsigned offsets: they are >= 0 by construction, and unsigned
# they skip numba's negative-index wraparound select, which would keep LLVM from
# vectorizing. LLVM versions each loop for unit strides and vectorizes that version.

@njit(inline="always")
def _row_fixed_grad(kinds, exact, term, g, self_, target, out, j0, j1, ahead):
    """Elements j0..j1 of a row along which grad_output does not change (stride 0);
    ``kinds`` are the storage kinds (grad_output, self, target, out, P), literals, and
    ``self_``, ``target`` and ``out`` operands (array, start, step).

    The caller passes ``g`` = grad_output * coef already rounded to the output dtype
    (and widened back), with ``exact``: rounding is symmetric, so round(+-g) is
    +-round(g), and +0 * round(g) is round(+0 * g) unless g rounds past the output's
    range (the caller then passes g unrounded, ``exact`` False). Each element is then
    a sign flip and a store without rounding work (picking among the three rounded
    results with selects ran slower: docs/performance.md, "L1: signs and picks").
    ``g`` is finite (the caller sends other rows to ``_row``), so for 16-bit self and
    target ``term`` picks among ``g``'s bits (``signed_term``) instead of multiplying.
    (``ahead`` is for ``_row_fixed_picked``, which shares this signature.)
    """
    _, xk, tk, ok, pk = kinds
    (x, x0, xs), (t, t0, ts), (o, o0, os) = self_, target, out
    for j in range(j0, j1):
        o[np.uint64(o0 + j * os)] = term(xk, tk, ok, pk, exact, g, x[np.uint64(x0 + j * xs)],
                                         t[np.uint64(t0 + j * ts)])


# 4K aliasing: a load waits for an older store still in flight whose address matches its
# own in the low 12 bits (the core compares those first). An output lying a little ahead
# of an input modulo 4 KiB puts each run's loads right behind the previous run's stores
# (consecutive NumPy allocations lie 16 bytes apart that way). Walking a row's runs
# backward then puts each matching store after its load (docs/performance.md,
# "4K aliasing"). Outputs this far (in bytes)
# ahead of or behind an input, modulo ALIAS_PERIOD, count toward a direction.
ALIAS_PERIOD, ALIAS_NEAR = 4096, 512


@njit(inline="always")
def _ahead(out, o, a, ao):
    """+1 where ``out[o]`` lies just ahead of ``a[ao]`` modulo ALIAS_PERIOD (forward runs
    would stall), -1 just behind (backward runs would), else 0; 1-D arrays."""
    gap = (np.int64(out.ctypes.data) + out.itemsize * o - np.int64(a.ctypes.data) - a.itemsize * ao) \
        & (ALIAS_PERIOD - 1)
    return np.int64(0 < gap < ALIAS_NEAR) - np.int64(gap > ALIAS_PERIOD - ALIAS_NEAR)


@njit(inline="always")
def _runs_walk(j0, runs, lanes, ahead):
    """(first run's start, step) of ``runs`` runs of ``lanes`` elements from j0: backward
    when the output lies ahead of more inputs than behind (``ahead`` > 0), else forward."""
    if ahead > 0:
        return j0 + (runs - 1) * lanes, -lanes
    return j0, lanes


@njit(inline="always")
def _row_fixed_picked(kinds, exact, term, g, self_, target, out, j0, j1, ahead):
    """``_row_fixed_grad`` where self, target, P and the output are one 16-bit kind (its
    ``term`` picks on the stored bits): with unit strides ``FIXED_PICK_LANES`` elements at
    a time (``pick_lanes``, g's stored bits in every lane), the rest as ``_row_fixed_grad``."""
    ok = kinds[3]
    (x, x0, xs), (t, t0, ts), (o, o0, os) = self_, target, out
    if xs == 1 and ts == 1 and os == 1:
        bits = _store(ok, exact, g)
        runs = (j1 - j0) // FIXED_PICK_LANES
        first, step = _runs_walk(j0, runs, FIXED_PICK_LANES, ahead)
        for i in range(runs):
            j = first + i * step
            pick_lanes(o, o0 + j, x, x0 + j, t, t0 + j, bits, 0, ok)
        j0 += runs * FIXED_PICK_LANES
    _row_fixed_grad(kinds, exact, term, g, self_, target, out, j0, j1, ahead)


def fixed_row_of(xk: int, tk: int, ok: int, pk: int):
    """The function elements of a row along which a finite grad does not change go
    through: ``_row_fixed_picked`` where self, target, P and the output are one 16-bit
    kind, else ``_row_fixed_grad``. The kernel body picks it."""
    if xk == tk == ok == pk and pk in (F16, BF16):
        return _row_fixed_picked
    return _row_fixed_grad


@njit(inline="always")
def _row(kinds, exact, grad, self_, target, out, j0, j1, coef, ahead):
    """Elements j0..j1 of a row; ``grad``, ``self_``, ``target`` and ``out`` are operands.

    ``sign * (grad_output * coef)`` is computed as ``(sign * coef) * grad_output``: the
    same bits (``coef`` is finite and > 0; both products round once, symmetrically, and
    +0 times either gives the same zero or NaN), one multiply fewer per element.
    (``ahead`` is for ``_row_picked``, which shares this signature.)
    """
    gk, xk, tk, ok, pk = kinds
    (go, g0, gs), (x, x0, xs), (t, t0, ts), (o, o0, os) = grad, self_, target, out
    for j in range(j0, j1):
        s = _sign(xk, tk, pk, coef, x[np.uint64(x0 + j * xs)], t[np.uint64(t0 + j * ts)])
        # grad_output read after self/target (docs/performance.md, "L1: signs and picks")
        g = load_input(gk, pk, go[np.uint64(g0 + j * gs)])
        o[np.uint64(o0 + j * os)] = _store(ok, exact, s * g)


@njit(inline="always")
def _row_picked(kinds, exact, grad, self_, target, out, j0, j1, coef, ahead):
    """``_row`` where grad_output, self, target and the output are one 16-bit kind and
    the coefficient is 1 (none or sum, ``exact``): each element picked on the stored
    bits (``picked_bits``, as ``_row_fixed_grad``'s term picks), nothing widened or
    rounded. With unit strides, ``VARYING_PICK_LANES`` elements at a time (``pick_lanes``), the
    rest one by one; the runs go the way ``_runs_walk`` says. (This loop and
    ``_row_fixed_picked``'s stay apart: one helper for both ran slower for an AVX2
    target; docs/performance.md, "L1: signs and picks".)"""
    ok = kinds[3]
    (go, g0, gs), (x, x0, xs), (t, t0, ts), (o, o0, os) = grad, self_, target, out
    if gs == 1 and xs == 1 and ts == 1 and os == 1:
        runs = (j1 - j0) // VARYING_PICK_LANES
        first, step = _runs_walk(j0, runs, VARYING_PICK_LANES, ahead)
        for i in range(runs):
            j = first + i * step
            pick_lanes(o, o0 + j, x, x0 + j, t, t0 + j, go, g0 + j, ok)
        j0 += runs * VARYING_PICK_LANES
    for j in range(j0, j1):
        o[np.uint64(o0 + j * os)] = picked_bits(x[np.uint64(x0 + j * xs)], t[np.uint64(t0 + j * ts)],
                                                go[np.uint64(g0 + j * gs)], ok)


def row_of(kinds: tuple[int, int, int, int], promoted: int, exact: bool):
    """The function elements of a row whose grad changes along it (or is not finite) go
    through: ``_row_picked`` where it applies, else ``_row``. The kernel body picks it."""
    if exact and len({*kinds, promoted}) == 1 and promoted in (F16, BF16):
        return _row_picked
    return _row


@njit(inline="always")
def _seek(row, index, offsets, dims, steps, bases):
    """Set the odometer ``index`` over the outer dims to ``row`` and ``offsets`` to
    that row's start in each of the four arrays."""
    for a in range(4):
        offsets[a] = bases[a]
    for k in range(RANK - 2, -1, -1):
        index[k] = row % dims[k]
        row //= dims[k]
        for a in range(4):
            offsets[a] += index[k] * steps[a, k]


@njit(inline="always")
def _next_row(index, offsets, dims, steps):
    """Advance the odometer by one row, carrying into outer dims, and the offsets with it."""
    k = RANK - 2
    while k >= 0:
        index[k] += 1
        for a in range(4):
            offsets[a] += steps[a, k]
        if index[k] < dims[k]:
            return
        index[k] = 0
        for a in range(4):
            offsets[a] -= dims[k] * steps[a, k]
        k -= 1


@njit(inline="always")
def _elements(kinds, exact, term, row, fixed_row, factor, inputs, dst, span, ahead):
    """Elements ``span`` (j0, j1) of a row, stored into the operand ``dst`` (the output
    itself, or a staging run), from the operands ``inputs`` (grad_output, self, target).
    ``factor`` is (fixed, g_rounded, coef): with ``fixed``, ``fixed_row``
    (``fixed_row_of``) takes the row's grad term ``g_rounded``; else ``row`` (``row_of``),
    which also takes a fixed grad whose term is not finite: an inf or NaN grad, or one
    rounding past the output's range, where sign 0 gives NaN, not 0, so each element
    rounds. Their vector runs go the way ``ahead`` says (``_runs_walk``)."""
    fixed, g_rounded, coef = factor
    grad, self_, target = inputs
    j0, j1 = span
    if fixed:
        fixed_row(kinds, True, term, g_rounded, self_, target, dst, j0, j1, ahead)
    else:
        row(kinds, exact, grad, self_, target, dst, j0, j1, coef, ahead)


@njit(inline="always")
def straight(kinds, exact, term, row, fixed_row, factor, inputs, out, span, stage):
    """Elements ``span`` of a row straight into the output (``_work``'s ``emit``), their
    runs walked backward where the output lies just ahead of the inputs it streams from."""
    (go, g0, gs), (x, x0, xs), (t, t0, ts) = inputs
    o, o0, os = out
    j0 = span[0]
    ahead = _ahead(o, o0 + j0 * os, x, x0 + j0 * xs) + _ahead(o, o0 + j0 * os, t, t0 + j0 * ts)
    if gs != 0:
        ahead += _ahead(o, o0 + j0 * os, go, g0 + j0 * gs)
    _elements(kinds, exact, term, row, fixed_row, factor, inputs, out, span, ahead)


# Lines in a streamed step: two, the 128-byte vector a 16-bit pick writes under AVX-512
# (FIXED_PICK_LANES), stored as it is (nontemporal.stream_lines).
STEP_LINES = 2


@njit(inline="always")
def staged(kinds, exact, term, row, fixed_row, factor, inputs, out, span, stage):
    """Elements ``span`` of a row into an output that streams past the caches (``_work``'s
    ``emit``). With unit strides (a fixed grad, or one that moves with the row), its whole
    aligned lines go in steps of ``STEP_LINES``: each step's elements computed into
    ``stage`` and stored at once in a non-temporal vector store, which LLVM feeds from
    the registers the step was computed in (the stage is written, never read back).
    The rest, and rows of other strides, go through ``stage`` in runs (``_staged_runs``;
    one instance of them serves both ends of the steps: docs/performance.md, "Kernel
    design")."""
    fixed, g_rounded, coef = factor
    (go, g0, gs), (x, x0, xs), (t, t0, ts) = inputs
    o, o0, _ = out
    j0, j1 = span
    lead = lead_in(o, o0 + j0)
    step = STEP_LINES * LINE // item_bytes(o)
    stepped = lead >= 0 and xs == 1 and ts == 1 and (fixed or gs == 1)
    first = lesser(j1, j0 + lead) if stepped else j1      # the steps' span: first..last
    last = first + (j1 - first) // step * step
    for part in range(2):   # the runs before the steps, then after them: one instance of the runs
        _staged_runs(kinds, exact, term, row, fixed_row, factor, inputs, out,
                     (j0 if part == 0 else last, first if part == 0 else j1), stage)
        for s in range(first, last if part == 0 else first, step):
            run = (stage, 0, 1)
            if fixed:   # (the same in every step: LLVM takes the branch out of the loop)
                fixed_row(kinds, True, term, g_rounded, (x, x0 + s, 1), (t, t0 + s, 1), run, 0, step, 0)
            else:
                row(kinds, exact, (go, g0 + s, 1), (x, x0 + s, 1), (t, t0 + s, 1), run, 0, step, coef, 0)
            stream_lines(o, o0 + s, stage, 0, STEP_LINES)


@njit(inline="always")
def _staged_runs(kinds, exact, term, row, fixed_row, factor, inputs, out, span, stage):
    """Elements ``span`` of a row into the output in runs computed into ``stage``, each
    ending on a line boundary and drained in non-temporal stores (``nontemporal``).
    An output whose elements are misaligned drains in normal stores (one instance of the
    row loops: a straight path for it doubled a compile). Runs walk forward here: the
    stage is in the cache while the inputs' loads stream in (docs/performance.md, "Kernel
    design")."""
    o, o0, _ = out
    j0, j1 = span
    s, e = j0, lesser(j1, j0 + greater(lead_in(o, o0 + j0), 0))
    while s < j1:
        _elements(kinds, exact, term, row, fixed_row, factor, inputs, (stage, -s, 1), (s, e), 0)
        drain(o, o0 + s, stage, e - s)
        s, e = e, lesser(j1, e + len(stage))


_threads_here = caller_thread_count()   # a threaded entry's return: the count it ran under

NEST = Slots(dims=RANK, steps=4 * RANK, starts=4, block=1, chunks=1, body=1)
"""The loop nest a plan packs (see make_kernel)."""
DIMS, STEPS, STARTS, BLOCK = NEST.dims, NEST.steps, NEST.starts, NEST.block
CHUNKS, BODY = NEST.chunks, NEST.body


def make_kernel(parallel: bool):
    """Compile-on-first-call entry ``kernel(go, self, target, out, nest, coef)``:
    runs the body at address ``nest[BODY]`` (``chunk_body``, compiled for these
    argument types, each array of them 1-D) on each of the ``nest[CHUNKS]``
    pieces of the work, in parallel or (the serial entry) as one piece. It views
    each array flat (indirect.flat): a plan may type them of a higher rank than they
    have, to hand them over as they are (l1_plan.AS_IS_RANK).

    ``nest`` is :data:`NEST` packed: the loop shape (``RANK`` dims), each array's
    strides over it (4 x ``RANK``), each array's offset of element 0, the inner block
    length, how many pieces the work is split into (the serial entry runs one), and
    the body's address (padloss_numba.slots says why one array). The caller picks
    the pieces from the thread count; the parallel entry returns the count it ran
    under (``_threads_here``), which the caller compares afterwards (padloss.backend.Plan's
    ``reports_context``).
    """
    if parallel:
        def kernel(go, x, t, out, nest, coef):
            go, x, t, out = flat(go), flat(x), flat(t), flat(out)
            chunks = nest[CHUNKS]
            for chunk in prange(chunks):
                call_body(nest[BODY], (go, x, t, out, nest, coef, np.int64(chunk), chunks))
            return _threads_here()
    else:
        def kernel(go, x, t, out, nest, coef):
            go, x, t, out = flat(go), flat(x), flat(t), flat(out)
            call_body(nest[BODY], (go, x, t, out, nest, coef, np.int64(0), np.int64(1)))

    return jit(parallel=parallel, _nrt=False)(kernel)


@functools.lru_cache(maxsize=None)
def chunk_body(kinds: tuple[int, int, int, int], promoted: int, exact: bool, streams: bool):
    """``body(go, self, target, out, nest, coef, chunk, chunks)`` (``_work``),
    compiled once per dtype mix and shared by both entry points.

    ``kinds`` are the storage kinds of (grad_output, self, target, grad_input);
    ``promoted`` is P's kind; ``exact`` says every result is representable in the
    output dtype, so its store needs no rounding (see ``_store``); ``streams``
    that the output streams past the caches (``staged``): closure constants (ints
    and bools, which Numba's disk cache keys on; a jitted function there would
    change the key in every process). Compiled without Numba's reference-counting
    runtime, like the pad kernel: the staged path's views, handed to inlined
    helpers once per run, would pay its atomic updates.
    """
    gk, xk, tk, ok = kinds
    if streams:
        def body(go, x, t, out, nest, coef, chunk, chunks):
            _work((gk, xk, tk, ok, promoted), exact, staged, TERM, ROW, FIXED_ROW,
                  stack_array(out, STAGE_BYTES), (go, x, t, out), (nest, coef), (chunk, chunks))
            fence()   # the streamed stores are weakly ordered
    else:
        def body(go, x, t, out, nest, coef, chunk, chunks):
            _work((gk, xk, tk, ok, promoted), exact, straight, TERM, ROW, FIXED_ROW, out[:0],
                  (go, x, t, out), (nest, coef), (chunk, chunks))

    body = with_globals(body, TERM=signed_term(xk, tk, ok, promoted), ROW=row_of(kinds, promoted, exact),
                        FIXED_ROW=fixed_row_of(xk, tk, ok, promoted))
    return jit(_nrt=False, pipeline_class=BodyCompiler)(body)


TERM = None   # a body's global: the term function its kinds call for (chunk_body, with_globals)
ROW = None    # the row function (row_of)
FIXED_ROW = None   # and the row function of a fixed grad (fixed_row_of)


@njit(inline="always")
def _work(kinds, exact, emit, term, row, fixed_row, stage, arrays, plan, piece):
    """The work items of ``piece`` (chunk, chunks) over ``arrays`` (grad_output, self,
    target, out) as ``plan`` (the loop nest, the mean coefficient) lays them out, each
    row's elements written by ``emit``: ``straight``, or ``staged`` through ``stage`` (a
    run of the output's dtype) for an output that streams. ``kinds`` and ``exact`` are
    constants of the caller, literals here once inlined; ``emit`` is a module-level
    function, so each kernel compiles only its own path (the staged one, compiled into
    every body, doubled its compile)."""
    gk, ok, pk = kinds[0], kinds[3], kinds[4]
    go, x, t, out = arrays
    nest, coef = plan
    chunk, chunks = piece
    dims = nest[DIMS:STEPS]
    steps = nest[STEPS:STARTS].reshape((4, RANK))
    starts = nest[STARTS:BLOCK]
    block = nest[BLOCK]
    inner = dims[RANK - 1]
    rows = 1
    for k in range(RANK - 1):
        rows *= dims[k]
    per_row = (inner + block - 1) // block
    items = rows * per_row                # work items: (row, block of the inner dim)
    gs, xs, ts, os = steps[0, RANK - 1], steps[1, RANK - 1], steps[2, RANK - 1], steps[3, RANK - 1]
    first = chunk * items // chunks
    index = stack_array(nest, ODOMETER_BYTES)
    offsets = stack_array(nest, OFFSETS_BYTES)
    # the row's grad term when grad_output does not change along it (see _elements):
    # typed here (its type kept off coef's: scalars.apart), set per row only then
    g_rounded, fixed = apart(coef), False
    _seek(first // per_row, index, offsets, dims, steps, starts)
    blk = first % per_row
    for _ in range(first, (chunk + 1) * items // chunks):
        j0 = blk * block
        j1 = lesser(inner, j0 + block)
        g0, x0, t0, o0 = offsets[0], offsets[1], offsets[2], offsets[3]
        if gs == 0:                   # the 0-d grad of mean/sum, or broadcast: round once
            g_raw = load_input(gk, pk, go[g0]) * coef
            g_rounded = load(ok, store_nearest_even(ok, g_raw))
            fixed = np.isfinite(g_rounded)   # else past the range, or an inf or NaN grad: _row
        emit(kinds, exact, term, row, fixed_row, (fixed, g_rounded, coef),
             ((go, g0, gs), (x, x0, xs), (t, t0, ts)), (out, o0, os), (j0, j1), stage)
        blk += 1
        if blk == per_row:
            blk = 0
            _next_row(index, offsets, dims, steps)
