"""What differs between the torch releases padloss supports (2.1 to 2.14), in one place.

torch_npu ties each of its releases to one torch release, and Ascend machines stay on a
torch for years, so padloss meets every torch from 2.1 on. Each function here is the
public API where the installed torch has it, and its older public equivalent where it
does not. Importing this module imports torch: only torch-facing code does.
"""
from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np
import torch

# PADLOSS_TORCH_MODE=function forces the torch.autograd.Function mode on a torch that has
# custom ops (the tests compare the two modes); read once, when padloss.torch is imported.
MODE_VAR = "PADLOSS_TORCH_MODE"


def version() -> tuple[int, int]:
    """The installed torch's (major, minor)."""
    major, minor = torch.__version__.split(".")[:2]
    return int(major), int(minor)


def custom_ops_missing() -> str | None:
    """Why padloss.torch runs in Function mode here, or None where it gets custom ops.

    ``torch.library.custom_op`` with ``register_fake`` and ``register_autograd`` came in
    torch 2.4; so did ``torch.library.opcheck``."""
    if os.environ.get(MODE_VAR, "").strip().lower() == "function":
        return f"{MODE_VAR}=function"
    if not all(hasattr(torch.library, name) for name in ("custom_op", "register_fake", "opcheck")):
        return f"torch {torch.__version__} has no torch.library.custom_op (it came in torch 2.4)"
    return None


def device_module(device_type: str) -> Any:
    """``torch.cuda``, ``torch.npu`` (torch_npu's), ...: ``torch.get_device_module`` from
    torch 2.3, the attribute of that name before it."""
    if hasattr(torch, "get_device_module"):
        return torch.get_device_module(device_type)
    return getattr(torch, device_type)


def _never_compiling() -> bool:
    return False


is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", _never_compiling)
"""Whether torch.compile is tracing this call: ``torch.compiler.is_compiling`` from
torch 2.3 (itself, looked up once: a tiny L1 forward asks twice, its backward once).
Before it there is no public way to ask, and padloss takes no compile there (its
custom ops, which torch.compile needs, are missing too)."""


def from_numpy(array: np.ndarray) -> torch.Tensor:
    """A tensor sharing ``array``'s memory (read-only arrays too): DLPack, which takes them
    with numpy >= 2 and torch >= 2.4; ``torch.from_numpy`` where DLPack refuses one (it
    warns that the tensor is writable, which padloss never writes through)."""
    try:
        return torch.from_dlpack(array)
    except BufferError:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return torch.from_numpy(array)

