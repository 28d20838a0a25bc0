"""padloss's two backward kernels as torch custom ops: ``torch.ops.padloss.*``.

``torch.library.custom_op`` makes them ordinary operators to autograd, torch.compile
(a fake kernel states the result's metadata, so tracing needs no data) and DDP. A
torch without it (before 2.4) gets the same kernels and gradients as
``torch.autograd.Function``s instead ("Function mode": no ``torch.ops.padloss``, no
torch.compile of them; :data:`CUSTOM_OPS_MISSING` says why). The kernel calls
padloss's public API, whose dispatcher picks the backend from where the tensors live:
Numba for CPU tensors (handed over as NumPy views of their memory: zero-copy, any
strides, and padloss's memo of validated signatures applies), ascend for npu, torch
for CUDA. Each op has its own gradient, so double backward works: the pad backward is
linear and its gradient is the circular pad of the incoming gradient; L1's is linear
in grad_output and constant (zero almost everywhere) in input and target.

:func:`pad_backward` and :func:`l1_backward` are what padloss's autograd functions
call: the op where autograd or the compiler must see it (a backward that builds a
graph, torch.compile), the kernel itself otherwise, since a custom op's Python
dispatch costs more than a tiny kernel (measured: about 25 us a call, against 5 us for
padloss's own call).
"""
# No ``from __future__ import annotations``: custom_op reads the kernels' annotations as
# types, and torch 2.4 cannot parse them from strings.
import functools
from typing import Optional, Sequence

import numpy as np
import torch

import padloss
from padloss import arrays, torch_compat
from padloss import l1_loss as l1_rules

from . import torch_functions


def dtype_name(dtype: torch.dtype) -> str:
    """padloss's name for a torch dtype ("float32", "bfloat16", "int64", ...)."""
    return str(dtype).removeprefix("torch.")


def _native(op: str, name: str, t: torch.Tensor):
    """A NumPy view of a CPU tensor's memory; any other tensor as it is."""
    return arrays.torch_cpu_view(op, name, t) if t.is_cpu else t


def _new_result(like: torch.Tensor, shape: Sequence[int], dtype: torch.dtype):
    """A new result tensor on like's device, and what padloss writes it through.

    On the CPU its memory comes from NumPy, which asks for huge pages on large
    arrays where torch's default allocator does not: a large pad's backward ran
    2x faster into it (133 MB, float32, 2 threads).
    """
    if not like.is_cpu:
        result = like.new_empty(shape, dtype=dtype)
        return result, result
    memory = np.empty(shape, arrays.numpy_dtype(dtype_name(dtype)))
    return _from_numpy(memory), memory


def _from_numpy(memory: np.ndarray) -> torch.Tensor:
    """A tensor sharing a NumPy array's memory (bfloat16 too, which torch.from_numpy lacks)."""
    if arrays.is_bfloat16(memory.dtype):
        return torch.from_numpy(memory.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(memory)


def pad_input_shape(grad_output_shape: Sequence[int], padding: Sequence[int]) -> tuple:
    """The forward input's shape, from its padded output's and the pads."""
    left, right, top, bottom = padding
    *leading, height, width = grad_output_shape
    return (*leading, height - top - bottom, width - left - right)


def _pad_kernel(grad_output: torch.Tensor, padding: Sequence[int]) -> torch.Tensor:
    """Gradient of ``F.pad(input, padding, mode="circular")`` with respect to
    input, from the output's gradient alone (the input's shape follows from it)."""
    grad_input, out = _new_result(grad_output, pad_input_shape(grad_output.shape, padding),
                                  grad_output.dtype)
    # self is only read for its shape and dtype, which grad_input has.
    padloss.circular_pad2d_backward(_native(padloss.circular_pad2d_backward.__name__, "grad_output",
                                            grad_output), out, padding, out=out)
    return grad_input


def _pad_setup_context(ctx, inputs, output):
    ctx.padding = inputs[1]


def _pad_backward(ctx, grad):
    return torch_functions.pad(grad, ctx.padding, mode="circular"), None


def _l1_result(grad_output, input, target, dtype) -> tuple[tuple[int, ...], torch.dtype]:
    """The result's shape B and dtype (``dtype``, or else the promoted P)."""
    shape, promoted = l1_rules.check_metadata(
        (dtype_name(t.dtype), t.shape, t.device) for t in (grad_output, input, target))
    return shape, getattr(torch, promoted) if dtype is None else dtype


def _l1_inputs(grad_output, input, target) -> tuple:
    """The three inputs as padloss's l1_loss_backward takes them (see _native)."""
    op = padloss.l1_loss_backward.__name__
    return _native(op, "grad_output", grad_output), _native(op, "self", input), _native(op, "target", target)


def _l1_into(result, out, grad_output, input, target, reduction) -> torch.Tensor:
    padloss.l1_loss_backward(*_l1_inputs(grad_output, input, target), reduction, out=out)
    return result


def _l1_kernel(grad_output: torch.Tensor, input: torch.Tensor, target: torch.Tensor,
               reduction: int, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """Gradient of ``l1_loss(input, target, reduction)`` with respect to input, in the
    broadcast shape of the three, computed in the promoted dtype and rounded once to
    ``dtype`` (default: the promoted dtype). reduction: 0 none, 1 mean, 2 sum."""
    result, out = _new_result(input, *_l1_result(grad_output, input, target, dtype))
    return _l1_into(result, out, grad_output, input, target, reduction)


def _l1_setup_context(ctx, inputs, output):
    grad_output, input, target, reduction = inputs[:4]   # dtype, the fifth, may be left out
    ctx.save_for_backward(input, target)
    ctx.reduction = reduction
    ctx.grad_output_shape, ctx.grad_output_dtype = grad_output.shape, grad_output.dtype


def _l1_backward(ctx, grad):
    """d(result)/d(grad_output) is sign(input - target) times the mean's factor:
    the op itself applied to the incoming gradient, summed back to grad_output's shape."""
    grad_grad_output = None
    if ctx.needs_input_grad[0]:
        input, target = ctx.saved_tensors
        grad_grad_output = (l1_loss_backward(grad, input, target, ctx.reduction)
                            .sum_to_size(ctx.grad_output_shape).to(ctx.grad_output_dtype))
    return grad_grad_output, None, None, None, None


def _pad_fake(grad_output, padding):
    return grad_output.new_empty(pad_input_shape(grad_output.shape, padding))


def _l1_fake(grad_output, input, target, reduction, dtype=None):
    shape, dtype = _l1_result(grad_output, input, target, dtype)
    return input.new_empty(shape, dtype=dtype)


def _custom_op(name: str, kernel, fake, backward, setup_context):
    """``kernel`` as the custom op ``padloss::name``, with its fake kernel and gradient."""
    op = torch.library.custom_op(f"padloss::{name}", kernel, mutates_args=())
    op.register_fake(fake)
    op.register_autograd(backward, setup_context=setup_context)
    return op


def _function(name: str, kernel, backward, setup_context):
    """``kernel`` with the same gradient, as the ``apply`` of a ``torch.autograd.Function``
    called ``name`` (Function mode)."""
    def forward(ctx, *inputs):
        output = kernel(*inputs)
        setup_context(ctx, inputs, output)
        ctx.input_count = len(inputs)
        return output

    def function_backward(ctx, grad):
        return backward(ctx, grad)[:ctx.input_count]   # one gradient an input given

    kind = type(name, (torch.autograd.Function,),
                {"forward": staticmethod(forward), "backward": staticmethod(function_backward)})
    return kind.apply


CUSTOM_OPS_MISSING = torch_compat.custom_ops_missing()   # None: custom ops
if CUSTOM_OPS_MISSING is None:
    circular_pad2d_backward = _custom_op("circular_pad2d_backward", _pad_kernel, _pad_fake, _pad_backward,
                                         _pad_setup_context)
    l1_loss_backward = _custom_op("l1_loss_backward", _l1_kernel, _l1_fake, _l1_backward, _l1_setup_context)
else:
    circular_pad2d_backward = _function("CircularPad2dBackward", _pad_kernel, _pad_backward,
                                        _pad_setup_context)
    l1_loss_backward = _function("L1LossBackward", _l1_kernel, _l1_backward, _l1_setup_context)


SCHEMA_TYPES = {torch.Tensor: "Tensor", Sequence[int]: "int[]", int: "int",
                Optional[torch.dtype]: "ScalarType?"}


def schema_of(kernel) -> str:
    """The op schema of ``kernel``'s annotated signature, as custom_op infers it (torch
    2.1-2.3 have no inference to ask): the kernels' signatures are the one statement of it."""
    import inspect

    params = inspect.signature(kernel).parameters.values()
    args = [f"{SCHEMA_TYPES[p.annotation]} {p.name}" + ("=None" if p.default is None else "") for p in params]
    return f"({', '.join(args)}) -> Tensor"


KERNELS = {"circular_pad2d_backward": _pad_kernel, "l1_loss_backward": _l1_kernel}


def _refusing_library(why: str):
    """``torch.ops.padloss.*`` in Function mode: ops of the same schemas that each raise,
    saying why and what to call instead (torch's own error would only say "no such op")."""
    library = torch.library.Library("padloss", "DEF")
    for name, kernel in KERNELS.items():
        schema = schema_of(kernel)
        def refuse(*args, name=name):
            raise RuntimeError(f"torch.ops.padloss.{name} needs torch's custom ops (torch 2.4 and later); "
                               f"padloss.torch runs in Function mode here ({why}): call "
                               f"padloss.torch.ops.{name}, or padloss.torch's functions and modules")
        library.define(name + schema)
        library.impl(name, refuse, "CompositeImplicitAutograd")
    return library


_refusing = None if CUSTOM_OPS_MISSING is None else _refusing_library(CUSTOM_OPS_MISSING)


# The most elements of an input whose L1 backward is planned in its forward: the NumPy views
# the plan holds keep input and target alive as long as the graph, past the backward.
PREPARED_MAX_ELEMENTS = 1 << 16


def prepare_l1_backward(input: torch.Tensor, target: torch.Tensor, reduction: int,
                        loss: torch.Tensor) -> Optional[l1_rules.Prepared]:
    """In a forward of small CPU tensors, its backward's padloss call for input's gradient
    in the promoted dtype (what :func:`l1_backward` makes when ``dtype`` is None),
    validated and planned on NumPy views of input and target, to be run by
    :func:`run_prepared_l1`: a tiny backward then views only the gradient (~2 us of ~4)
    and reruns the plan the last such backward ran (padloss.fastpath.Prepared). None where
    there is nothing to gain or the views cannot be made."""
    if (not (input.is_cpu and target.is_cpu) or input.numel() > PREPARED_MAX_ELEMENTS
            or target.numel() > PREPARED_MAX_ELEMENTS or torch_compat.is_compiling()):
        return None
    op = padloss.l1_loss_backward.__name__
    try:
        views = _native(op, "self", input), _native(op, "target", target)
    except padloss.PadlossError:   # the backward's own call will say why
        return None
    grad = np.empty(() if reduction else loss.shape, _numpy_dtype(loss.dtype))
    return l1_rules.prepare(grad, *views, reduction)


@functools.lru_cache(maxsize=None)
def _numpy_dtype(dtype: torch.dtype) -> np.dtype:
    return arrays.numpy_dtype(dtype_name(dtype))


def run_prepared_l1(prepared: l1_rules.Prepared, grad: torch.Tensor) -> Optional[torch.Tensor]:
    """The gradient :func:`prepare_l1_backward` planned, for the incoming ``grad`` (which
    autograd's engine hands over in the loss's dtype, on its device); None where the call
    must be seen (see :func:`l1_backward`) or grad is not as planned."""
    if not _direct():
        return None
    result = prepared.run(_gradient_array(grad, prepared.first_dtype))
    return None if result is None else _from_numpy(result)


def _gradient_array(grad: torch.Tensor, dtype: np.dtype) -> np.ndarray:
    """The incoming gradient of a CPU loss, of NumPy dtype ``dtype``, as NumPy: a 0-d one
    (mean, sum) as a new 0-d array of its value, read with ``item()`` (exact: a float64
    holds every value of every float dtype; a view of its memory costs two to four times
    as much, bfloat16's the most: docs/performance.md); a NaN, whose payload a float64
    need not keep, and a gradient with dims, as a view of its memory."""
    if grad.dim() == 0:
        value = grad.item()
        if value == value:
            return np.asarray(value, dtype)
    return _native(padloss.l1_loss_backward.__name__, "grad_output", grad)


def _direct() -> bool:
    """Whether a call may skip the op: no graph is being built, nothing traces it."""
    return not torch.is_grad_enabled() and not torch_compat.is_compiling()


def pad_backward(grad_output: torch.Tensor, padding: Sequence[int]) -> torch.Tensor:
    """``torch.ops.padloss.circular_pad2d_backward``, or its kernel where nothing must see the op."""
    return (_pad_kernel if _direct() else circular_pad2d_backward)(grad_output, padding)


def l1_backward(grad_output: torch.Tensor, input: torch.Tensor, target: torch.Tensor,
                reduction: int, dtype: Optional[torch.dtype], shape: Sequence[int]) -> torch.Tensor:
    """``torch.ops.padloss.l1_loss_backward``, or its kernel where nothing must see the op
    (given B, the result's shape, which the caller's forward already checked).

    dtype None means the promoted dtype: padloss then allocates the result
    itself (a NumPy array for CPU tensors, shared with the tensor returned), and
    a repeated call skips the checks of a given output (its writability, its
    overlap with the inputs; ~1.5 us of a tiny call)."""
    if not _direct():
        return l1_loss_backward(grad_output, input, target, reduction, dtype)
    if dtype is None:
        result = padloss.l1_loss_backward(*_l1_inputs(grad_output, input, target), reduction)
        return _from_numpy(result) if isinstance(result, np.ndarray) else result
    return _l1_into(*_new_result(input, shape, dtype), grad_output, input, target, reduction)
