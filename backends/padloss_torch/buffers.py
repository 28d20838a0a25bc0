"""The buffers a plan receives, as torch tensors, and the stream the work goes on.

padloss hands a plan native views: the caller's tensors for device data, NumPy
views for CPU data (padloss.arrays). The torch plans compute on tensors, so
CPU views are wrapped back through DLPack: the same memory, so the output is
written in place (padloss.torch_compat.from_numpy). torch cannot read ml_dtypes' bfloat16, which
therefore travels through an int16 view.
"""
from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
import torch

from padloss import torch_compat
from padloss.arrays import is_bfloat16


def as_torch(buffer: Any) -> torch.Tensor:
    """``buffer`` as a tensor sharing its memory (no copy)."""
    if isinstance(buffer, torch.Tensor):
        return buffer
    if is_bfloat16(buffer.dtype):
        return torch_compat.from_numpy(buffer.view(np.int16)).view(torch.bfloat16)
    return torch_compat.from_numpy(buffer)


def on_stream(device: torch.device, stream: Any) -> contextlib.AbstractContextManager:
    """Make ``stream`` (a torch stream of ``device``'s kind, e.g. a torch_npu stream)
    current for the enclosed ops; they are queued on it and nothing waits for them.
    CPU work has no stream: there, and for ``stream=None``, the current one is kept."""
    if stream is None or device.type == "cpu":
        return contextlib.nullcontext()
    return torch_compat.device_module(device.type).stream(stream)
