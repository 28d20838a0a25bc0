"""Fixed-width vector moves and windows of a row, written as LLVM IR.

Numba has no vector types, and LLVM vectorises loops only: a pad row's
wrapped runs, a few columns each, were scalar loops (each element paid the
float16 conversions and the tie fix alone), and its centre a memcpy call
whose set-up cost a short row more than the copying. A window (``folder``)
reads eight columns of a row's centre and eight of the band that wraps onto
them, adds and rounds them as one vector, and keeps the centre's bits in the
lanes outside the run; ``mover`` copies one vector. Both also take a pair of
rows (a row and the band row that wraps onto it), whose columns they sum first,
so such a row needs no row buffer (docs/performance.md, "Pad kernel").

A window's reads may reach up to seven elements past the row's ends, so the
caller keeps them inside the array (a row with a neighbour row on that side,
rows at least ``LANES`` elements apart); its write stays inside the row's
kept columns.
"""
from __future__ import annotations

from typing import NamedTuple

from llvmlite import ir
from numba import types
from numba.core import errors

from .convert import BF16, F16, F32, WIDEN, builtin, splat, vector_at

LANES = 8


def folder(narrowers: dict):
    """``fold(dst, r, d, src, k, centre, band, lo, hi, kind)``, a kernel builtin:

        dst[r, d + i] = narrow(src[k, centre + i] + src[k, band + i])   for lo <= i < hi,
        dst[r, d + i] = src[k, centre + i] (its bits)                    otherwise,

    for the LANES lanes i, with ``kind`` a literal F16, BF16 or F32 and ``narrow`` the
    float32 -> ``kind`` IR builder of ``narrowers`` (convert.NARROW of the kernel's final
    rounding; none for F32). Both arrays hold what ``_STORED`` says (uint16 bits for the
    16-bit kinds) with unit column stride.

    ``k`` may also be a pair of rows ``(k, k2)``, a row and the band of rows that wraps
    onto it: each column term is then the float32 sum of the two rows' elements
    (``src[k, c] + src[k2, c]``), and the lanes outside ``[lo, hi)`` store that sum
    rounded, where one row's lanes keep their bits."""

    def fold(dst, r, d, src, k, centre, band, lo, hi, kind):
        """A kernel builtin (see ``folder``)."""

    @builtin(fold)
    def _typing(dst, r, d, src, k, centre, band, lo, hi, kind):
        stored, widen, narrow = _lanes_of(kind, dst, src, narrowers, "fold")

        def emit(context, builder, sig, args):
            b = builder
            r, d, centre, band, lo, hi = _indices(context, b, sig, args, (1, 2, 5, 6, 7, 8))
            rows = _rows(context, b, sig.args[4], args[4])
            vector = ir.VectorType(context.get_data_type(stored), LANES)
            centre_terms = _terms(context, b, sig.args[3], args[3], rows, centre, vector, widen)
            band_terms = _terms(context, b, sig.args[3], args[3], rows, band, vector, widen)
            folded = narrow(b, b.fadd(centre_terms.sum, band_terms.sum, flags=("afn",)))
            kept = centre_terms.bits if len(rows) == 1 else narrow(b, centre_terms.sum)
            # lanes compared as integers as wide as they are (lo and hi lie in [0, LANES]):
            # one compare each
            index = ir.IntType(8 * context.get_abi_sizeof(vector.element))
            lane = ir.Constant(ir.VectorType(index, LANES), list(range(LANES)))
            lo_, hi_ = (b.trunc(v, index) for v in (lo, hi))
            inside = b.and_(b.icmp_signed(">=", lane, splat(b, lo_, LANES)),
                            b.icmp_signed("<", lane, splat(b, hi_, LANES)))
            out = vector_at(context, b, sig.args[0], args[0], [r, d], vector)
            b.store(b.select(inside, folded, kept), out, align=1)
            return context.get_dummy_value()

        return types.void, emit

    return fold


# What a window's lanes hold, by kind: float16/bfloat16 bits, or float32 values (which
# need no widening nor narrowing: a float32 sum is rounded once as it is made).
_STORED = {F16: types.uint16, BF16: types.uint16, F32: types.float32}


def _same(b, value):
    return value


def _lanes_of(kind, dst, src, narrowers: dict, name: str) -> tuple:
    """(stored lane type, widen, narrow) of a literal ``kind`` for 2-D ``dst`` and ``src``
    arrays of its stored type; else the TypingError naming ``name``'s rule."""
    if not isinstance(kind, types.IntegerLiteral) or kind.literal_value not in _STORED:
        raise errors.TypingError(f"{name} takes a literal kind F16, BF16 or F32, got {kind}")
    stored = _STORED[kind.literal_value]
    if dst.dtype != stored or src.dtype != stored or dst.ndim != 2 or src.ndim != 2:
        raise errors.TypingError(f"{name} takes 2-D {stored} arrays for this kind")
    return stored, WIDEN.get(kind.literal_value, _same), narrowers.get(kind.literal_value, _same)


def _indices(context, builder, sig, args, positions):
    """The integer arguments at ``positions``, as intp values."""
    return [context.cast(builder, args[i], sig.args[i], types.intp) for i in positions]


def _rows(context, builder, rows_type, rows):
    """A window's rows argument as intp values: one row, or a pair summed column by column."""
    if isinstance(rows_type, types.BaseTuple):
        return [context.cast(builder, builder.extract_value(rows, i), t, types.intp)
                for i, t in enumerate(rows_type)]
    return [context.cast(builder, rows, rows_type, types.intp)]


class _Terms(NamedTuple):
    bits: ir.Value   # the first row's vector as stored
    sum: ir.Value    # the rows' vectors widened and added in row order (float32)


def _terms(context, builder, aryty, ary, rows, column, vector, widen) -> _Terms:
    """The ``vector`` at ``column`` of each of ``rows``."""
    loaded = [builder.load(vector_at(context, builder, aryty, ary, [k, column], vector), align=1)
              for k in rows]
    total = widen(builder, loaded[0])
    for bits in loaded[1:]:
        total = builder.fadd(total, widen(builder, bits), flags=("afn",))
    return _Terms(loaded[0], total)


def mover(lanes: int | tuple[int, ...], narrowers: dict):
    """``move(dst, r, d, src, k, s, kind)``, a kernel builtin: ``dst[r, d:d + lanes] =
    src[k, s:s + lanes]`` as one vector load and store, the bits as they are; for a pair
    of rows ``k = (k, k2)``, their float32 sums rounded by ``narrowers`` (as in
    ``folder``). ``kind`` is a literal F16, BF16 or F32, the arrays of its stored type
    with unit column stride; ``lanes`` a number, or a tuple of one per kind (indexed by it)."""

    def move(dst, r, d, src, k, s, kind):
        """A kernel builtin (see ``mover``)."""

    @builtin(move)
    def _typing(dst, r, d, src, k, s, kind):
        stored, widen, narrow = _lanes_of(kind, dst, src, narrowers, "move")
        width = lanes[kind.literal_value] if isinstance(lanes, tuple) else lanes

        def emit(context, builder, sig, args):
            r, d, s = _indices(context, builder, sig, args, (1, 2, 5))
            rows = _rows(context, builder, sig.args[4], args[4])
            vector = ir.VectorType(context.get_data_type(stored), width)
            terms = _terms(context, builder, sig.args[3], args[3], rows, s, vector, widen)
            value = terms.bits if len(rows) == 1 else narrow(builder, terms.sum)
            builder.store(value, vector_at(context, builder, sig.args[0], args[0], [r, d], vector), align=1)
            return context.get_dummy_value()

        return types.void, emit

    return move
