"""circular_pad2d_backward: its rules and the public calls.

Implements every rule of docs/circular_pad2d_backward.md, filling in the
op-definition skeleton (padloss.op) that runs phase 1 and the one-shot call.
All checks run before a backend is asked for anything, so an invalid call
raises with nothing written.
"""
from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

from .arrays import TensorMeta, as_tensor, shape_and_dtype
from .errors import invalid_argument, null_argument
from .executor import Executor
from .fastpath import BUFFER, SHAPE, Ints
from .geometry import axis_rule_violation
from .op import Inputs, OpDefinition
from .rules import FLOATS as DTYPES

OP = "circular_pad2d_backward"
BUFFERS = ("grad_output", "grad_input")


def _memo_params(grad_output: Any, self: Any, padding: Any) -> tuple | None:
    """The memo key's params: padding when it is 4 plain ints (a float or a bool
    equals an int as a dict key, so only exact ints may share a verdict), and
    self's shape and dtype (self is no buffer, but they decide the verdict; its
    strides decide nothing, its data never being read); None when either is not
    known exactly."""
    if type(padding) in (tuple, list) and len(padding) == 4 and type(self) is np.ndarray:
        left, right, top, bottom = padding
        if type(left) is type(right) is type(top) is type(bottom) is int:
            return left, right, top, bottom, self.dtype, self.shape
    return None


def padding_values(padding: Any) -> tuple[int, int, int, int]:
    """padding as 4 ints (left, right, top, bottom), or the error naming the rule."""
    if padding is None:
        raise null_argument(OP, "padding")
    try:
        values = list(padding)
    except TypeError:
        raise invalid_argument(OP, "padding", f"must be a sequence of 4 integers "
                                              f"[left, right, top, bottom], not {type(padding).__name__}"
                               ) from None
    if len(values) != 4:
        raise invalid_argument(OP, "padding", f"must hold 4 integers [left, right, top, bottom], "
                                              f"got {len(values)}")
    pads = []
    for v in values:
        try:
            if isinstance(v, bool):
                raise TypeError
            pads.append(operator.index(v))
        except TypeError:
            raise invalid_argument(OP, "padding", f"values must be integers, got {v!r}") from None
    return tuple(pads)


def check_metadata(shape: tuple, dtype: str, pads: tuple[int, int, int, int],
                   grad_output: TensorMeta | None = None) -> tuple:
    """Every rule on self's shape and dtype, the pads and (when given)
    grad_output's metadata; return the shape grad_output must have.

    Metadata only: padloss.torch checks a forward with it, before grad_output
    exists, in plain comparisons of ints that torch.compile can trace.
    """
    if dtype not in DTYPES:
        raise invalid_argument(OP, "self", f"dtype {dtype} is not supported; expected one of "
                                           f"{', '.join(DTYPES)}")
    if grad_output is not None and grad_output.dtype != dtype:
        raise invalid_argument(OP, "grad_output", f"dtype {grad_output.dtype} must equal self's dtype "
                                                  f"{dtype} (no promotion)")
    if len(shape) not in (3, 4):
        raise invalid_argument(OP, "self", f"rank {len(shape)} is not supported; expected 3 (C, H, W) "
                                           f"or 4 (N, C, H, W)")
    if grad_output is not None and len(grad_output.shape) != len(shape):
        raise invalid_argument(OP, "grad_output", f"rank {len(grad_output.shape)} must equal self's "
                                                  f"rank {len(shape)}")
    if 0 in shape[1:]:
        raise invalid_argument(OP, "self", f"shape {shape} has a zero-sized dim other than the first")
    left, right, top, bottom = pads
    height, width = shape[-2], shape[-1]
    for axis, size, before, after in (("height", height, top, bottom), ("width", width, left, right)):
        why = axis_rule_violation(size, before, after)
        if why is not None:
            raise invalid_argument(OP, "padding", f"{axis}: {why}")
    expected = shape[:-2] + (height + top + bottom, width + left + right)
    if grad_output is not None and grad_output.shape != expected:
        raise invalid_argument(OP, "grad_output", f"shape {grad_output.shape} must be {expected}: "
                                                  f"self's leading dims, then H + top + bottom, "
                                                  f"W + left + right")
    return expected


def _validate_inputs(grad_output: Any, self: Any, padding: Any) -> Inputs:
    """Check grad_output, self and padding: grad_output adapted, self's shape
    and dtype for the output (its data is never read), the pads."""
    if grad_output is None:
        raise null_argument(OP, "grad_output")
    if self is None:
        raise null_argument(OP, "self")
    pads = padding_values(padding)
    go = as_tensor(OP, "grad_output", grad_output)
    shape, dtype = shape_and_dtype(OP, "self", self)
    check_metadata(shape, dtype, pads, go.meta)
    return Inputs((go,), shape, dtype, pads, go)


def _validate_output(meta: TensorMeta, inputs: Inputs, name: str) -> None:
    """The output's own rules, ``name`` being "grad_input", or "out" in the one-shot call."""
    if meta.dtype != inputs.dtype:
        raise invalid_argument(OP, name, f"dtype {meta.dtype} must equal self's dtype {inputs.dtype}")
    if meta.shape != inputs.shape:
        raise invalid_argument(OP, name, f"shape {meta.shape} must equal self's shape {inputs.shape}")


def _target_terms(inputs: Inputs, out: TensorMeta) -> tuple:
    """What a target checks (padloss.npu_targets.check): self's dtype; grad_output's
    width and size, self's width and the pads."""
    grad_output = inputs.tensors[0].meta
    return (("self", inputs.dtype),), pad_facts(grad_output.shape, inputs.shape, inputs.params)


def pad_facts(grad_output_shape: tuple, self_shape: tuple, pads: tuple) -> dict:
    """The call's facts a target's rules read (padloss.npu_targets.check)."""
    return {"width": grad_output_shape[-1], "self_width": self_shape[-1], "pads": pads,
            "elements": math.prod(grad_output_shape)}


# What the one-shot lane compares of each argument (padloss.fastpath.Lane): self's data is never read.
_op = OpDefinition(OP, BUFFERS, (BUFFER, SHAPE, Ints(4)), _memo_params, _validate_inputs, _validate_output,
                   _target_terms)


def circular_pad2d_backward_get_workspace_size(grad_output: Any, self: Any, padding: Any,
                                               grad_input: Any, *, backend: str | None = None,
                                               npu_target: str | None = None) -> tuple[int, Executor]:
    """Phase 1, aclnn-shaped: validate and plan; return (workspace bytes, executor).

    ``executor.run(workspace=None, stream=None)`` then writes ``grad_input``;
    it may be run again, with new buffers of the same metadata passed as
    ``run(grad_output=..., grad_input=...)``.
    """
    return _op.get_workspace_size((grad_output, self, padding), grad_input, backend, npu_target)


# The def gives the signature and the docstring; the body is the op's lane (padloss.fastpath.Lane).
@_op.one_shot_function
def circular_pad2d_backward(grad_output: Any, self: Any, padding: Any, *, out: Any = None,
                            backend: str | None = None, npu_target: str | None = None) -> Any:
    """Gradient of 2-D circular padding with respect to its input.

    ``padding`` is [left, right, top, bottom] (negative values crop, as in
    ``F.pad(mode="circular")``); ``self`` gives only the input's shape and
    dtype. Returns ``out`` (written in place) or a new array/tensor of the
    same kind as ``grad_output``. float16/bfloat16 are summed in float32 and
    rounded once, half away from zero, as the Ascend kernel does. ``npu_target``
    names the Ascend product whose refusals apply (padloss.npu_targets; None: the
    ``target`` setting).
    """
