"""The npu-only branches: which plan runs each op on an Ascend NPU.

Each op prefers a native CANN kernel and falls back to the device-generic torch
ops when that kernel cannot be reached or cannot take the call. None of these
branches has run on an NPU here; the tests check their argument marshalling
against a fake ``torch.ops.npu`` and a fake op library.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from padloss.errors import BackendError
from padloss.problem import Problem
from padloss.rules import promoted_dtype
from padloss_torch import l1 as torch_l1
from padloss_torch import pad as torch_pad
from padloss_torch.buffers import on_stream
from padloss_torch.l1 import as_float

from . import aclnn_pad


def circular_pad_plan(problem: Problem):
    """aclnnCircularPad2dBackward when CANN's op library has it and the call fits it."""
    lib = aclnn_pad.op_library()
    if lib is not None and aclnn_pad.native_kernel_fits(problem):
        return aclnn_pad.AclnnCircularPadPlan(problem, lib)
    return torch_pad.plan_for(problem)


def native_l1_loss_backward() -> Callable | None:
    """torch_npu's ``l1_loss_backward(grad_output, self, target, reduction)``, which
    reaches aclnnL1LossBackward, or None when this torch_npu does not register it."""
    return getattr(torch.ops.npu, "l1_loss_backward", None)


class NativeL1Plan:
    """torch_npu's native op for one Problem, adapted to write the caller's grad_input.

    The op allocates its own output: the broadcast shape, in torch's promotion of
    the inputs' dtypes (which differs from the spec's for 0-d tensors). So the
    inputs are first brought to one dtype: P when grad_input has dtype P (the op
    rounds its float32 result once, to P), else float32, exact, leaving the one
    rounding to the copy into grad_input. Integer inputs become P as the spec says.
    """

    workspace_size = 0   # the op's output and scratch come from torch's allocator

    def __init__(self, problem: Problem, op: Callable):
        *inputs, grad_input = problem.tensors
        promoted = promoted_dtype(t.dtype for t in inputs)
        self.op = op
        self.promoted = getattr(torch, promoted)
        self.native_dtype = self.promoted if grad_input.dtype == promoted else torch.float32
        (self.reduction,) = problem.params
        self.shape = grad_input.shape

    def run(self, buffers: tuple, workspace, stream) -> None:
        *inputs, grad_input = buffers
        with on_stream(grad_input.device, stream):
            args = [as_float(x, self.promoted).to(self.native_dtype) for x in inputs]
            result = self.op(*args, self.reduction)
            if tuple(result.shape) != self.shape:
                raise BackendError(f"l1_loss_backward: torch.ops.npu.l1_loss_backward returned shape "
                                   f"{tuple(result.shape)}, expected the broadcast shape {self.shape}")
            grad_input.copy_(result)


def l1_plan(problem: Problem) -> Any:
    """torch_npu's native op when registered, else the device-generic torch ops."""
    op = native_l1_loss_backward()
    if op is not None:
        return NativeL1Plan(problem, op)
    return torch_l1.plan_for(problem)

