"""padloss inside torch autograd: custom ops, autograd front ends, drop-in
modules, and a patch for unmodified models.

- ``torch.ops.padloss.circular_pad2d_backward`` / ``l1_loss_backward``: the two
  backward kernels as torch custom ops (fake kernels for torch.compile, their
  own gradients for double backward); they run through padloss's dispatcher.
- :func:`circular_pad2d`, :func:`l1_loss`: torch's forward, padloss's backward.
- :class:`CircularPad2d`, :class:`L1Loss`: the same as ``torch.nn`` modules.
- :func:`patch` / :func:`unpatch`: unmodified ``F.pad(mode="circular")``,
  ``nn.CircularPad2d``, ``nn.Conv2d(padding_mode="circular")``, ``F.l1_loss``
  and ``nn.L1Loss`` take padloss's backward; what padloss cannot take stays torch's.

Importing this module imports torch (``import padloss`` alone never does).
"""
try:
    import torch  # noqa: F401  (the point of this module)
except ImportError as exc:   # pragma: no cover - exercised in a fresh interpreter by the tests
    raise ImportError("padloss.torch needs PyTorch: pip install 'padloss[torch]'") from exc

from .functional import circular_pad2d, l1_loss
from .modules import CircularPad2d, L1Loss
from .patching import patch, unpatch

__all__ = ["CircularPad2d", "L1Loss", "circular_pad2d", "l1_loss", "patch", "unpatch"]
