"""Optional: the native aclnnCircularPad2dBackward, called through CANN's op library.

torch_npu exposes no circular-pad backward. When CANN's op-API library
(``libopapi.so``) can be loaded and exports the op, the Ascend backend calls
it directly through ctypes, building the aclTensor descriptors as torch_npu
does (sizes, strides, storage offset, the storage as one flat ND block).
Without the library, for negative pads, or past the kernel's width limit, the
device-generic torch ops run instead. This path has never run on hardware:
the ``ascend_aclnn`` setting (``PADLOSS_ASCEND_ACLNN=0``) keeps every call on
the torch-ops path.
"""
from __future__ import annotations

import ctypes
import functools
import os
from ctypes import POINTER, c_int, c_int64, c_uint64, c_void_p
from typing import Any

import torch

from padloss import torch_compat
from padloss.config import current as settings
from padloss.errors import BackendError
from padloss.problem import Problem
from padloss_torch.buffers import on_stream

from .availability import CANN_HOME_VARS

OP = "circular_pad2d_backward"
OP_LIBRARY = "libopapi.so"
# The fused kernel holds a padded row on chip: W' must stay below these (spec).
WIDTH_LIMIT = {"float16": 16362, "bfloat16": 16362, "float32": 24544}
ACL_DTYPE = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 27}   # aclDataType
ACL_FORMAT_ND = 2                                                        # aclFormat

_INT64S = POINTER(c_int64)
# name: (restype, argtypes), as declared in CANN's aclnn headers
SIGNATURES = {
    "aclCreateTensor": (c_void_p, [_INT64S, c_uint64, c_int, _INT64S, c_int64, c_int, _INT64S,
                                   c_uint64, c_void_p]),
    "aclDestroyTensor": (c_int, [c_void_p]),
    "aclCreateIntArray": (c_void_p, [_INT64S, c_uint64]),
    "aclDestroyIntArray": (c_int, [c_void_p]),
    "aclnnCircularPad2dBackwardGetWorkspaceSize": (c_int, [c_void_p, c_void_p, c_void_p, c_void_p,
                                                           POINTER(c_uint64), POINTER(c_void_p)]),
    "aclnnCircularPad2dBackward": (c_int, [c_void_p, c_uint64, c_void_p, c_void_p]),
}


def library_candidates() -> list[str]:
    """The toolkit's copy first, then whatever the dynamic loader finds."""
    return [os.path.join(os.environ[v], "lib64", OP_LIBRARY) for v in CANN_HOME_VARS
            if os.environ.get(v)] + [OP_LIBRARY]


def typed(lib: Any) -> Any:
    """``lib`` with every function of :data:`SIGNATURES` typed; AttributeError if one is missing."""
    for name, (restype, argtypes) in SIGNATURES.items():
        function = getattr(lib, name)
        function.restype, function.argtypes = restype, argtypes
    return lib


def op_library() -> Any | None:
    """CANN's op-API library, typed, or None: switched off (the ``ascend_aclnn``
    setting), not found, or without the op."""
    return _load_op_library() if settings.ascend_aclnn else None


@functools.cache
def _load_op_library() -> Any | None:
    for path in library_candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        try:
            return typed(lib)
        except AttributeError:   # a CANN release without this op
            return None
    return None


def native_kernel_fits(problem: Problem) -> bool:
    """Non-negative pads (negative ones are unverified on the NPU) and a padded row
    narrower than the kernel's on-chip buffer."""
    grad_output = problem.tensors[0]
    return min(problem.params) >= 0 and grad_output.shape[-1] < WIDTH_LIMIT[grad_output.dtype]


def acl_tensor(lib: Any, t: torch.Tensor) -> int:
    """An aclTensor describing ``t`` in place: its view over the whole storage."""
    storage = t.untyped_storage()
    dims = (c_int64 * t.dim())(*t.shape)
    strides = (c_int64 * t.dim())(*t.stride())
    storage_dims = (c_int64 * 1)(storage.nbytes() // t.element_size())
    handle = lib.aclCreateTensor(dims, t.dim(), ACL_DTYPE[t.dtype], strides, t.storage_offset(),
                                 ACL_FORMAT_ND, storage_dims, 1, storage.data_ptr())
    if not handle:
        raise BackendError(f"{OP}: aclCreateTensor failed for a {tuple(t.shape)} {t.dtype} tensor")
    return handle


def check(status: int, function: str) -> None:
    if status != 0:
        raise BackendError(f"{OP}: {function} returned aclnn status {status}")


def raw_stream(device: torch.device, stream: Any) -> int:
    """The aclrtStream behind ``stream`` (torch_npu's ``Stream.npu_stream``), or the current one's."""
    if stream is None:
        stream = torch_compat.device_module(device.type).current_stream(device)
    return stream.npu_stream


def call_circular_pad2d_backward(lib: Any, grad_output: torch.Tensor, grad_input: torch.Tensor,
                                 padding: tuple[int, ...], stream: int) -> None:
    """aclnn's two phases on ``stream``. ``self`` is described by grad_input (same shape and
    dtype; the op never reads its data). The op's scratch comes from torch's allocator on
    the current stream, so it outlives the queued kernel; nothing waits for the kernel."""
    tensors, pads = [], None
    try:
        for t in (grad_output, grad_input, grad_input):
            tensors.append(acl_tensor(lib, t))
        go, self_, gi = tensors
        pads = lib.aclCreateIntArray((c_int64 * 4)(*padding), 4)
        size, executor = c_uint64(0), c_void_p()
        check(lib.aclnnCircularPad2dBackwardGetWorkspaceSize(go, self_, pads, gi, ctypes.byref(size),
                                                             ctypes.byref(executor)),
              "aclnnCircularPad2dBackwardGetWorkspaceSize")
        scratch = torch.empty(size.value, dtype=torch.uint8, device=grad_input.device)
        check(lib.aclnnCircularPad2dBackward(scratch.data_ptr() if size.value else None, size.value,
                                             executor, stream),
              "aclnnCircularPad2dBackward")
    finally:
        if pads:
            lib.aclDestroyIntArray(pads)
        for handle in tensors:
            lib.aclDestroyTensor(handle)


class AclnnCircularPadPlan:
    """The native kernel for one Problem; ``run`` launches it on the caller's stream."""

    workspace_size = 0   # the op's own scratch is taken from torch's allocator per run

    def __init__(self, problem: Problem, lib: Any):
        self._lib = lib
        self._padding = problem.params

    def run(self, buffers: tuple, workspace, stream) -> None:
        grad_output, grad_input = buffers
        with on_stream(grad_input.device, stream):
            call_circular_pad2d_backward(self._lib, grad_output, grad_input, self._padding,
                                         raw_stream(grad_input.device, stream))
