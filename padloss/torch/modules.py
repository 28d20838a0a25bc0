"""``torch.nn`` drop-ins: the same classes (they subclass torch's, so isinstance,
state dicts and reprs are unchanged), with padloss's backward."""
from __future__ import annotations

import torch

from . import functional


class CircularPad2d(torch.nn.CircularPad2d):
    """``nn.CircularPad2d(padding)`` (an int or (left, right, top, bottom)) whose
    backward is padloss's."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        self._check_input_dim(input)
        return functional.circular_pad2d(input, self.padding)


class L1Loss(torch.nn.L1Loss):
    """``nn.L1Loss(reduction="mean")`` whose backward is padloss's."""

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return functional.l1_loss(input, target, self.reduction)
