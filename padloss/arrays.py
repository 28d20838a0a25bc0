"""Reading user arrays as metadata plus a zero-copy native view.

padloss accepts NumPy arrays, torch tensors (CPU and device) and any CPU array
that speaks DLPack. Everything downstream sees a :class:`Tensor`: hashable
metadata (:class:`TensorMeta`) for validation and the plan cache, and the
native object a backend computes on. CPU data becomes a NumPy view of the same
memory (torch bfloat16 included), so outputs are written in place and nothing
is copied. torch is never imported here: a torch tensor is recognised by its
class's module, which is only possible once the caller has imported torch.
"""
from __future__ import annotations

import sys
from typing import Any, NamedTuple

import numpy as np

from .errors import invalid_argument


class TensorMeta(NamedTuple):
    """What a plan may depend on: dtype name, shape and strides in elements."""

    dtype: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


_make_meta = TensorMeta._make   # skips NamedTuple.__new__'s argument parsing on the hot path


class Tensor(NamedTuple):
    """A user argument as padloss sees it."""

    meta: TensorMeta
    device: str          # "cpu", "cuda:0", "npu:0", ...
    native: Any          # NumPy view for CPU data, the torch tensor for device data
    original: Any        # what the user passed (returned back as the result)


_make_tensor = Tensor._make


def _is_torch_tensor(obj: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


_dtype_names: dict[np.dtype, str] = {}


def _dtype_name(dtype: np.dtype) -> str:
    """dtype.name, memoised: NumPy computes it in Python on every access (~2 us)."""
    name = _dtype_names.get(dtype)
    return name if name is not None else _dtype_names.setdefault(dtype, dtype.name)


def _numpy_meta(op: str, name: str, arr: np.ndarray) -> TensorMeta:
    dtype = arr.dtype
    if not dtype.isnative:
        raise invalid_argument(op, name, f"dtype {dtype.str} is not in the machine's byte order; "
                                         f"convert it first (arr.astype(arr.dtype.newbyteorder('=')))")
    dtype_name = _dtype_name(dtype)
    itemsize = dtype.itemsize
    byte_strides = arr.strides
    strides = tuple([s // itemsize for s in byte_strides])
    # Floor division leaves remainders >= 0, so the sums agree only if all are 0.
    if sum(byte_strides) != itemsize * sum(strides):
        raise invalid_argument(op, name, f"strides {byte_strides} (bytes) are not multiples of "
                                         f"the item size {itemsize}")
    return _make_meta((dtype_name, arr.shape, strides))


def torch_cpu_view(op: str, name: str, t: Any) -> np.ndarray:
    """NumPy view of a CPU tensor's memory; bfloat16 goes through an int16 view."""
    torch = sys.modules["torch"]   # imported by the caller, or t would not be a tensor
    if t.requires_grad:
        t = t.detach()
    try:
        if t.dtype is torch.bfloat16:
            return t.view(torch.int16).numpy().view(numpy_dtype("bfloat16"))
        return t.numpy()
    except (TypeError, RuntimeError) as exc:
        raise invalid_argument(op, name, f"cannot view this tensor's memory without a copy ({exc})") \
            from exc


def as_tensor(op: str, name: str, obj: Any, *, writable: bool = False) -> Tensor:
    """Adapt one user argument; ``writable`` is for outputs (no copy may stand in)."""
    if type(obj) is np.ndarray:
        arr = obj
    elif _is_torch_tensor(obj):
        if obj.device.type != "cpu":
            meta = TensorMeta(str(obj.dtype).removeprefix("torch."), tuple(obj.shape), tuple(obj.stride()))
            return Tensor(meta, str(obj.device), obj, obj)
        arr = torch_cpu_view(op, name, obj)
    elif isinstance(obj, np.ndarray):
        arr = obj.view(np.ndarray)
    elif isinstance(obj, np.generic) and not writable:
        arr = np.asarray(obj)
    elif hasattr(obj, "__dlpack__"):
        try:
            arr = np.from_dlpack(obj)
        except (TypeError, ValueError, RuntimeError, BufferError) as exc:
            raise invalid_argument(op, name, f"a DLPack array must live in CPU memory ({exc})") from exc
    else:
        raise invalid_argument(op, name, f"must be a NumPy array, a torch tensor or a DLPack array, "
                                         f"not {type(obj).__name__}")
    if writable and not arr.flags.writeable:
        raise invalid_argument(op, name, "is read-only; the output must be writable")
    return _make_tensor((_numpy_meta(op, name, arr), "cpu", arr, obj))


def shape_and_dtype(op: str, name: str, obj: Any) -> tuple[tuple[int, ...], str]:
    """Just the shape and dtype name of an argument whose data is never read."""
    if type(obj) is np.ndarray:
        return obj.shape, _dtype_name(obj.dtype)
    meta = as_tensor(op, name, obj).meta
    return meta.shape, meta.dtype


def empty_like_output(template: Tensor, shape: tuple[int, ...], dtype: str) -> Any:
    """A new output of ``shape``/``dtype`` of the same kind and device as ``template``."""
    original = template.original
    if _is_torch_tensor(original):
        import torch

        return torch.empty(shape, dtype=getattr(torch, dtype), device=original.device)
    return np.empty(shape, dtype=numpy_dtype(dtype))


def numpy_dtype(name: str) -> np.dtype:
    """The NumPy dtype for a padloss dtype name. bfloat16 comes from ml_dtypes,
    imported here on first use: its import alone took 0.9 s (0.7.0), more than
    the rest of a warm first call, and a process without bfloat16 never needs it."""
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def is_bfloat16(dtype: np.dtype) -> bool:
    """Whether a NumPy dtype is ml_dtypes' bfloat16, without importing ml_dtypes
    (where it is not imported, no array can have that dtype)."""
    return _dtype_name(dtype) == "bfloat16"


def overlaps(a: Tensor, b: Tensor) -> bool:
    """Whether two CPU tensors may share memory (bounds check, no exact solve)."""
    if a.device != "cpu" or b.device != "cpu":
        return False
    return bool(np.may_share_memory(a.native, b.native))
