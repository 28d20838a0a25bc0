"""The circular-pad backward kernel: one source for every dtype, block by block.

Gather formulation: each gradInput element is produced by exactly one thread
from the gradOutput elements that wrap onto it, so there are no atomics and
the bits do not depend on the thread count. In the spec's order:

1. rows: ``(centre + top_wrap) + bottom_wrap`` over every gradOutput column,
   into a per-thread float32 (float64) row buffer. Rows with no wrapped
   partner (nearly all of them, one run of a plane's rows) skip the buffer and
   read gradOutput directly: a plain copy with conversion; so do float16,
   bfloat16 and float32 rows with one partner row, summed in the windows below;
2. columns: ``(centre + left_wrap) + right_wrap``, then one rounding to the
   storage dtype (``final_round``: padloss.rules.PAD_FINAL_ROUNDING, CANN's CAST_ROUND).
   A float16, bfloat16 or float32 row's wrapped runs, a pad wide each, fold
   in eight-lane vector windows (padloss_numba.window), its centre copied (a
   row pair's summed) in vector moves.

Terms that do not exist are skipped, never added as zero (so -0.0 survives).
Loops index 2-D planes with (row, unsigned column) pairs: Numba then skips
its negative-index wraparound check on the column and LLVM sees plain streams
that it vectorises. A row's short loops (the wrapped runs, the fills) get
one-row views of the output row and of a direct row's source: each loop then
starts from one address instead of recomputing it from the plane's strides,
with fewer values spilled. Kernels are compiled without Numba's reference-counting
runtime (``_nrt=False``): with it, every view handed to an inlined helper paid
atomic reference-count updates, which dominated small tensors (docs/performance.md,
"Pad kernel").
So the kernel allocates nothing on the heap; its row buffers (one per chunk of
rows, ``W'`` elements each, as pad_plan sizes them) are on the entry's stack up to
``ROW_STACK_BYTES``, longer ones in the caller's workspace.

``chunk_body(kind, windowed)`` instantiates the source for one storage kind
(float16/bfloat16 arrive as uint16 bits), with or without the windows: closure
constants that Numba folds and keys its on-disk cache on; ``make_kernel(kind,
parallel)`` the serial or the parallel entry point that calls it by address
(padloss_numba.indirect); ``streamed_rows(kind)`` the rows a large output
streams, which the body calls by address where its plan streams.
"""
from __future__ import annotations

import functools

import numpy as np
from numba import njit, prange

from padloss import rules

from . import nontemporal
from .building import jit, with_globals
from .convert import BF16, F16, F32, F64, NARROW, load, opaque, store_nearest_even, store_sum_half_away
from .indirect import buffer_row, call_body, stack_array
from .nontemporal import LINE, drain, fence, item_bytes, lead_in, prefetch, stream_lines
from .numba_internals import BodyCompiler, caller_thread_count
from .scalars import greater, lesser, rarely
from .slots import Slots
from .window import LANES, folder, mover

# The spec's final cast (CANN's CAST_ROUND, half away from zero). Unconfirmed on
# hardware: padloss.rules.PAD_FINAL_ROUNDING names it (disk_cache hashes rules.py too).
# Every value it rounds is a sum of stored values, so float16 takes the cheaper tie test
# (store_sum_half_away).
final_round = {"half_away_from_zero": store_sum_half_away,
               "half_to_even": store_nearest_even}[rules.PAD_FINAL_ROUNDING]
_fold_window = folder(NARROW[final_round])   # a row's wrapped run, eight lanes at once
# How many lanes the moves of a row's centre take, by kind (F16, BF16, F32): a cache line of
# bfloat16 and float32; two windows (half a line) of float16, whose rows are bound by their
# folds' conversions and ran slower in line moves (docs/performance.md, "Pad kernel").
CENTRE_LANES = (2 * LANES, 4 * LANES, 2 * LANES)
_move_window, _move_centre = mover(LANES, NARROW[final_round]), mover(CENTRE_LANES, NARROW[final_round])


@njit(inline="always")
def _fill_zero(dst, r, start, n, out_kind):
    """dst[r, start:start+n] = +0.0 (cropped positions). The zero is ``opaque``: as a
    memset, each fill was a call in the row loop, and LLVM spilled registers around it
    on every row even when it was not taken."""
    zero = opaque(final_round(out_kind, np.float32(0.0)))
    for i in range(n):
        dst[r, np.uint64(start + i)] = zero


# Copies of at least COPY_LOOP_MIN_BYTES run as a vector loop, and so do those shorter than a
# line (their loop's scalar tail alone); the others as memcpy. LLVM turns a plain copy loop
# into a memcpy call: for a row of a few vector moves, better than a loop whose unrolled body
# (64 elements) it never enters; for long rows the call is slower, and for a few elements
# the call, with the registers the caller saves around it, costs more than their moves
# (docs/performance.md, "Pad kernel").
COPY_LOOP_MIN_BYTES = 384
COPY_CALL_MIN_BYTES = 64


# The helpers below take their operands as small tuples: a place in a 2-D plane is
# (array, row, column), a row (array, row); ``cols`` is the width axis as
# padloss.geometry.CircularAxis gives it (crop, kept, before, after), and ``kinds`` the
# storage kinds (source, output) of a sum, literals.

@njit(inline="always")
def _copy_loop(dst, a, n):
    """dst[r, d+i] = a[ra, ia+i] for i < n (dst = (dst, r, d), a = (a, ra, ia)), as a loop: a
    step LLVM cannot see is 1, so no memcpy call, a vector loop behind a run-time "step == 1"
    check."""
    (o, r, d), (x, ra, ia) = dst, a
    step = opaque(np.uint64(1))
    for i in range(n):
        j = np.uint64(i) * step
        o[r, np.uint64(d) + j] = x[ra, np.uint64(ia) + j]


@njit(inline="always")
def _sum1(dst, a, n, kinds):
    """dst[r, d+i] = a[ra, ia+i] for i < n, converted and rounded."""
    src_kind, out_kind = kinds
    (o, r, d), (x, ra, ia) = dst, a
    if src_kind == out_kind:
        # One term read straight from storage is representable: every rounding
        # mode returns it unchanged, so its bits are copied (a signalling NaN is
        # not quieted; NaN payloads are not part of the contract).
        if COPY_CALL_MIN_BYTES <= n * o.itemsize < COPY_LOOP_MIN_BYTES:
            for i in range(n):
                o[r, np.uint64(d + i)] = x[ra, np.uint64(ia + i)]
        else:
            _copy_loop(dst, a, n)
    else:
        for i in range(n):
            o[r, np.uint64(d + i)] = final_round(out_kind, load(src_kind, x[ra, np.uint64(ia + i)]))


@njit(inline="always")
def _sum2(dst, a, b, n, kinds):
    """dst[r, d+i] = a[ra, ia+i] + b[rb, ib+i] for i < n, rounded once."""
    src_kind, out_kind = kinds
    (o, r, d), (x, ra, ia), (y, rb, ib) = dst, a, b
    for i in range(n):
        o[r, np.uint64(d + i)] = final_round(out_kind, load(src_kind, x[ra, np.uint64(ia + i)])
                                             + load(src_kind, y[rb, np.uint64(ib + i)]))


@njit(inline="always")
def _sum3(dst, a, b, c, n, kinds):
    """dst[r, d+i] = (a[ra, ia+i] + b[rb, ib+i]) + c[rc, ic+i] for i < n, rounded once."""
    src_kind, out_kind = kinds
    (o, r, d), (x, ra, ia), (y, rb, ib), (z, rc, ic) = dst, a, b, c
    for i in range(n):
        o[r, np.uint64(d + i)] = final_round(out_kind, (load(src_kind, x[ra, np.uint64(ia + i)])
                                                        + load(src_kind, y[rb, np.uint64(ib + i)]))
                                             + load(src_kind, z[rc, np.uint64(ic + i)]))


@njit(inline="always")
def _fold_columns(source, target, kinds, cols):
    """out[h, crop + c] = (src[k, before+c] + src[k, before+c-kept]) + src[k, before+c+kept]
    over the kept columns c (source = (src, k), target = (out, h)), each wrapped term only
    where it exists (the cropped columns are the caller's: one fill per row, not one per
    fold's instance, each a loop to compile).

    Column c takes the right band's src[k, before+kept+c] when c < after, and the
    left band's src[k, c-(kept-before)] when c >= kept - before.
    """
    (src, k), (out, h) = source, target
    crop, kept, before, after = cols
    left_start = kept - before
    lo, hi = lesser(after, left_start), greater(after, left_start)
    right = before + kept
    _sum2((out, h, crop), (src, k, before), (src, k, right), lo, kinds)              # right wrap only
    if after <= left_start:                                                          # centre: the copy
        _sum1((out, h, crop + lo), (src, k, before + lo), hi - lo, kinds)
    else:                                                                            # both wraps
        _sum3((out, h, crop + lo), (src, k, before + lo), (src, k, lo - left_start), (src, k, right + lo),
              hi - lo, kinds)
    _sum2((out, h, crop + hi), (src, k, before + hi), (src, k, hi - left_start), kept - hi, kinds)  # left


@njit(inline="always")
def _fold_rows(src, out, rows, k0, kind, cols, window_rows, streamed):
    """Rows ``rows`` (h0, h1) of ``out`` (their kept columns) from gradOutput's rows k0..,
    rows with no wrapped partner rows, each ``_fold_columns``: float64 rows (which have no
    windows, so ``window_rows``, where windows may read, goes unused, and never stream:
    ``streamed`` is 0)."""
    h0, h1 = rows
    for h in range(h0, h1):
        row = out[h:h + 1]                         # one-row views: see the module docstring
        k = k0 + h - h0
        _fold_columns((src[k:k + 1], 0), (row, 0), (kind, kind), cols)


def columns_fit_windows(cols) -> bool:
    """Whether rows with the width's axis ``cols`` (crop, kept, before, after) can fold in
    windows (``_row_in_windows``): pads at most ``LANES`` wide, the kept columns at least
    two windows. Plans ask it (chunk_body's ``windowed``), and kernels (``_windows_fit``)."""
    _, kept, before, after = cols
    return before <= LANES and after <= LANES and kept >= 2 * LANES


_columns_fit_windows = njit(inline="always")(columns_fit_windows)


@njit(inline="always")
def _windows_fit(src, out, cols):
    """Whether a plane's rows fold in windows (``_row_in_windows``): columns that fit them
    (``columns_fit_windows``), unit column strides, and rows at least ``LANES`` elements
    apart, so that a window's reads past a row's ends stay inside the neighbour rows (rows
    ``_window_rows`` names have them)."""
    return (_columns_fit_windows(cols) and src.strides[1] == src.itemsize and out.strides[1] == out.itemsize
            and src.strides[0] >= LANES * src.itemsize)


@njit(inline="always")
def _window_rows(go, plane):
    """The rows k_lo..k_hi of gradOutput's plane ``plane`` with a row of the array on
    either side, inside which a window's reads past the row's ends stay: all but the
    plane's first and last; those too where all planes' rows follow one another at one
    stride (C-contiguous planes, say) and a plane lies on that side."""
    last, row = go.shape[2] - 1, go.strides[2]
    linear = ((go.shape[1] == 1 or go.strides[1] == go.shape[2] * row)
              and (go.shape[0] == 1 or go.strides[0] == go.shape[1] * go.shape[2] * row))
    planes = go.shape[0] * go.shape[1]
    return (0 if linear and plane > 0 else 1), (last if linear and plane < planes - 1 else last - 1)


@njit(inline="always")
def _row_in_windows(out, h, src, rows, kind, cols):
    """Row h of ``out`` (its kept columns) from gradOutput's row ``rows``, or the pair
    ``rows = (k, k2)`` of a row and the band row that wraps onto it (summed column by
    column first, in float32: the spec's rows-then-columns order): each wrapped run, as
    wide as its pad, folded in one eight-lane window (padloss_numba.window), the columns
    between them moved (a pair's rounded). float16, bfloat16 and float32 rows only;
    ``_windows_fit`` says where."""
    # the columns between the windows: moves whose steps LLVM cannot see, CENTRE_LANES wide
    # while they end inside, then one window wide (the last may run into the right window's
    # columns, written after it). Seen, a loop of moves becomes a memcpy call, which the row
    # loop keeps registers spilled around even where it is not taken
    crop, kept, before, after = cols
    wide = CENTRE_LANES[kind]
    i, step, one_step = LANES, opaque(wide), opaque(LANES)
    while i + wide <= kept - LANES:
        _move_centre(out, h, crop + i, src, rows, before + i, kind)
        i += step
    while i < kept - LANES:
        _move_window(out, h, crop + i, src, rows, before + i, kind)
        i += one_step
    _fold_window(out, h, crop + kept - LANES, src, rows, before + kept - LANES, before - LANES,
                 LANES - before, LANES, kind)
    # the left window last: its band lies at the row's end (and past it, in the next row),
    # which read first broke the row's stream in two
    _fold_window(out, h, crop, src, rows, before, before + kept, 0, after, kind)


@njit(inline="always")
def _centre_lines(dst, crop, kept):
    """(first, stop): the span of the whole aligned lines of a row's centre between its
    windows (elements aligned to their size: ``_stream_rows`` checks)."""
    lo, hi = crop + LANES, crop + kept - LANES
    per_line = LINE // item_bytes(dst)
    first = lesser(lo + lead_in(dst, lo), hi)
    return first, first + (hi - first) // per_line * per_line


@njit(inline="always")
def _moves(stage, at, src, k, s, n, kind):
    """stage[0, at:at + n] = src[k, s:s + n] in window-wide moves, the last one's lanes past
    n spilling further into the stage (which ``_tail``'s window then overwrites, or no one
    reads): a run shorter than a line, where a copy loop ran its scalar remainder only."""
    step = opaque(LANES)
    i = 0
    while i < n:
        _move_window(stage, 0, at + i, src, k, s + i, kind)
        i += step


@njit(inline="always")
def _head(stage, at, src, k, kind, cols, first):
    """A row's columns crop..first (its left window and the centre up to its first whole
    line), from gradOutput's row k, into ``stage`` from column ``at``."""
    crop, kept, before, after = cols
    _fold_window(stage, 0, at, src, k, before, before + kept, 0, after, kind)
    _moves(stage, at + LANES, src, k, before + LANES, first - crop - LANES, kind)


@njit(inline="always")
def _tail(stage, src, k, kind, cols, stop):
    """A row's columns stop..crop+kept (the centre after its last whole line, and its right
    window), from gradOutput's row k, into ``stage`` from column 0; how many."""
    crop, kept, before, after = cols
    n = crop + kept - stop
    _moves(stage, 0, src, k, before + stop - crop, n - LANES, kind)
    _fold_window(stage, 0, n - LANES, src, k, before + kept - LANES, before - LANES, LANES - before, LANES,
                 kind)
    return n


# A streamed run's stage: one row's tail and the next row's head, each shorter than a window
# and a line (_centre_lines), and the head's last move spilling up to a window less one past
# it (_moves): at most 170 bytes of float16, 212 of float32.
STAGE_BYTES = 256


@njit(inline="always")
def _stream_rows(src, out, rows, k0, kind, cols):
    """Rows ``rows`` (h0, h1) of ``out``, which fold in windows, from gradOutput's rows
    k0..: every line of them in one non-temporal store, so none is read in first. A row's
    whole aligned centre lines leave straight from gradOutput's row; its ends (a window and
    the centre up to a line boundary) are computed into a stage, where the rows follow one
    another in memory (no cropped columns) one row's tail and the next row's head together:
    the line they share leaves whole, written once (drained through the first row's view
    on into the next, which follows it in memory). The run's first head and last tail
    drain alone, their partial lines in normal stores (nontemporal.drain). Where the
    elements are misaligned no line is whole: the rows fold as the body folds them."""
    h0, h1 = rows
    crop, kept, before, after = cols
    if h0 >= h1:
        return
    if lead_in(out[h0], crop) < 0:
        for h in range(h0, h1):
            _row_in_windows(out, h, src, k0 + h - h0, kind, cols)
        return
    joins = crop == 0 and kept == out.shape[1] and out.strides[0] == kept * item_bytes(out)
    stage = stack_array(out, STAGE_BYTES)
    staged = stage[np.newaxis, :]
    per_line = LINE // item_bytes(out)
    pending = 0   # elements of the last row's tail in the stage, waiting for this row's head
    for h in range(h0, h1):
        k = k0 + h - h0
        dst, row = out[h], src[k]
        first, stop = _centre_lines(dst, crop, kept)
        for d in range(first, stop, per_line):
            stream_lines(dst, d, row, before + d - crop, 1)
        _head(staged, pending, src, k, kind, cols, first)
        if pending:   # the last row's tail, whose columns end where this row's begin
            drain(out[h - 1], crop + kept - pending, stage, pending + first - crop)
        else:
            drain(dst, crop, stage, first - crop)
        pending = _tail(staged, src, k, kind, cols, stop)
        if not joins or h == h1 - 1:
            drain(dst, stop, stage, pending)
            pending = 0


@njit(inline="always")
def _of_two_runs(i, first, count, second):
    """The i-th row of two runs walked in one loop (one instance of its body): rows
    ``first..first+count``, then ``second..``."""
    return first + i if i < count else second + i - count


@njit(inline="always")
def _window_span(src, out, rows, k0, cols, window_rows):
    """(m0, m1): the rows of ``rows`` (h0, h1), from gradOutput's rows k0.., that fold in
    windows: all of them whose gradOutput row is one of k_lo..k_hi (``_window_rows``), where
    their columns fit windows (``_windows_fit``); none elsewhere (m0 = m1 = h1)."""
    h0, h1 = rows
    k_lo, k_hi = window_rows
    m0, m1 = h1, h1
    if _windows_fit(src, out, cols):
        m0 = lesser(greater(h0, h0 + k_lo - k0), h1)
        m1 = greater(lesser(h1, h0 + k_hi - k0 + 1), m0)
    return m0, m1


@njit(inline="always")
def _fold_rows_in_windows(src, out, rows, k0, kind, cols, window_rows, streamed):
    """``_fold_rows`` for float16, bfloat16 and float32 rows, each in windows
    (``_row_in_windows``) where they fit and gradOutput's row is one of k_lo..k_hi
    (``_window_span``; other rows, pads past ``LANES`` or strided columns fold as
    loops): one loop over the run of rows, with no test in it of which way each row folds
    (docs/performance.md, "Pad kernel"). Where the plan streams (``streamed``, the address
    of ``streamed_rows``, not 0) the rows in windows are that function's, called before."""
    h0, h1 = rows
    m0, m1 = _window_span(src, out, rows, k0, cols, window_rows)
    for h in range(m0, m1 if streamed == 0 else m0):   # a select, not a branch around the loop
        _row_in_windows(out, h, src, k0 + h - h0, kind, cols)
    head = m0 - h0
    for i in range(head + h1 - m1):   # the others, before and after them
        h = _of_two_runs(i, h0, head, m1)
        k = k0 + h - h0
        _fold_columns((src[k:k + 1], 0), (out[h:h + 1], 0), (kind, kind), cols)


@njit(inline="always")
def _no_windows(src, out, h, k, k2, kind, cols, window_rows):
    """``_pair_in_windows`` for float64 rows: never (they fold through the row buffer)."""
    return False


@njit(inline="always")
def _pair_in_windows(src, out, h, k, k2, kind, cols, window_rows):
    """Fold row h of ``out`` from gradOutput's row k and the band row k2 that wraps onto
    it in windows (``_row_in_windows``, float16, bfloat16 and float32 rows), where they
    fit and both rows are among k_lo..k_hi (``_window_rows``); whether it did."""
    k_lo, k_hi = window_rows
    if _windows_fit(src, out, cols) and k_lo <= k <= k_hi and k_lo <= k2 <= k_hi:
        _row_in_windows(out, h, src, (k, k2), kind, cols)
        return True
    return False


@njit(inline="always")
def _band_rows(c, h_kept, h_before, h_after):
    """(k, k2) of kept row c (c < h_after or c >= h_kept - h_before, a row some band wraps
    onto): its centre row in gradOutput, and the row of the bottom band (c < h_after) or
    of the top band that wraps onto it."""
    k = h_before + c
    return k, (k + h_kept if c < h_after else k - h_kept)


@njit(inline="always")
def _prefetch_rows(out, h, src, k, k2):
    """Start fetching row h of ``out`` (for writing) and gradOutput's rows k and k2 into
    the caches: a streamed plane's band rows lie far from the rows streamed before them,
    and fetched only when their fold reached them, each of their lines waited on memory
    (docs/performance.md, "Pad kernel")."""
    for col in range(0, out.shape[1], LINE // item_bytes(out)):
        prefetch(out, h, col, True)
    for col in range(0, src.shape[1], LINE // item_bytes(src)):
        prefetch(src, k, col, False)
        prefetch(src, k2, col, False)


def accumulator_dtype(kind: int):
    """The float type sums are made in: float64 for float64 storage, else float32."""
    return np.float64 if kind == F64 else np.float32


_threads_here = caller_thread_count()   # a threaded entry's return: the count it ran under

AXES = Slots(height=4, width=4, body=1, chunks=1, streamed_rows=1, row_on_stack=1)
"""The geometry a plan packs (see make_kernel): (crop, kept, before, after) of each axis."""
HEIGHT, WIDTH, BODY, CHUNKS = AXES.height, AXES.width, AXES.body, AXES.chunks
STREAMED_ROWS, ROW_ON_STACK = AXES.streamed_rows, AXES.row_on_stack

# A piece's row buffer up to this size lives on the entry's stack, not in the workspace
# (``row_on_stack``): a plan with no workspace runs without one taken and given back
# (docs/performance.md, "Tiny calls and autograd"). Rows of 2048 float32 accumulators.
ROW_STACK_BYTES = 8192


def make_kernel(kind: int, parallel: bool):
    """Compile-on-first-call entry ``kernel(grad_output, grad_input, axes, workspace)``:
    runs the body at address ``axes[BODY]`` (a ``chunk_body`` of ``kind``, compiled for
    these argument types; padloss_numba.indirect) on each of the ``axes[CHUNKS]``
    pieces of the rows, in parallel or (the serial entry) as one piece.

    Arrays are 4-D (N, C, H', W') and (N, C, H, W); ``axes`` is :data:`AXES` packed:
    (crop, kept, before, after) of padloss.geometry.CircularAxis for the height, then
    for the width, the body's address, the number of pieces, the address of
    ``streamed_rows`` for these planes, or 0 (padloss_numba.slots says why one array),
    and whether each piece's row buffer is on the stack; ``workspace`` is
    8-byte-aligned uint8 holding one row of W' accumulators per piece, or is not read
    (``row_on_stack``: a row of at most ROW_STACK_BYTES, which each piece takes on its
    thread's stack and hands the body as its workspace). The caller picks the pieces
    from the thread count. The parallel entry returns the thread count it ran under
    (``_threads_here``), which the plan's caller compares with the count it was planned for
    afterwards (padloss.backend.Plan's ``reports_context``).
    """
    if parallel:
        def kernel(go, gi, axes, workspace):
            chunks = axes[CHUNKS]
            for chunk in prange(chunks):
                rows = stack_array(workspace, ROW_STACK_BYTES) if axes[ROW_ON_STACK] else workspace
                call_body(axes[BODY], (go, gi, axes, rows, np.int64(chunk), chunks))
            return _threads_here()
    else:
        def kernel(go, gi, axes, workspace):
            rows = stack_array(workspace, ROW_STACK_BYTES) if axes[ROW_ON_STACK] else workspace
            call_body(axes[BODY], (go, gi, axes, rows, np.int64(0), np.int64(1)))

    return jit(parallel=parallel, _nrt=False)(kernel)


# Storage kinds whose rows fold in windows where their columns fit them (chunk_body's
# ``windowed``) and whose large outputs stream past the caches (``streams``): every line of
# their rows in windows in a non-temporal store (_stream_rows; docs/performance.md, "Pad
# kernel"). float64 rows fold through the row buffer, and store normally.
WINDOWED_KINDS = (F16, BF16, F32)


def streams(windowed: bool, out_nbytes: int, parallel: bool, contiguous: bool) -> bool:
    """Whether the pad's output streams past the caches: as ``nontemporal.streams`` says,
    for a body with windows (chunk_body's ``windowed``, of WINDOWED_KINDS: only rows in
    windows stream)."""
    return windowed and nontemporal.streams(out_nbytes, parallel, contiguous)


STREAMED_GEOMETRY = 14
"""How many int64 ``streamed_rows`` takes in its ``geometry`` tuple."""


@functools.lru_cache(maxsize=None)
def streamed_rows(kind: int):
    """``rows(src, out, geometry)``: those of one plane's rows with no partner rows that
    fold in windows (``_window_span``), streamed past the caches (``_stream_rows``), for a
    body whose plan streams (it calls this by address, ``axes[STREAMED_ROWS]``, and folds
    the other rows itself); the plane's band rows' lines fetched first, to be on their way
    meanwhile (_prefetch_rows). ``geometry`` is (direct, direct_end, rows_after,
    rows_before, the height's axis, the width's axis, k_lo, k_hi), as the body names them.
    Compiled apart from the body, once per kind and plane layout, so the body is the same
    for every size and only the large outputs that stream compile this (docs/performance.md,
    "Compiled bodies and entry points")."""

    def rows(src, out, geometry):
        direct, direct_end, rows_after, rows_before = geometry[0], geometry[1], geometry[2], geometry[3]
        h_crop, h_kept, h_before, h_after = geometry[4], geometry[5], geometry[6], geometry[7]
        cols = (geometry[8], geometry[9], geometry[10], geometry[11])
        k_lo, k_hi = geometry[12], geometry[13]
        for i in range(rows_after + rows_before):
            band_h = _of_two_runs(i, direct_end, rows_after, direct - rows_before)
            c = band_h - h_crop
            if 0 <= c < h_kept:
                k, k2 = _band_rows(c, h_kept, h_before, h_after)
                _prefetch_rows(out, band_h, src, k, k2)
        k0 = h_before + direct - h_crop
        m0, m1 = _window_span(src, out, (direct, direct_end), k0, cols, (k_lo, k_hi))
        _stream_rows(src, out, (m0, m1), k0 + m0 - direct, kind, cols)

    return jit(_nrt=False, pipeline_class=BodyCompiler)(rows)


@functools.lru_cache(maxsize=None)
def chunk_body(kind: int, windowed: bool):
    """``body(grad_output, grad_input, axes, workspace, chunk, chunks)``: the rows of
    piece ``chunk`` of ``chunks``, with workspace row ``chunk`` as its row buffer (row 0
    where the entry handed it its own row on the stack, ``axes[ROW_ON_STACK]``).
    ``windowed`` (float16, bfloat16 and float32 only) puts in the windows
    (``_row_in_windows``), for rows whose columns fit them; then where
    ``axes[STREAMED_ROWS]`` is not 0, the rows with no partner rows that fold in windows
    stream their centres through that compiled ``streamed_rows``, which it calls first.
    Without them, a body compiles in three quarters of the time and runs rows too narrow
    for windows faster (docs/performance.md, "Compiled bodies and entry points").
    Compiled once per storage kind, ``windowed`` and layout, and called by address from
    both entry points (see padloss_numba.indirect)."""
    if windowed and kind not in WINDOWED_KINDS:
        raise ValueError(f"only kinds {WINDOWED_KINDS} fold in windows, not {kind}")
    acc_kind = F64 if kind == F64 else F32
    acc_dtype = accumulator_dtype(kind)

    def body(go, gi, axes, workspace, chunk, chunks):
        h_crop, h_kept, h_before, h_after = axes[HEIGHT], axes[HEIGHT + 1], axes[HEIGHT + 2], axes[HEIGHT + 3]
        cols = (axes[WIDTH], axes[WIDTH + 1], axes[WIDTH + 2], axes[WIDTH + 3])   # the width's
        w_crop, w_kept = cols[0], cols[1]
        n_chan, height, width = gi.shape[1], gi.shape[2], go.shape[3]
        rows = gi.shape[0] * n_chan * height
        first, end = chunk * rows // chunks, (chunk + 1) * rows // chunks
        # the piece's row buffer: its workspace row, or the one row its entry put on the stack
        acc = buffer_row(workspace, acc_dtype, 0 if axes[ROW_ON_STACK] else chunk, width)
        for plane in range(first // height, (end + height - 1) // height):
            n, ch = divmod(plane, n_chan)
            src, out = go[n, ch], gi[n, ch]               # one view per plane, not per row
            k_lo, k_hi = _window_rows(go, plane)
            h, stop = greater(first - plane * height, 0), lesser(end - plane * height, height)
            if w_crop > 0 or w_crop + w_kept < out.shape[1]:   # cropped columns: zero in every row
                for r in range(h, stop):
                    _fill_zero(out, r, 0, w_crop, kind)
                    _fill_zero(out, r, w_crop + w_kept, out.shape[1] - w_crop - w_kept, kind)
            # the rows with no partner rows, c in [h_after, h_kept - h_before), fold together
            # first; then the rows after them, then those before, so that a plane's gradOutput
            # rows are read in one forward stream: a band row at the plane's end right after the
            # rows before it, one at its start (just read, or streamed past) from the cache
            direct = lesser(greater(h_crop + h_after, h), stop)
            direct_end = greater(lesser(h_crop + h_kept - h_before, stop), direct)
            rows_after, rows_before = stop - direct_end, direct - h
            # read per plane, tested as rare (see scalars.rarely); only rows in windows stream
            streamed = axes[STREAMED_ROWS] if windowed else 0
            if rarely(streamed):
                geometry = (np.int64(direct), np.int64(direct_end), np.int64(rows_after),
                            np.int64(rows_before), h_crop, h_kept, h_before, h_after, cols[0], cols[1],
                            cols[2], cols[3], np.int64(k_lo), np.int64(k_hi))
                call_body(streamed, (src, out, geometry))
            if direct < direct_end:
                FOLD_ROWS(src, out, (direct, direct_end), h_before + direct - h_crop, kind, cols,
                          (k_lo, k_hi), streamed)
            for i in range(rows_after + rows_before):
                h = _of_two_runs(i, direct_end, rows_after, direct - rows_before)
                row = out[h:h + 1]                         # one-row views: see the module docstring
                c = h - h_crop
                if c < 0 or c >= h_kept:                   # a cropped row
                    _fill_zero(row, 0, 0, row.shape[1], kind)
                    continue
                k, k2 = _band_rows(c, h_kept, h_before, h_after)
                both = c < h_after and c >= h_kept - h_before     # both bands wrap onto it
                if not both and PAIR_IN_WINDOWS(src, out, h, k, k2, kind, cols, (k_lo, k_hi)):
                    continue
                if both:
                    _sum3((acc, 0, 0), (src, k, 0), (src, k - h_kept, 0), (src, k + h_kept, 0), width,
                          (kind, acc_kind))
                else:
                    _sum2((acc, 0, 0), (src, k, 0), (src, k2, 0), width, (kind, acc_kind))
                _fold_columns((acc, 0), (row, 0), (acc_kind, kind), cols)
        if axes[STREAMED_ROWS]:
            fence()   # streamed stores are weakly ordered: all of them before the kernel returns

    body = with_globals(body, FOLD_ROWS=_fold_rows_in_windows if windowed else _fold_rows,
                        PAIR_IN_WINDOWS=_pair_in_windows if windowed else _no_windows)
    return jit(_nrt=False, pipeline_class=BodyCompiler)(body)


# A body's globals (chunk_body): how it folds the rows with no partner rows, and whether it
# folds a row with one partner row in windows.
FOLD_ROWS = PAIR_IN_WINDOWS = None
