"""Small scalar helpers for kernels: the lesser and the greater of two integers, a test
LLVM is told is rarely true, and a value whose variable's type stays apart from its source's.

Numba's own ``min`` and ``max`` are overloads, each compiled as a function of its own
for its argument types on a kernel's first compile (18-25 ms apiece); these are
inlined into the kernel's IR, so nothing is compiled for them.
"""
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils, errors
from numba.extending import intrinsic


@njit(inline="always")
def lesser(a, b):
    return a if a < b else b


@njit(inline="always")
def greater(a, b):
    return a if a > b else b


@intrinsic
def rarely(typingctx, value):
    """``value != 0`` for an integer, which LLVM is told is rarely true (``llvm.expect``),
    so that it lays the rare branch out away from a hot loop's code: the pad body's test,
    once a plane, of whether its plan streams cost medium pads 1-2% unmarked
    (docs/performance.md, "Compiled bodies and entry points")."""
    if not isinstance(value, types.Integer):
        raise errors.TypingError("rarely(value) takes an integer")

    def codegen(context, builder, sig, args):
        (v,) = args
        flag = ir.IntType(1)
        expect = cgutils.get_or_insert_function(builder.module, ir.FunctionType(flag, [flag, flag]),
                                                "llvm.expect.i1")
        return builder.call(expect, [builder.icmp_unsigned("!=", v, ir.Constant(v.type, 0)),
                                     ir.Constant(flag, 0)])

    return types.boolean(value), codegen


@intrinsic
def apart(typingctx, value):
    """``value`` itself, as a call's result, not a copy. A body compiled without SSA
    (numba_internals.BodyCompiler) has one type per variable for all its assignments, and
    Numba sends a type refined on a variable set in a tuple assignment back to its source:
    L1's ``g_rounded, fixed = coef, False``, float64 where the output computes in float64,
    made a float32 ``coef`` float64 too. Set from ``apart(coef)``, the variable widens the
    call's result instead (one conversion, where SSA put it) and ``coef`` keeps its type."""
    if not isinstance(value, (types.Integer, types.Float)):
        raise errors.TypingError("apart(value) takes a number")
    return value(value), lambda context, builder, sig, args: args[0]
