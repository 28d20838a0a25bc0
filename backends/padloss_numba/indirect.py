"""Kernel bodies compiled once and called by address from thin entry points.

Numba compiles a function that calls another jitted function by linking the
callee's code into the caller's, then optimising and emitting all of it again;
a parallel loop does so twice (its worker function, then the caller). A kernel
body of a few hundred lines then costs its compile time three times over: once
in the serial kernel and twice in the parallel one (measured: 7.5 s for the
parallel pad kernel's first call, float32, against 0.8 s for a small reference
kernel).

So an op's body is an ordinary ``@njit`` function, compiled for one exact
signature, and the serial and the parallel entry points call it through
:func:`call_body`, by the address of its compiled code (:func:`address`),
which the plan passes in as an int64: they link nothing, compile in a fraction
of a second, and share the body. The address is a run-time argument, so the
entry points stay cacheable on disk. The call uses Numba's own calling
convention, so the body sees its arguments exactly as a direct call passes them.
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import errors
from numba.extending import intrinsic

from .building import collector_paused
from .numba_internals import body_address, inliner_copies_less

STACK_ALIGN = 64   # bytes: a cache line, so a staging run can leave in whole-line stores


def compile_entry(entry, body, signature: tuple, body_args: tuple | None = None) -> tuple:
    """Compile ``body`` for ``body_args`` (default ``signature``: what the entry hands on)
    plus (chunk, chunks) and ``entry`` for ``signature``, compiling on call switched off
    for the entry (each plan compiles exactly the variant it runs); return the entry and
    the body's address, which the entry takes in its int64 parameter array."""
    for_body = body_signature(signature if body_args is None else body_args)
    with inliner_copies_less(), collector_paused():
        body.compile(for_body)
        entry.compile(tuple(signature))
    entry.disable_compile()
    return entry, address(body, for_body)


def body_signature(signature: tuple) -> tuple:
    """The signature a body is compiled for, from its entry's: the entry's plus (chunk, chunks)."""
    return tuple(signature) + (types.int64, types.int64)


def compile_called(function, signature: tuple) -> int:
    """Compile ``function`` for ``signature`` (more signatures may follow: compiling on call
    stays on, as for a body) and return its address: a piece of a body that the body calls
    by address (:func:`call_body`), compiled only for the plans that need it."""
    with inliner_copies_less(), collector_paused():
        function.compile(tuple(signature))
    return address(function, signature)


def address(dispatcher, signature: tuple) -> int:
    """The address of ``dispatcher``'s compiled code for ``signature`` (in Numba's
    calling convention: what :func:`call_body` calls)."""
    return body_address(dispatcher, signature)


@intrinsic
def call_body(typingctx, body, args):
    """Call the function at address ``body`` (an int64, from :func:`address`) on the
    tuple ``args``, whose types must be exactly those the body was compiled for;
    the body returns nothing and raises nothing (an exception it set is lost)."""
    if not isinstance(body, types.Integer) or not isinstance(args, types.BaseTuple):
        raise errors.TypingError("call_body(body, (args...)) takes an integer address and a tuple")

    def codegen(context, builder, sig, llargs):
        address_value, packed = llargs
        arg_types = list(sig.args[1])
        values = [builder.extract_value(packed, i) for i in range(len(arg_types))]
        call_conv = context.call_conv
        function_type = call_conv.get_function_type(types.none, arg_types)
        function = builder.inttoptr(address_value, ir.PointerType(function_type))
        call_conv.call_function(builder, function, types.none, arg_types, values)
        return context.get_dummy_value()

    return types.void(body, args), codegen


@intrinsic
def stack_array(typingctx, like, nbytes):
    """A 1-D array of ``like``'s dtype on the caller's stack, ``nbytes`` (a literal)
    long, line-aligned and uninitialised, for kernels compiled without Numba's
    reference-counting runtime (``_nrt=False``), which cannot allocate. Such a
    kernel pays no atomic reference-count update per view handed to an inlined
    helper (docs/performance.md, "L1: signs and picks")."""
    if not isinstance(like, types.Array) or not isinstance(nbytes, types.IntegerLiteral):
        raise errors.TypingError("stack_array(like, nbytes) takes an array and a literal byte count")
    array_type = types.Array(like.dtype, 1, "C")

    def codegen(context, builder, sig, args):
        element = context.get_data_type(like.dtype)
        size = context.get_abi_sizeof(element)
        count = nbytes.literal_value // size
        # in the entry block, as whole lines: LLVM's passes take seconds over an alloca of
        # thousands of bytes (an 8 KiB row buffer: 2.5 s), and none over one of 128 lines;
        # not cgutils.alloca_once, which zero-fills what it allocates: a memset of the whole
        # buffer on every call
        line = ir.VectorType(ir.IntType(8), STACK_ALIGN)
        with builder.goto_entry_block():
            buffer = builder.alloca(ir.ArrayType(line, -(-nbytes.literal_value // STACK_ALIGN)))
        buffer.align = STACK_ALIGN
        intp = context.get_value_type(types.intp)
        array = context.make_array(array_type)(context, builder)
        context.populate_array(array, data=builder.bitcast(buffer, element.as_pointer()),
                               shape=[ir.Constant(intp, count)], strides=[ir.Constant(intp, size)],
                               itemsize=ir.Constant(intp, size), meminfo=None)
        return array._getvalue()

    return array_type(like, nbytes), codegen


@intrinsic
def flat(typingctx, array):
    """A C-contiguous ``array`` as the 1-D array of its elements, a view of the same type
    otherwise, made of its data pointer, element count and item size alone (where Numba's
    ``reshape`` calls a C helper a call and compiles functions of its own: docs/performance.md,
    "Tiny calls and autograd"): its shape and strides are never read, so it may come from a
    compiled wrapper typed for a higher rank than the array's (numba_internals.compiled_wrapper)."""
    if not isinstance(array, types.Array) or array.layout != "C":
        raise errors.TypingError("flat(array) takes a C-contiguous array")
    flat_type = array.copy(ndim=1)

    def codegen(context, builder, sig, args):
        source = context.make_array(array)(context, builder, args[0])
        view = context.make_array(flat_type)(context, builder)
        context.populate_array(view, data=source.data, shape=[source.nitems], strides=[source.itemsize],
                               itemsize=source.itemsize, meminfo=source.meminfo, parent=source.parent)
        return view._getvalue()

    return flat_type(array), codegen


@intrinsic
def buffer_row(typingctx, workspace, dtype, index, width):
    """Row ``index`` of ``width`` elements of ``dtype`` (a NumPy scalar type, a constant)
    in a C-contiguous uint8 ``workspace`` aligned for it, as a (1, width) C array: an
    in-bounds pointer offset, where Numba's ``view`` and ``reshape`` are functions it
    compiles on a kernel's first compile (70-130 ms)."""
    if not (isinstance(workspace, types.Array) and workspace.dtype == types.uint8
            and isinstance(dtype, types.NumberClass)):
        raise errors.TypingError("buffer_row(workspace, dtype, index, width) takes a uint8 array and a dtype")
    element_type = dtype.instance_type
    row_type = types.Array(element_type, 2, "C")

    def codegen(context, builder, sig, args):
        buffer, _, row, count = args
        intp = context.get_value_type(types.intp)
        element = context.get_data_type(element_type)
        size = ir.Constant(intp, context.get_abi_sizeof(element))
        data = context.make_array(workspace)(context, builder, buffer).data
        start = builder.bitcast(data, element.as_pointer())
        array = context.make_array(row_type)(context, builder)
        context.populate_array(array, data=builder.gep(start, [builder.mul(row, count)], inbounds=True),
                               shape=[ir.Constant(intp, 1), count], strides=[builder.mul(count, size), size],
                               itemsize=size, meminfo=None)
        return array._getvalue()

    return row_type(workspace, dtype, types.intp, types.intp), codegen
