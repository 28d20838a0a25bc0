"""The ``torch`` backend: the device-generic torch-ops path, on any device torch runs on.

Chosen automatically for CUDA tensors. For CPU data only when asked for
(``backend="torch"``): the Numba backend computes the same bits there, faster.
Importing this module does not import torch; each op's plan module (which
does) is imported on the first compile.
"""
from __future__ import annotations

import importlib

from padloss.backend import Backend
from padloss.problem import Problem

from .availability import torch_availability

# op -> module of this package whose plan_for(problem) builds its plan
PLAN_MODULES = {
    "circular_pad2d_backward": "pad",
    "l1_loss_backward": "l1",
}


def negative_strides(problem: Problem) -> bool:
    return any(s < 0 for t in problem.tensors for s in t.strides)


class TorchBackend(Backend):
    name = "torch"
    priority = 10
    # Where automatic selection sends data; supports() takes any device when asked by name.
    devices = frozenset({"cuda"})

    def availability(self) -> tuple[bool, str]:
        return torch_availability()

    def supports(self, problem: Problem) -> str | None:
        if problem.op not in PLAN_MODULES:
            return f"does not implement {problem.op}"
        if problem.device_type == "cpu" and negative_strides(problem):
            return "torch cannot view NumPy arrays with negative strides without a copy"
        return None

    def compile(self, problem: Problem):
        module = importlib.import_module(f"{__package__}.{PLAN_MODULES[problem.op]}")
        return module.plan_for(problem)
