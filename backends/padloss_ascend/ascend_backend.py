"""The ``ascend`` backend: torch tensors on an Ascend NPU, through torch_npu.

Chosen automatically for ``npu`` tensors. Which plan runs each op (a native
CANN kernel when one can be reached, else the device-generic torch ops) is
decided in :mod:`padloss_ascend.npu`, imported with torch on the first compile;
importing this module imports neither torch nor torch_npu.
"""
from __future__ import annotations

from padloss import rules
from padloss.backend import Backend
from padloss.problem import Problem

from .availability import ascend_availability


class AscendBackend(Backend):
    name, priority, devices = "ascend", 100, frozenset({"npu"})
    plans = {"circular_pad2d_backward": "padloss_ascend.npu:circular_pad_plan",
             "l1_loss_backward": "padloss_ascend.npu:l1_plan",
             # an Ascend 950's own kernel, or the torch ops of its model (padloss_torch.pad)
             ("circular_pad2d_backward", "arch35-simt"): "padloss_ascend.npu:circular_pad_plan",
             # the device's own op_api (torch_npu's native op), or the torch ops of its model
             ("l1_loss_backward", "op-api"): "padloss_ascend.npu:l1_plan"}

    def availability(self) -> tuple[bool, str]:
        return ascend_availability()

    def device_soc(self, device: str) -> str | None:
        """torch_npu's name of the NPU's SoC ("Ascend910B3", ...); torch_npu is imported
        wherever an npu tensor exists."""
        import torch

        index = device.partition(":")[2]
        return torch.npu.get_device_name(int(index) if index else None)

    def refuses(self, problem: Problem) -> str | None:
        if problem.device_type != "npu":
            return f"computes on NPU tensors only, the data is on {problem.device}"
        for t in problem.tensors:
            if t.dtype in rules.FLOATS and t.dtype not in rules.NPU_FLOATS:
                return (f"{t.dtype} is a CPU extension; the Ascend kernels take "
                        f"{', '.join(rules.NPU_FLOATS[:-1])} and {rules.NPU_FLOATS[-1]}")
        return None

