"""l1_loss_backward: its rules (validation, promotion) and the public calls.

Implements every rule of docs/l1_loss_backward.md, filling in the op-definition
skeleton (padloss.op) that runs phase 1 and the one-shot call. The three inputs
broadcast to the shape B of the output; their dtypes promote to P by dtype alone
(a 0-d tensor keeps its priority, f16 + bf16 gives f32, integers and bools
follow the float). All checks run before a backend is asked for anything, so
an invalid call raises with nothing written.
"""
from __future__ import annotations

import operator
from typing import Any, Iterable

import numpy as np

from .arrays import TensorMeta, as_tensor
from .errors import invalid_argument, null_argument
from .executor import Executor
from .op import Inputs, OpDefinition
from .rules import FLOATS, INTEGERS, promoted_dtype

OP = "l1_loss_backward"
BUFFERS = ("grad_output", "self", "target", "grad_input")
INPUTS = BUFFERS[:-1]
REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}
MAX_RANK = 8


def reduction_code(reduction: Any) -> int:
    """0, 1, 2 or "none", "mean", "sum" -> the aclnn code, or the error naming the rule."""
    if reduction is None:
        raise null_argument(OP, "reduction")
    rule = "must be 0 (none), 1 (mean), 2 (sum) or one of 'none', 'mean', 'sum'"
    if isinstance(reduction, str):
        if reduction not in REDUCTIONS:
            raise invalid_argument(OP, "reduction", f"{rule}, got {reduction!r}")
        return REDUCTIONS[reduction]
    try:
        if isinstance(reduction, (bool, np.bool_)):
            raise TypeError
        code = operator.index(reduction)
    except TypeError:
        raise invalid_argument(OP, "reduction", f"{rule}, got {reduction!r}") from None
    if code not in (0, 1, 2):
        raise invalid_argument(OP, "reduction", f"{rule}, got {code}")
    return code


def _broadcast(shape: tuple[int, ...], other: tuple[int, ...], name: str, against: str) -> tuple:
    """NumPy's broadcasting of two shapes (np.broadcast_shapes costs 2.5 us a call)."""
    rank = max(len(shape), len(other))
    result = []
    for mine, theirs in zip((1,) * (rank - len(shape)) + shape, (1,) * (rank - len(other)) + other):
        if mine != theirs and mine != 1 and theirs != 1:
            raise invalid_argument(OP, name, f"shape {other} does not broadcast with {against} {shape}")
        result.append(theirs if mine == 1 else mine)
    return tuple(result)


def check_metadata(inputs: Iterable[tuple[str, tuple[int, ...], str]]) -> tuple[tuple[int, ...], str]:
    """Every rule on the inputs' metadata, given as (dtype, shape, device) in
    aclnn order; return B, the broadcast shape, and P, the promoted dtype.

    Metadata only: padloss.torch checks a forward with it (torch.compile traces
    it: comparisons of ints and dtype names, no data).
    """
    shape, device, dtypes = (), None, []
    against = ("", "grad_output's shape", "the broadcast shape of grad_output and self")
    for name, (dtype, t_shape, t_device), other in zip(INPUTS, inputs, against):
        rank = len(t_shape)
        if dtype not in FLOATS and dtype not in INTEGERS:
            raise invalid_argument(OP, name, f"dtype {dtype} is not supported; expected a float "
                                             f"({', '.join(FLOATS)}), an integer or bool")
        if rank > MAX_RANK:
            raise invalid_argument(OP, name, f"rank {rank} is more than {MAX_RANK} dims")
        device = t_device if device is None else device
        if t_device != device:
            raise invalid_argument(OP, name, f"is on {t_device} but grad_output is on {device}")
        shape = _broadcast(shape, t_shape, name, other)
        dtypes.append(dtype)
    dtype = promoted_dtype(dtypes)
    if dtype is None:
        raise invalid_argument(OP, "self", "the promoted dtype is undefined: grad_output, self and "
                                           "target are all integer or bool; one must be a float")
    return shape, dtype


def _validate_inputs(grad_output: Any, self: Any, target: Any, reduction: Any) -> Inputs:
    """Check the inputs: them adapted, B and P for the output, the reduction code."""
    for name, value in zip(INPUTS, (grad_output, self, target)):
        if value is None:
            raise null_argument(OP, name)
    code = reduction_code(reduction)
    inputs = tuple(as_tensor(OP, name, value) for name, value in zip(INPUTS, (grad_output, self, target)))
    shape, dtype = check_metadata((t.meta.dtype, t.meta.shape, t.device) for t in inputs)
    return Inputs(inputs, shape, dtype, (code,), inputs[1])


def _validate_output(meta: TensorMeta, inputs: Inputs, name: str) -> None:
    """The output's own rules, ``name`` being "grad_input", or "out" in the one-shot call."""
    if meta.dtype not in FLOATS:
        raise invalid_argument(OP, name, f"dtype {meta.dtype} is not a float the promoted dtype "
                                         f"can be cast to; expected one of {', '.join(FLOATS)}")
    if meta.shape != inputs.shape:
        raise invalid_argument(OP, name, f"shape {meta.shape} must equal the broadcast shape "
                                         f"{inputs.shape} of grad_output, self and target")


_op = OpDefinition(OP, BUFFERS, _validate_inputs, _validate_output)


def _reduction_key(reduction: Any) -> Any:
    """reduction as a memo key part when it is a str or an exact int (True == 1 as a key)."""
    return reduction if type(reduction) in (str, int) else None


def l1_loss_backward_get_workspace_size(grad_output: Any, self: Any, target: Any, reduction: Any,
                                        grad_input: Any, *, backend: str | None = None
                                        ) -> tuple[int, Executor]:
    """Phase 1, aclnn-shaped: validate and plan; return (workspace bytes, executor).

    ``executor.run(workspace=None, stream=None)`` then writes ``grad_input``; it
    may be run again, with new buffers of the same metadata passed by name
    (``run(grad_output=..., self=..., target=..., grad_input=...)``).
    """
    return _op.get_workspace_size((grad_output, self, target, reduction), (grad_output, self, target),
                                  _reduction_key(reduction), grad_input, backend)


def l1_loss_backward(grad_output: Any, self: Any, target: Any, reduction: Any = "mean", *,
                     out: Any = None, backend: str | None = None) -> Any:
    """Gradient of ``l1_loss(self, target, reduction)`` with respect to ``self``.

    The inputs broadcast to B (up to 8 dims); ``grad_output`` is usually a 0-d
    tensor for "mean" and "sum". The result is ``sign(self - target) *
    grad_output`` (times 1/d0/d1/... in float32 for "mean"), computed in float32
    (float64 when an input is float64) and rounded once, to nearest even, to the
    output dtype. Returns ``out`` (any float dtype; written in place) or a new
    array/tensor of dtype P and the kind of ``self``.
    """
    if isinstance(grad_output, np.generic):   # the README's np.float32(1.0): its 0-d array, which
        grad_output = np.asarray(grad_output)  # as_tensor reads it as, and the fast path can key on
    return _op.call((grad_output, self, target, reduction), (grad_output, self, target),
                    _reduction_key(reduction), out, backend)
