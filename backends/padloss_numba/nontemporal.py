"""Non-temporal stores: writing an output that will not be read soon straight to memory.

A normal store first reads its cache line in (the read-for-ownership), so writing N
bytes moves 2N; a non-temporal store of a whole, aligned 64-byte line skips that read.
It pays only for outputs far larger than the caches (``streams``: the one rule for
every kernel), since whoever reads the line soon after fetches it back
(docs/performance.md, "Kernel design").

LLVM emits non-temporal stores of whole, aligned vectors only, so the kernels store
whole lines: ``stream_lines`` sums lines of the inputs straight into lines of the
output (the pad's row centres, L1's rows whose inputs move with the output, the
ceilings); ``drain`` sends a run computed into a staging buffer (the pad's row ends, L1's
and its rows whose inputs do not move with the output), its whole lines streamed, the
rest stored normally. ``fence()`` orders the weakly ordered streamed stores before anything
after it: call it before the kernel's end. ``prefetch`` starts fetching a line that lies
away from the streams, ahead of its use (a streamed pad plane's band rows).
"""
from __future__ import annotations

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from .scalars import lesser

LINE = 64            # bytes a non-temporal store writes at once: a cache line
STREAM_MIN_BYTES = 1 << 24   # outputs at least this large stream (docs/performance.md, "Non-temporal stores")
STAGE_BYTES = 1024           # the staging run: 16 lines (docs/performance.md, "Non-temporal stores")


def streams(out_nbytes: int, parallel: bool, contiguous: bool) -> bool:
    """Whether a kernel's output streams past the caches: the one rule for every kernel.
    Only an output of STREAM_MIN_BYTES or more, walked contiguously (so its lines are
    written whole), by a parallel kernel (a serial one's output is small)."""
    return parallel and contiguous and out_nbytes >= STREAM_MIN_BYTES


@intrinsic
def address(typingctx, arr, index):
    """The byte address of ``arr[index]`` (1-D arrays)."""

    def codegen(context, builder, sig, args):
        data = context.make_array(sig.args[0])(context, builder, args[0]).data
        return builder.ptrtoint(builder.gep(data, [args[1]]), ir.IntType(64))

    return types.uint64(arr, types.intp), codegen


@intrinsic
def item_bytes(typingctx, arr):
    """The size of ``arr``'s elements, a constant of its type: ``arr.itemsize`` is read from
    the array at run time, so ``LINE // arr.itemsize`` stayed a division in every row."""
    if not isinstance(arr, types.Array):
        return None

    def codegen(context, builder, sig, args):
        size = context.get_abi_sizeof(context.get_data_type(sig.args[0].dtype))
        return ir.Constant(context.get_value_type(types.intp), size)

    return types.intp(arr), codegen


@intrinsic
def stream_lines(typingctx, dst, dst_index, src, src_index, lines):
    """``lines`` lines (a literal) from ``src_index`` (any alignment) to ``dst[dst_index:]``,
    which the caller has checked starts on a line boundary, in one non-temporal vector
    store: of ``src``, an array of ``dst``'s dtype, or the sum, left to right, of a tuple
    of such float arrays. No stage for the sum: a staged copy ran far slower than one
    streamed straight (docs/performance.md, "Non-temporal stores").
    Lines computed into a stage just before stay in registers where the stage's stores
    match this load (LLVM forwards them); two lines take the 128-byte vector a 16-bit
    pick writes under AVX-512 (one line, loaded as half of it, was stored in four pieces)."""
    summed = isinstance(src, types.UniTuple)
    if summed and not (src.dtype == dst and isinstance(dst.dtype, types.Float)):
        return None
    if not summed and src.dtype != dst.dtype:
        return None
    if not isinstance(lines, types.IntegerLiteral):
        return None

    def codegen(context, builder, sig, args):
        element = context.get_data_type(sig.args[0].dtype)
        vector = ir.VectorType(element, lines.literal_value * LINE // context.get_abi_sizeof(element))
        arrays = cgutils.unpack_tuple(builder, args[2]) if summed else [args[2]]
        array_type = sig.args[2].dtype if summed else sig.args[2]
        total = None
        for array in arrays:
            data = context.make_array(array_type)(context, builder, array).data
            value = builder.load(builder.bitcast(builder.gep(data, [args[3]]), vector.as_pointer()),
                                 align=context.get_abi_sizeof(element))
            total = value if total is None else builder.fadd(total, value)
        dst_data = context.make_array(sig.args[0])(context, builder, args[0]).data
        store = builder.store(total, builder.bitcast(builder.gep(dst_data, [args[1]]), vector.as_pointer()),
                              align=LINE)
        store.set_metadata("nontemporal", builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)]))
        return context.get_dummy_value()

    return types.void(dst, types.intp, src, types.intp, lines), codegen


@intrinsic
def fence(typingctx):
    """A full memory fence (``mfence`` on x86): streamed stores are weakly ordered."""

    def codegen(context, builder, sig, args):
        builder.fence("seq_cst")
        return context.get_dummy_value()

    return types.void(), codegen


@njit(inline="always")
def lead_in(dst, index):
    """How many elements from ``dst[index]`` to the next line boundary (0 on one);
    -1 when ``dst``'s elements are not aligned to their size, so no line is ever whole."""
    at, size = address(dst, index), item_bytes(dst)
    if at % size != 0:
        return -1
    return ((LINE - at % LINE) % LINE) // size


@njit(inline="always")
def drain(dst, start, stage, count):
    """``dst[start:start + count] = stage[:count]``, whole aligned lines non-temporally
    (all of it in normal stores when ``dst``'s elements are misaligned)."""
    per_line = LINE // item_bytes(dst)
    lead = lead_in(dst, start)
    lead = count if lead < 0 else lesser(count, lead)
    lines = (count - lead) // per_line
    for i in range(lead):
        dst[start + i] = stage[i]
    d, s = start + lead, lead
    for _ in range(lines):
        stream_lines(dst, d, stage, s, 1)
        d += per_line
        s += per_line
    for i in range(lead + lines * per_line, count):
        dst[start + i] = stage[i]


@intrinsic
def prefetch(typingctx, arr, row, column, for_write):
    """A hint to fetch the cache line of ``arr[row, column]`` (2-D) ahead of its use, for
    writing where ``for_write`` (a literal) is true (``llvm.prefetch``: prefetcht0 or
    prefetchw on x86); nothing when the target has no such instruction."""
    if not isinstance(arr, types.Array) or arr.ndim != 2 or not isinstance(for_write, types.BooleanLiteral):
        return None

    def codegen(context, builder, sig, args):
        array = context.make_array(sig.args[0])(context, builder, args[0])
        indices = [context.cast(builder, v, t, types.intp) for v, t in zip(args[1:3], sig.args[1:3])]
        item = cgutils.get_item_pointer(context, builder, sig.args[0], array, indices)
        i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        signature = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])   # address, rw, locality, data
        fn = cgutils.get_or_insert_function(builder.module, signature, "llvm.prefetch.p0i8")
        builder.call(fn, [builder.bitcast(item, i8p), ir.Constant(i32, int(for_write.literal_value)),
                          ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return types.void(arr, row, column, for_write), codegen
