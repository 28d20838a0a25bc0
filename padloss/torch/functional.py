"""Autograd front ends with torch.nn.functional's signatures: torch computes the
forward, padloss's custom ops the backward.

Every rule padloss's backward will apply is checked here, in the forward, on
metadata alone (shapes, dtypes, pads: what torch.compile traces and guards on),
so a bad call fails with padloss's error and status before anything runs, never
first in the backward.

The Functions are old-style (ctx passed to forward): with a ``setup_context``,
``apply()`` binds its arguments through ``inspect.signature``, about 45 us a
call, more than a tiny kernel costs.
"""
from __future__ import annotations

import functools
from typing import Sequence

import torch

from padloss import circular_pad as pad_rules
from padloss import l1_loss as l1_rules
from padloss import npu_targets, torch_compat
from padloss.config import current as settings

from . import ops, torch_functions


def pad_values(padding: int | Sequence[int]) -> tuple[int, int, int, int]:
    """(left, right, top, bottom) from an int (every side), 2 values (the last
    dim only, as F.pad reads them) or 4 values; other forms get padloss's error."""
    if isinstance(padding, int) and not isinstance(padding, bool):
        padding = (padding,) * 4
    elif isinstance(padding, (tuple, list)) and len(padding) == 2:
        padding = (*padding, 0, 0)
    return pad_rules.padding_values(padding)


def _remembered(check):
    """``check`` (a pure function of metadata) with its verdicts on valid calls
    remembered: a tiny forward pays a dict lookup, not the rules (~6 us). An
    invalid call is checked, and raises, every time; under torch.compile the
    rules are traced as they are (Dynamo warns on lru_cache)."""
    remembered = functools.lru_cache(maxsize=1024)(check)

    @functools.wraps(check)
    def checked(*metadata):
        return check(*metadata) if torch_compat.is_compiling() else remembered(*metadata)
    return checked


@_remembered
def _pad_verdict(shape: torch.Size, dtype: torch.dtype, pads: tuple[int, int, int, int], device: torch.device,
                 target: str) -> None:
    op, name = pad_rules.OP, ops.dtype_name(dtype)
    grad_output_shape = pad_rules.check_metadata(tuple(shape), name, pads)
    on = npu_targets.for_call(op, target, str(device))   # the device's, on an Ascend NPU
    npu_targets.check(on, op, (("self", name),), pad_rules.pad_facts(grad_output_shape, tuple(shape), pads))


def check_circular_pad2d(input: torch.Tensor, pads: tuple[int, int, int, int]) -> None:
    """padloss's rules for this forward, the target setting's too (raises PadlossError
    naming the rule)."""
    _pad_verdict(input.shape, input.dtype, pads, input.device, settings.target)


class _CircularPad2d(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, pads):
        ctx.pads = pads
        return torch_functions.pad(input, pads, mode="circular")

    @staticmethod
    def backward(ctx, grad):
        return ops.pad_backward(grad, ctx.pads), None


def circular_pad2d(input: torch.Tensor, padding: int | Sequence[int]) -> torch.Tensor:
    """``F.pad(input, padding, mode="circular")`` on a 3-D or 4-D input, with
    padloss's backward (float32 sums, one rounding half away from zero).

    padding: an int, (left, right) or (left, right, top, bottom); negative
    values crop. Raises :class:`padloss.PadlossError` for what padloss refuses
    (a pad as large as the size, say, which torch allows).
    """
    pads = pad_values(padding)
    check_circular_pad2d(input, pads)
    return _CircularPad2d.apply(input, pads)


@_remembered
def _l1_verdict(input_meta: tuple, target_meta: tuple, device: torch.device, target_device: torch.device,
                npu_target: str):
    """Each meta: (dtype, shape, whether its gradient is needed)."""
    (input_dtype, input_shape, _), (target_dtype, target_shape, _) = input_meta, target_meta
    input_name, target_name = ops.dtype_name(input_dtype), ops.dtype_name(target_dtype)
    shape, promoted = l1_rules.check_metadata(
        ((input_name, (), device), (input_name, tuple(input_shape), device),
         (target_name, tuple(target_shape), target_device)))
    op = l1_rules.OP
    # the backward's padloss calls: a gradient rounded into its tensor's dtype where that was
    # not broadcast, else computed in P (padloss.torch's _gradient_for)
    outs = [ops.dtype_name(dtype) if tuple(s) == shape else promoted
            for dtype, s, needed in (input_meta, target_meta) if needed]
    on = npu_targets.for_call(op, npu_target, str(device))
    npu_targets.check(on, op, (("self", promoted),) + tuple(("out", out) for out in outs),
                      {"promoted": promoted, "outs": tuple(outs)})
    return shape, promoted


def check_l1_loss(input: torch.Tensor, target: torch.Tensor) -> tuple[tuple[int, ...], str]:
    """padloss's rules for this forward, the target setting's too; return B and P.
    grad_output will be the loss's gradient: 0-d for mean and sum, B for none (it
    broadcasts either way)."""
    return _l1_verdict((input.dtype, input.shape, input.requires_grad),
                       (target.dtype, target.shape, target.requires_grad), input.device, target.device,
                       settings.target)


REDUCTION_NAMES = {code: name for name, code in l1_rules.REDUCTIONS.items()}   # torch's forward takes names


def _l1_forward(input: torch.Tensor, target: torch.Tensor, reduction: str) -> torch.Tensor:
    """torch's l1_loss as ATen composes it, ``|input - target|`` then its mean or sum (the
    same ops: bit-identical, a test holds it), without F.l1_loss's Python around it
    (broadcast_tensors and its checks: ~3 us of a tiny forward, here checked already);
    target of another shape goes through F.l1_loss, for its broadcast warning."""
    if target.shape != input.shape:
        return torch_functions.l1_loss(input, target, reduction=reduction)
    difference = torch.sub(input, target).abs_()
    if reduction == "none":
        return difference
    return difference.mean() if reduction == "mean" else difference.sum()


class _L1Loss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, target, reduction, code, shape, promoted):
        ctx.save_for_backward(input, target)
        ctx.code, ctx.shape, ctx.promoted = code, shape, promoted
        loss = _l1_forward(input, target, reduction)
        ctx.needs = ctx.needs_input_grad[:2]   # read here, once: the backward's caches are cold
        plain = ctx.needs[0] and input.shape == shape and input.dtype == promoted
        ctx.prepared = ops.prepare_l1_backward(input, target, code, loss) if plain else None
        return loss

    @staticmethod
    def backward(ctx, grad):
        input, target = ctx.saved_tensors   # also torch's check that neither changed since
        needs_input, needs_target = ctx.needs
        grad_input = grad_target = None
        if ctx.prepared is not None:
            grad_input = ops.run_prepared_l1(ctx.prepared, grad)
        if needs_input and grad_input is None:
            grad_input = _gradient_for(ctx, input, grad, input, target)
        if needs_target:
            if needs_input and (target.shape, target.dtype) == (input.shape, input.dtype):
                grad_target = -grad_input    # rounding is symmetric: exact
            else:
                grad_target = -_gradient_for(ctx, target, grad, input, target)
        return grad_input, grad_target, None, None, None, None


def _gradient_for(ctx, like: torch.Tensor, grad, input, target) -> torch.Tensor:
    """The loss's gradient with respect to ``like`` (input or target, up to sign):
    rounded once into like's dtype where like was not broadcast, else computed
    in the promoted dtype, summed over the broadcast dims, then cast."""
    if like.shape == ctx.shape:
        dtype = None if like.dtype == ctx.promoted else like.dtype   # None: the promoted dtype
        return ops.l1_backward(grad, input, target, ctx.code, dtype, ctx.shape)
    return (ops.l1_backward(grad, input, target, ctx.code, ctx.promoted, ctx.shape)
            .sum_to_size(like.shape).to(like.dtype))


def l1_loss(input: torch.Tensor, target: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """``F.l1_loss(input, target, reduction=reduction)`` with padloss's backward
    for both arguments: ``sign(input - target) * grad`` (divided by the element
    count for "mean") in float32 (float64 for float64), rounded once to nearest
    even; the target's gradient is its negation, summed where it was broadcast."""
    code = l1_rules.reduction_code(reduction)   # padloss also takes the aclnn codes 0, 1, 2
    shape, promoted = check_l1_loss(input, target)
    return _L1Loss.apply(input, target, REDUCTION_NAMES[code], code, torch.Size(shape),
                         getattr(torch, promoted))
