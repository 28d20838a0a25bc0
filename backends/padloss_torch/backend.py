"""The ``torch`` backend: the device-generic torch-ops path, on any device torch runs on.

Chosen automatically for CUDA tensors. For CPU data only when asked for
(``backend="torch"``): the Numba backend computes the same bits there, faster.
Importing this module does not import torch; each op's plan module (which
does) is imported on the first compile.
"""
from __future__ import annotations

from padloss.backend import Backend
from padloss.problem import Problem

from .availability import torch_availability


def negative_strides(problem: Problem) -> bool:
    return any(s < 0 for t in problem.tensors for s in t.strides)


class TorchBackend(Backend):
    # devices: where automatic selection sends data; supports() takes any device asked by name
    name, priority, devices = "torch", 10, frozenset({"cuda"})
    plans = {"circular_pad2d_backward": "padloss_torch.pad:plan_for",
             "l1_loss_backward": "padloss_torch.l1:plan_for",
             ("circular_pad2d_backward", "arch35-simt"): "padloss_torch.pad:plan_for",
             ("l1_loss_backward", "op-api"): "padloss_torch.l1:plan_for"}

    def availability(self) -> tuple[bool, str]:
        return torch_availability()

    def refuses(self, problem: Problem) -> str | None:
        if problem.device_type == "cpu" and negative_strides(problem):
            return "torch cannot view NumPy arrays with negative strides without a copy"
        return None

