"""``padloss.torch.patch()``: padloss's backward under unmodified model code.

The switch is Liger Kernel's: ``torch.nn.functional.pad`` and ``l1_loss``, which
``nn.CircularPad2d``, ``nn.Conv2d(padding_mode="circular")`` and ``nn.L1Loss``
call, are replaced by versions that send what padloss takes to
:mod:`padloss.torch.functional` and everything else, unchanged, to the function
that was there before: other modes, 1-D and 3-D circular pads, unsupported
dtypes, calls that need no gradient, tensor subclasses, legacy arguments, and
calls padloss's rules refuse but torch allows (a pad equal to the size), so
those stay torch's in the forward and the backward. Code that bound the
functions before patching (``from torch.nn.functional import pad``) is not
reached. The patch is process-wide; nested patches are counted.
"""
from __future__ import annotations

import threading

import torch
import torch.nn.functional as F

from padloss import l1_loss as l1_rules
from padloss.errors import PadlossError

from . import functional

_lock = threading.Lock()
_replaced: dict[str, object] = {}   # name -> what F held before patching; empty when unpatched
_depth = 0


def _grad_wanted(*tensors) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def _padloss_pads(input, pad) -> tuple | None:
    """The pads padloss takes this F.pad call with, or None to leave it to torch."""
    if not isinstance(input, torch.Tensor) or torch.overrides.has_torch_function_unary(input):
        return None
    if len(pad) != 4 or input.dim() not in (3, 4) or not _grad_wanted(input):
        return None
    try:
        pads = functional.pad_values(pad)
        functional.check_circular_pad2d(input, pads)
    except PadlossError:
        return None
    return pads


def pad(input, pad, mode="constant", value=None):
    """torch.nn.functional.pad; circular 2-D pads that need a gradient take padloss's backward."""
    if mode == "circular" and value is None:
        pads = _padloss_pads(input, pad)
        if pads is not None:
            return functional.circular_pad2d(input, pads)
    return _replaced["pad"](input, pad, mode, value)


def _padloss_takes_l1(input, target, reduction) -> bool:
    if not (isinstance(input, torch.Tensor) and isinstance(target, torch.Tensor)):
        return False
    if torch.overrides.has_torch_function_variadic(input, target):
        return False
    if reduction not in tuple(l1_rules.REDUCTIONS) or not _grad_wanted(input, target):
        return False
    try:
        functional.check_l1_loss(input, target)
    except PadlossError:
        return False
    return True


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    """torch.nn.functional.l1_loss; calls that need a gradient take padloss's backward."""
    if size_average is None and reduce is None and weight is None and \
            _padloss_takes_l1(input, target, reduction):
        return functional.l1_loss(input, target, reduction)
    extra = {} if weight is None else {"weight": weight}
    return _replaced["l1_loss"](input, target, size_average, reduce, reduction, **extra)


_PATCHED = {"pad": pad, "l1_loss": l1_loss}


class Patch:
    """What :func:`patch` returns: leaving its ``with`` block undoes that patch."""

    def __init__(self):
        self._active = True

    def __enter__(self) -> "Patch":
        return self

    def __exit__(self, *exc_info) -> None:
        if self._active:
            self._active = False
            _release()


def patch() -> Patch:
    """Route F.pad's circular 2-D pads and F.l1_loss through padloss's backward.

    Use as ``with padloss.torch.patch(): ...`` (undone when the block exits,
    also on an exception), or call it and later :func:`unpatch`.
    """
    global _depth
    with _lock:
        if _depth == 0:
            for name, replacement in _PATCHED.items():
                _replaced[name] = getattr(F, name)
                setattr(F, name, replacement)
        _depth += 1
    return Patch()


def _release() -> None:
    global _depth
    with _lock:
        if _depth == 1:
            _restore()
        _depth = max(_depth - 1, 0)


def _restore() -> None:
    for name, original in _replaced.items():
        setattr(F, name, original)
    _replaced.clear()


def unpatch() -> None:
    """Undo every active patch: torch.nn.functional holds exactly what it held before."""
    global _depth
    with _lock:
        if _depth:
            _restore()
        _depth = 0


def is_patched() -> bool:
    return _depth > 0
