"""circular_pad2d_backward in plain torch ops: the device-generic path.

torch_npu has no circular-pad backward, and these few slice-and-add ops run on
any device torch runs on (NPU, CUDA, CPU), so they are tested here on the CPU.
The numerics are the spec's, not PyTorch autograd's: float16/bfloat16 are
widened exactly to float32 (inside the first add, never as a separate copy of
grad_output), the rows are folded first, ``(centre + top band) + bottom band``,
then the columns, ``(centre + left band) + right band``, skipping bands that do
not exist, and the sums are rounded once by :func:`pad_final_round`.
"""
from __future__ import annotations

import torch

from padloss.geometry import CircularAxis, circular_axis
from padloss.problem import Problem

from .buffers import as_torch, on_stream
from .rounding import pad_final_round


def accumulator_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 sums for float16/bfloat16/float32; float64 (CPU extension) stays float64."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def fold_axis(src: torch.Tensor, dim: int, axis: CircularAxis, acc: torch.dtype) -> torch.Tensor:
    """Sum the wrapped bands of ``src`` along ``dim`` onto its kept range.

    Kept index ``c`` gets ``centre[c]``, plus the band padded before the data
    where ``c >= kept - before``, plus the band padded after where ``c < after``,
    added in that order in ``acc``. With no band, the centre itself is returned
    (a view, in ``src``'s dtype): nothing to add, nothing to round.
    """
    centre = src.narrow(dim, axis.before, axis.kept)
    if not (axis.before or axis.after):
        return centre
    total = centre.to(acc, copy=True)
    if axis.before:
        total.narrow(dim, axis.kept - axis.before, axis.before).add_(src.narrow(dim, 0, axis.before))
    if axis.after:
        total.narrow(dim, 0, axis.after).add_(src.narrow(dim, axis.before + axis.kept, axis.after))
    return total


def zero_cropped(grad_input: torch.Tensor, dim: int, axis: CircularAxis) -> None:
    """Positions cropped by a negative pad receive gradient +0.0."""
    grad_input.narrow(dim, 0, axis.crop).zero_()
    end = axis.crop + axis.kept
    grad_input.narrow(dim, end, axis.size - end).zero_()


def circular_pad2d_backward_into(grad_output: torch.Tensor, grad_input: torch.Tensor,
                                 rows: CircularAxis, cols: CircularAxis) -> None:
    """Write the spec's gradient into ``grad_input`` (any rank >= 2, any device)."""
    acc = accumulator_dtype(grad_input.dtype)
    total = fold_axis(fold_axis(grad_output, -2, rows, acc), -1, cols, acc)
    zero_cropped(grad_input, -2, rows)
    zero_cropped(grad_input, -1, cols)
    kept = grad_input.narrow(-2, rows.crop, rows.kept).narrow(-1, cols.crop, cols.kept)
    kept.copy_(pad_final_round(total, grad_input.dtype))


class TorchCircularPadPlan:
    """Per-axis geometry for one Problem; ``run`` queues the ops on ``stream``."""

    workspace_size = 0   # torch's allocator provides the float32 partial sums

    def __init__(self, problem: Problem):
        _, grad_input = problem.tensors
        left, right, top, bottom = problem.params
        height, width = grad_input.shape[-2:]
        self.rows = circular_axis(height, top, bottom)
        self.cols = circular_axis(width, left, right)

    def run(self, buffers: tuple, workspace, stream) -> None:
        grad_output, grad_input = (as_torch(b) for b in buffers)
        with on_stream(grad_input.device, stream):
            circular_pad2d_backward_into(grad_output, grad_input, self.rows, self.cols)


def _bands(axis: CircularAxis) -> list[tuple[int, int, int]]:
    """(source start, destination start, length) of the centre, the band before and the
    band after along one axis of non-negative pads, in that order; empty bands left out."""
    bands = [(axis.before, 0, axis.kept), (0, axis.kept - axis.before, axis.before),
             (axis.before + axis.kept, 0, axis.after)]
    return [band for band in bands if band[2]]


def arch35_backward_into(grad_output: torch.Tensor, grad_input: torch.Tensor,
                         rows: CircularAxis, cols: CircularAxis) -> None:
    """Write Ascend 950's gradient (the arch35-simt model, padloss.reference's; non-negative
    pads) into ``grad_input``: float32 sums from +0.0, each element's terms row band by row
    band (centre, top, bottom), within each column band by column band (centre, left,
    right), one rounding to nearest even."""
    total = torch.zeros(grad_input.shape, dtype=accumulator_dtype(grad_input.dtype), device=grad_input.device)
    for row_src, row_dst, row_len in _bands(rows):
        for col_src, col_dst, col_len in _bands(cols):
            term = grad_output.narrow(-2, row_src, row_len).narrow(-1, col_src, col_len)
            total.narrow(-2, row_dst, row_len).narrow(-1, col_dst, col_len).add_(term)
    grad_input.copy_(total)   # torch's casts round to nearest even


class TorchArch35PadPlan(TorchCircularPadPlan):
    """The plan under the arch35-simt model (target ascend-950)."""

    def run(self, buffers: tuple, workspace, stream) -> None:
        grad_output, grad_input = (as_torch(b) for b in buffers)
        with on_stream(grad_input.device, stream):
            arch35_backward_into(grad_output, grad_input, self.rows, self.cols)


def plan_for(problem: Problem) -> TorchCircularPadPlan:
    """The plan of the Problem's numerics model: the spec's, or arch35-simt."""
    return (TorchArch35PadPlan if problem.numerics == "arch35-simt" else TorchCircularPadPlan)(problem)
