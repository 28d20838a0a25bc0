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

from .arrays import TensorMeta, as_tensor, empty_like_output, numpy_dtype, shape_and_dtype
from .errors import invalid_argument, null_argument
from .executor import Executor
from .fastpath import BUFFER, VALUE, Prepared
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


PYTHON_SCALARS = (float, int)   # by exact type: a bool is refused, as any non-array is


def scalar_dtype(self_dtype: str, target_dtype: str) -> str:
    """The dtype a Python float or int grad_output takes: P of self and target
    (float32 when neither is a float). It is a weak scalar, as in torch: it adopts
    the others' dtype and never promotes them."""
    return promoted_dtype((self_dtype, target_dtype)) or "float32"


def _scalar_value(value: float | int) -> float:
    try:
        return float(value)
    except OverflowError:
        raise invalid_argument(OP, "grad_output", "a Python int past a float's range (1.8e308)") from None


def _rounded(value: float, dtype: np.dtype) -> np.ndarray:
    """``value`` as a 0-d array of ``dtype``, rounded once (to nearest even; past the
    dtype's range: infinity, as a cast gives)."""
    if abs(value) <= _largest(dtype):   # NumPy warns of an overflow: errstate costs ~1 us
        return np.asarray(value, dtype)
    with np.errstate(over="ignore"):
        return np.asarray(value, dtype)


_largest_finite: dict[np.dtype, float] = {}


def _largest(dtype: np.dtype) -> float:
    largest = _largest_finite.get(dtype)
    if largest is None:
        largest = _largest_finite[dtype] = float(np.finfo(dtype).max)
    return largest


_scalar_dtypes: dict[tuple, np.dtype] = {}


def _numpy_scalar_dtype(self: np.ndarray, target: np.ndarray) -> np.dtype:
    """scalar_dtype of two NumPy arrays, memoised (the names cost ~2 us a call)."""
    key = (self.dtype, target.dtype)
    dtype = _scalar_dtypes.get(key)
    if dtype is None:
        names = [shape_and_dtype(OP, name, a)[1] for name, a in (("self", self), ("target", target))]
        dtype = _scalar_dtypes[key] = numpy_dtype(scalar_dtype(*names))
    return dtype


def _grad_output_array(grad_output: Any, self: Any, target: Any) -> Any:
    """A NumPy scalar grad_output as its 0-d array, and a Python float or int as the
    0-d array of scalar_dtype() where self and target are NumPy arrays: the forms the
    fast path can key on (padloss.fastpath). Anything else is left to validation."""
    if type(grad_output) is np.ndarray:   # the common case, asked first
        return grad_output
    if isinstance(grad_output, np.generic):
        return np.asarray(grad_output)
    if type(grad_output) in PYTHON_SCALARS and type(self) is np.ndarray and type(target) is np.ndarray:
        return _rounded(_scalar_value(grad_output), _numpy_scalar_dtype(self, target))
    return grad_output


def _validate_inputs(grad_output: Any, self: Any, target: Any, reduction: Any) -> Inputs:
    """Check the inputs: them adapted, B and P for the output, the reduction code."""
    for name, value in zip(INPUTS, (grad_output, self, target)):
        if value is None:
            raise null_argument(OP, name)
    code = reduction_code(reduction)
    if type(grad_output) in PYTHON_SCALARS:   # a 0-d of the others' dtype, of self's kind and device
        value = _scalar_value(grad_output)
        others = [as_tensor(OP, name, v) for name, v in zip(INPUTS[1:], (self, target))]
        dtype = scalar_dtype(*(t.meta.dtype for t in others))
        rounded = _rounded(value, numpy_dtype(dtype))
        grad_output = empty_like_output(others[0], (), dtype)
        if isinstance(grad_output, np.ndarray):
            grad_output = rounded
        else:                                     # a torch tensor: the rounded value is exact in it
            grad_output.fill_(float(rounded))
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


def _target_terms(inputs: Inputs, out: TensorMeta) -> tuple:
    """What a target checks (padloss.npu_targets.check): P and the output's dtype."""
    return (("self", inputs.dtype), ("out", out.dtype)), {"promoted": inputs.dtype, "outs": (out.dtype,)}


def _memo_params(grad_output: Any, self: Any, target: Any, reduction: Any) -> Any:
    """The memo key's params: reduction when it is a str or an exact int (True == 1 as a key)."""
    return reduction if type(reduction) in (str, int) else None


_op = OpDefinition(OP, BUFFERS, (BUFFER, BUFFER, BUFFER, VALUE), _memo_params, _validate_inputs,
                   _validate_output, _target_terms, adapt=_grad_output_array)


def l1_loss_backward_get_workspace_size(grad_output: Any, self: Any, target: Any, reduction: Any,
                                        grad_input: Any, *, backend: str | None = None,
                                        npu_target: str | None = None) -> tuple[int, Executor]:
    """Phase 1, aclnn-shaped: validate and plan; return (workspace bytes, executor).

    ``executor.run(workspace=None, stream=None)`` then writes ``grad_input``; it
    may be run again, with new buffers of the same metadata passed by name
    (``run(grad_output=..., self=..., target=..., grad_input=...)``).
    """
    grad_output = _grad_output_array(grad_output, self, target)
    return _op.get_workspace_size((grad_output, self, target, reduction), grad_input, backend, npu_target)


def prepare(grad_output: np.ndarray, self: np.ndarray, target: np.ndarray, reduction: int) -> Prepared:
    """The allocating call on these NumPy arrays validated and planned, not run: its
    ``run(grad_output)`` computes it for a new grad_output of the same metadata
    (padloss.torch plans its backward so in the forward)."""
    return _op.prepare((grad_output, self, target, reduction))


# The def gives the signature and the docstring; the body is the op's lane (padloss.fastpath.Lane).
@_op.one_shot_function
def l1_loss_backward(grad_output: Any, self: Any, target: Any, reduction: Any = "mean", *,
                     out: Any = None, backend: str | None = None, npu_target: str | None = None) -> Any:
    """Gradient of ``l1_loss(self, target, reduction)`` with respect to ``self``.

    The inputs broadcast to B (up to 8 dims); ``grad_output`` is usually a 0-d
    tensor for "mean" and "sum" (a Python float or int is one of the dtype P of self
    and target: ``scalar_dtype``). The result is ``sign(self - target) *
    grad_output`` (times 1/d0/d1/... in float32 for "mean"), computed in float32
    (float64 when an input is float64) and rounded once, to nearest even, to the
    output dtype. Returns ``out`` (any float dtype; written in place) or a new
    array/tensor of dtype P and the kind of ``self``. ``npu_target`` names the
    Ascend product whose refusals apply (padloss.npu_targets; None: the ``target`` setting;
    not ``target``, which is aclnn's name for the label).
    """
