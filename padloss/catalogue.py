"""The op catalogue: every op padloss implements, with what its tools need of it.

``padloss check``, ``padloss.warmup()`` (and ``padloss warmup``), ``padloss bench``
and the asv suite iterate over :data:`OPS`, so a new op is one entry here
(docs/adding_an_op.md lists the other files it touches). The dtypes are
:mod:`padloss.rules`': every op is checked on ``rules.FLOATS`` and warmed up and
benchmarked on ``rules.NPU_FLOATS``, the ones training runs in.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

import numpy as np

from . import reference
from .arrays import numpy_dtype
from .circular_pad import circular_pad2d_backward, circular_pad2d_backward_get_workspace_size
from .l1_loss import l1_loss_backward, l1_loss_backward_get_workspace_size
from .rules import FLOATS, NPU_FLOATS

CHECK_DTYPES = FLOATS
WARM_DTYPES = BENCH_DTYPES = NPU_FLOATS


class CheckCase(NamedTuple):
    """One call of ``padloss check``: what padloss computes on a backend, and what
    padloss.reference says it must be, bit for bit."""

    op: str
    name: str
    dtype: str
    compute: Callable[[str], Any]         # backend name -> padloss's result
    expected: Callable[[], np.ndarray]    # padloss.reference's result


class Op(NamedTuple):
    name: str                                         # its one-shot function's name, Problem.op
    short: str                                        # its name in the bench ("pad", "l1")
    warm: Callable[[np.dtype, int, str | None], None]   # phase 1 of its calls on side x side buffers
    check_cases: Callable[[str], list[CheckCase]]     # dtype name -> the calls `padloss check` makes
    workload: str | None                              # "module:class" of its bench workload, if benched

    def workload_class(self) -> type:
        """The bench's workload class (imported only when a bench asks)."""
        import pkgutil

        return pkgutil.resolve_name(self.workload)


def values(shape: tuple[int, ...], dtype: str, seed: int) -> np.ndarray:
    """Normal values with infinities, NaNs, signed zeros and half-overflow values sprinkled in."""
    import ml_dtypes  # its finfo knows bfloat16 too; imported only here (0.9 s, see numpy_dtype)

    dt = numpy_dtype(dtype)
    x = np.random.default_rng(seed).standard_normal(shape) * 4
    flat = x.reshape(-1)
    flat[::17] = float(ml_dtypes.finfo(dt).max) / 2
    flat[3::29], flat[5::31], flat[7::37], flat[11::13] = np.inf, -np.inf, np.nan, -0.0
    return x.astype(dt)


# ---------------------------------------------------------------------------- circular_pad2d_backward

def _pad_warm(dtype: np.dtype, side: int, backend: str | None) -> None:
    out = np.empty((1, 1, side, side), dtype)
    circular_pad2d_backward_get_workspace_size(np.empty((1, 1, side + 2, side + 2), dtype), out,
                                               (1, 1, 1, 1), out, backend=backend)


PAD = "circular_pad2d_backward"
L1 = "l1_loss_backward"


def _pad_case(name: str, dtype: str, shape: tuple, pads: tuple, layout: str = "contiguous") -> CheckCase:
    left, right, top, bottom = pads
    padded = shape[:-2] + (shape[-2] + top + bottom, shape[-1] + left + right)
    if layout == "strided":       # every other column of a wider array
        go = values(padded[:-1] + (2 * padded[-1],), dtype, 0)[..., ::2]
    elif layout == "channels-last":
        go = np.moveaxis(values((padded[0],) + padded[2:] + (padded[1],), dtype, 0), -1, 1)
    else:
        go = values(padded, dtype, 0)

    def compute(backend: str):
        out = np.full(shape, 7, go.dtype)   # anything left unwritten shows up
        return circular_pad2d_backward(go, out, pads, out=out, backend=backend)

    return CheckCase("circular_pad2d_backward", name, dtype, compute,
                     lambda: reference.circular_pad2d_backward(go, shape, pads, numerics=_numerics(PAD)))


def _numerics(op: str) -> str:
    """The numerics model of ``op`` under the target setting (what padloss check runs under)."""
    from .npu_targets import resolve

    support = resolve(op, None).ops.get(op)
    return support.numerics if support is not None else "spec"


def _pad_cases(dt: str) -> list[CheckCase]:
    """Both ranks, cropping and wrapping pads, strided inputs, serial and parallel sizes."""
    return [
        _pad_case("3-D (1, 1, 5), pads (1, 1, 0, 0)", dt, (1, 1, 5), (1, 1, 0, 0)),
        _pad_case("(2, 3, 8, 8), pads 3", dt, (2, 3, 8, 8), (3, 3, 3, 3)),
        _pad_case("asymmetric pads (5, 2, 4, 7)", dt, (2, 4, 16, 24), (5, 2, 4, 7)),
        _pad_case("negative pads crop (-2, 3, 1, -1)", dt, (2, 3, 9, 10), (-2, 3, 1, -1)),
        _pad_case("pads = size - 1", dt, (1, 2, 5, 6), (5, 5, 4, 4)),
        _pad_case("strided grad_output", dt, (2, 3, 8, 8), (2, 1, 1, 2), "strided"),
        _pad_case("parallel (4, 16, 64, 64)", dt, (4, 16, 64, 64), (1, 2, 3, 4)),
        _pad_case("parallel, channels-last", dt, (4, 16, 64, 64), (3, 3, 3, 3), "channels-last"),
    ]


# ---------------------------------------------------------------------------- l1_loss_backward

def _l1_warm(dtype: np.dtype, side: int, backend: str | None) -> None:
    x, out = np.empty((side, side), dtype), np.empty((side, side), dtype)
    l1_loss_backward_get_workspace_size(np.empty((), dtype), x, x, "mean", out, backend=backend)
    l1_loss_backward_get_workspace_size(x, x, x, "none", out, backend=backend)


def _l1_case(name: str, dtype: str, shapes: tuple, reduction: str, *, target_dtype: str | None = None,
             out_dtype: str | None = None, strided: bool = False) -> CheckCase:
    gshape, xshape, tshape = shapes
    go = values(gshape, dtype, 0)
    x = values(xshape[:-1] + (2 * xshape[-1],), dtype, 1)[..., ::2] if strided else values(xshape, dtype, 1)
    if target_dtype is None:
        t = values(tshape, dtype, 2)
    else:                                                # small integers, some equal to self
        t = np.random.default_rng(2).integers(-2, 3, tshape).astype(target_dtype)
    if xshape == tshape and target_dtype is None:
        t.reshape(-1)[::7] = x.reshape(-1)[::7]          # equal values: sign 0
    out_dt = numpy_dtype(out_dtype) if out_dtype else np.dtype(reference.promote(go.dtype, x.dtype, t.dtype))

    def compute(backend: str):
        out = np.full(np.broadcast_shapes(gshape, xshape, tshape), 7, out_dt)
        return l1_loss_backward(go, x, t, reduction, out=out, backend=backend)

    return CheckCase("l1_loss_backward", name, dtype, compute,
                     lambda: reference.l1_loss_backward(go, x, t, reduction, out_dt, _numerics(L1)))


def _l1_cases(dt: str) -> list[CheckCase]:
    """Every reduction, broadcasting, an integer target, a wider or narrower output,
    strided inputs, serial and parallel sizes."""
    other = "float16" if dt != "float16" else "float32"
    same = ((2, 3, 8, 8),) * 3
    return [
        _l1_case("none", dt, same, "none"),
        _l1_case("mean, 0-d grad_output", dt, ((), (2, 3, 8, 8), (2, 3, 8, 8)), "mean"),
        _l1_case("sum, 0-d grad_output", dt, ((), (5, 7), (5, 7)), "sum"),
        _l1_case("broadcast (4,5,6) (4,1,6) (5,1)", dt, ((4, 5, 6), (4, 1, 6), (5, 1)), "none"),
        _l1_case("int32 target", dt, same, "none", target_dtype="int32"),
        _l1_case(f"out in {other}", dt, same, "mean", out_dtype=other),
        _l1_case("strided self", dt, same, "none", strided=True),
        _l1_case("parallel mean, broadcast target", dt, ((), (64, 1024), (1024,)), "mean"),
        _l1_case("parallel none (4, 16, 64, 64)", dt, ((4, 16, 64, 64),) * 3, "none"),
    ]


OPS: dict[str, Op] = {op.name: op for op in (
    Op("circular_pad2d_backward", "pad", _pad_warm, _pad_cases, "padloss.bench.workloads:PadWorkload"),
    Op("l1_loss_backward", "l1", _l1_warm, _l1_cases, "padloss.bench.workloads:L1Workload"),
)}
BENCHED = {op.short: op for op in OPS.values() if op.workload}
"""The ops ``padloss bench`` times, by short name."""


def check_cases() -> list[CheckCase]:
    """Every op's check cases, dtype by dtype."""
    return [case for dtype in CHECK_DTYPES for op in OPS.values() for case in op.check_cases(dtype)]
