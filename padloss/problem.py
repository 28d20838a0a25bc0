"""The Problem: everything phase 1 learned about a call, as hashable metadata.

A Problem holds no data and no reference to a user array, so it can key the
plan cache and be handed to any backend. Each op builds its Problem in its own
validation module; backends read it and never see the user's arguments.
"""
from __future__ import annotations

from typing import NamedTuple

from .arrays import TensorMeta


class Problem(NamedTuple):
    op: str                          # "circular_pad2d_backward" or "l1_loss_backward"
    device: str                      # where the data lives: "cpu", "npu:0", "cuda:0"
    tensors: tuple[TensorMeta, ...]  # the buffers the kernel touches, in aclnn order, output last
    params: tuple                    # op parameters: padding (l, r, t, b), or (reduction,)
    numerics: str = "spec"           # the numerics model of the call's target (padloss.npu_targets)

    @property
    def device_type(self) -> str:
        return self.device.partition(":")[0]

    @property
    def output(self) -> TensorMeta:
        return self.tensors[-1]

    @property
    def is_empty(self) -> bool:
        """Nothing to compute: the output holds no element (phase 2 launches nothing)."""
        return self.output.size == 0
