"""circular_pad2d_backward: phase 1 (validation, Problem, plan) and the public calls.

Implements every rule of docs/circular_pad2d_backward.md. All checks run before
a backend is asked for anything, so an invalid call raises with nothing written.
"""
from __future__ import annotations

import operator
from typing import Any

from .arrays import Tensor, TensorMeta, as_tensor, empty_like_output, shape_and_dtype
from .errors import invalid_argument, null_argument
from .executor import Executor, check_output_overlap, make_executor, run_once
from .geometry import axis_rule_violation
from .memo import ValidatedCalls, as_tensors, new_output
from .problem import Problem
from .rules import FLOATS as DTYPES

OP = "circular_pad2d_backward"
BUFFERS = ("grad_output", "grad_input")


_validated = ValidatedCalls(OP)        # calls given their output
_validated_new = ValidatedCalls(OP)    # calls that allocate it


def _exact_pads(padding: Any) -> tuple | None:
    """padding as a memo key part when it is 4 plain ints (a float or a bool
    equals an int as a dict key, so only exact ints may share a verdict)."""
    if type(padding) in (tuple, list) and len(padding) == 4:
        left, right, top, bottom = padding
        if type(left) is type(right) is type(top) is type(bottom) is int:
            return left, right, top, bottom
    return None


def padding_values(padding: Any) -> tuple[int, int, int, int]:
    """padding as 4 ints (left, right, top, bottom), or the error naming the rule."""
    if padding is None:
        raise null_argument(OP, "padding")
    try:
        values = list(padding)
    except TypeError:
        raise invalid_argument(OP, "padding", f"must be a sequence of 4 integers "
                                              f"[left, right, top, bottom], not {type(padding).__name__}")
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
            raise invalid_argument(OP, "padding", f"values must be integers, got {v!r}")
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


def _validate_inputs(grad_output: Any, self: Any, padding: Any) -> tuple[Tensor, tuple, str, tuple]:
    """Check grad_output, self and padding; return grad_output adapted, self's
    shape and dtype (its data is never read), and the pads."""
    if grad_output is None:
        raise null_argument(OP, "grad_output")
    if self is None:
        raise null_argument(OP, "self")
    pads = padding_values(padding)
    go = as_tensor(OP, "grad_output", grad_output)
    shape, dtype = shape_and_dtype(OP, "self", self)
    check_metadata(shape, dtype, pads, go.meta)
    return go, shape, dtype, pads


def _validate_output(grad_input: Any, go: Tensor, shape: tuple, dtype: str, name: str) -> Tensor:
    """Check the output, called ``name`` ("grad_input", or "out" in the one-shot call)."""
    gi = as_tensor(OP, name, grad_input, writable=True)
    if gi.meta.dtype != dtype:
        raise invalid_argument(OP, name, f"dtype {gi.meta.dtype} must equal self's dtype {dtype}")
    if gi.meta.shape != shape:
        raise invalid_argument(OP, name, f"shape {gi.meta.shape} must equal self's shape {shape}")
    if gi.device != go.device:
        raise invalid_argument(OP, name, f"is on {gi.device} but grad_output is on {go.device}")
    check_output_overlap(OP, ("grad_output", name), (go, gi))
    return gi


def _executor(go: Tensor, gi: Tensor, pads: tuple, backend: str | None) -> Executor:
    problem = Problem(OP, go.device, (go.meta, gi.meta), pads)
    return make_executor(problem, BUFFERS, (go, gi), backend)


def _plan(grad_output: Any, self: Any, padding: Any, grad_input: Any, name: str,
          backend: str | None) -> Executor:
    """Phase 1 for a given output (``name`` as the caller called it)."""
    key = _validated.signature((grad_output, self, grad_input), _exact_pads(padding))
    buffers = (grad_output, grad_input)
    known = _validated.checked(key, buffers, ("grad_output", name))
    if known is not None:
        return make_executor(known.problem, BUFFERS, as_tensors(known.problem, buffers), backend)
    go, shape, dtype, pads = _validate_inputs(grad_output, self, padding)
    if grad_input is None:
        raise null_argument(OP, name)
    executor = _executor(go, _validate_output(grad_input, go, shape, dtype, name), pads, backend)
    _validated.remember(key, executor.problem)
    return executor


def circular_pad2d_backward_get_workspace_size(grad_output: Any, self: Any, padding: Any,
                                               grad_input: Any, *, backend: str | None = None
                                               ) -> tuple[int, Executor]:
    """Phase 1, aclnn-shaped: validate and plan; return (workspace bytes, executor).

    ``executor.run(workspace=None, stream=None)`` then writes ``grad_input``;
    it may be run again, with new buffers of the same metadata passed as
    ``run(grad_output=..., grad_input=...)``.
    """
    executor = _plan(grad_output, self, padding, grad_input, "grad_input", backend)
    return executor.workspace_size, executor


def circular_pad2d_backward(grad_output: Any, self: Any, padding: Any, *, out: Any = None,
                            backend: str | None = None) -> Any:
    """Gradient of 2-D circular padding with respect to its input.

    ``padding`` is [left, right, top, bottom] (negative values crop, as in
    ``F.pad(mode="circular")``); ``self`` gives only the input's shape and
    dtype. Returns ``out`` (written in place) or a new array/tensor of the
    same kind as ``grad_output``. float16/bfloat16 are summed in float32 and
    rounded once, half away from zero, as the Ascend kernel does.
    """
    pads = _exact_pads(padding)
    if out is None:
        key = _validated_new.signature((grad_output, self), pads)
        known = _validated_new.known(key)
        if known is None:
            go, shape, dtype, _ = _validate_inputs(grad_output, self, padding)
            executor = _plan(grad_output, self, padding, empty_like_output(go, shape, dtype), "out",
                             backend)
            _validated_new.remember(key, executor.problem)
            return executor.run()
        out = new_output(known.problem.output)
    else:
        key = _validated.signature((grad_output, self, out), pads)
        known = _validated.checked(key, (grad_output, out), ("grad_output", "out"))
        if known is None:
            return _plan(grad_output, self, padding, out, "out", backend).run()
    run_once(known, (grad_output, out), backend)
    return out
