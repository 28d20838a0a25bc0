"""l1_loss_backward in plain torch ops: the device-generic path.

The Ascend backend's fallback when torch_npu lacks the native op, and the
``torch`` backend's L1 on any device. The numerics are the spec's
(docs/l1_loss_backward.md), not PyTorch's: integer and bool inputs become the
promoted dtype P with one rounding, the product is formed in the compute type
(float32, float64 for the CPU extension), ``sign(self - target)`` is 0 for
equal or NaN inputs, "mean" multiplies by ``1 / d0 / d1 / ...`` divided one
dim at a time in the compute type, and the result is rounded once, to nearest
even, to grad_input's dtype. Broadcasting is torch's own, without copies.
"""
from __future__ import annotations

import torch

from padloss import rules
from padloss.problem import Problem
from padloss.rules import promoted_dtype

from .buffers import as_torch, on_stream
from .rounding import round_nearest_even

MEAN = 1   # the aclnn reduction code


def compute_dtype(promoted: torch.dtype) -> torch.dtype:
    return getattr(torch, rules.compute_dtype(str(promoted).removeprefix("torch.")))


def mean_coefficient(shape: tuple[int, ...], compute: torch.dtype) -> float:
    """rules.mean_coefficient in the compute type, as a Python float (exact: the
    compute type's value widened)."""
    return float(rules.mean_coefficient(shape, str(compute).removeprefix("torch.")))


def as_float(x: torch.Tensor, promoted: torch.dtype) -> torch.Tensor:
    """Integer and bool inputs converted to P with one rounding to nearest even; floats as they are.

    torch's integer casts are single roundings except to bfloat16, which goes
    through float32; going through float64 instead (exact below 2**53) and
    :func:`round_nearest_even` rounds once for every integer up to that size.
    """
    if x.is_floating_point():
        return x
    if promoted == torch.bfloat16:
        return round_nearest_even(x.to(torch.float64), promoted)
    return x.to(promoted)


def l1_loss_backward_into(grad_output: torch.Tensor, self: torch.Tensor, target: torch.Tensor,
                          grad_input: torch.Tensor, promoted: torch.dtype, coef: float | None) -> None:
    """Write the spec's gradient into ``grad_input`` (the broadcast shape, any float dtype).

    Both sides of the sign's comparisons are widened (exactly) to the compute type
    first: torch would compare a 0-d tensor against a dimensioned one in the
    latter's dtype, where e.g. a float32 0-d self can overflow a float16 target's
    type. ``coef`` is None for none/sum.
    """
    compute = compute_dtype(promoted)
    s, t = as_float(self, promoted).to(compute), as_float(target, promoted).to(compute)
    sign = (s > t).to(compute) - (s < t).to(compute)
    g = as_float(grad_output, promoted).to(compute)
    scaled = g if coef is None else g * coef
    grad_input.copy_(round_nearest_even(sign * scaled, grad_input.dtype))


class TorchL1Plan:
    """P and the mean coefficient for one Problem; ``run`` queues the ops on ``stream``."""

    workspace_size = 0   # torch's allocator provides the temporaries

    def __init__(self, problem: Problem):
        *inputs, grad_input = problem.tensors
        self.promoted = getattr(torch, promoted_dtype(t.dtype for t in inputs))
        (reduction,) = problem.params
        mean = reduction == MEAN
        self.coef = mean_coefficient(grad_input.shape, compute_dtype(self.promoted)) if mean else None

    def run(self, buffers: tuple, workspace, stream) -> None:
        grad_output, self_, target, grad_input = (as_torch(b) for b in buffers)
        with on_stream(grad_input.device, stream):
            l1_loss_backward_into(grad_output, self_, target, grad_input, self.promoted, self.coef)


class TorchOpApiL1Plan(TorchL1Plan):
    """The op-api model (the product targets'): the result computed in P, then cast to
    grad_input's dtype, which differs from P here (padloss.reference, ``numerics="op-api"``)."""

    def run(self, buffers: tuple, workspace, stream) -> None:
        grad_output, self_, target, grad_input = (as_torch(b) for b in buffers)
        with on_stream(grad_input.device, stream):
            staged = torch.empty(grad_input.shape, dtype=self.promoted, device=grad_input.device)
            l1_loss_backward_into(grad_output, self_, target, staged, self.promoted, self.coef)
            grad_input.copy_(staged)   # torch's casts: exact, or one rounding to nearest even


def plan_for(problem: Problem) -> TorchL1Plan:
    """The plan of the Problem's numerics: the spec's, or op-api's where the output's dtype is not P."""
    plan = TorchL1Plan(problem)
    if problem.numerics == "op-api" and str(plan.promoted).removeprefix("torch.") != problem.output.dtype:
        return TorchOpApiL1Plan(problem)
    return plan
