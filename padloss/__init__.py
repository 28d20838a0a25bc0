"""padloss: the backward of 2-D circular padding and of the L1 loss, as Ascend
CANN defines them (aclnnCircularPad2dBackward, aclnnL1LossBackward), on the CPU
through Numba and on the Ascend NPU through torch_npu.

Each op has a one-shot call and an aclnn-shaped two-phase form: phase 1
(``*_get_workspace_size``) validates, picks a backend and fetches a cached
plan; phase 2 (``executor.run()``) computes, and may be repeated.
"""
from . import config
from .backend import Backend
from .circular_pad import circular_pad2d_backward, circular_pad2d_backward_get_workspace_size
from .dispatch import BackendInfo, available_backends, use_backend
from .errors import BackendError, InvalidArgumentError, NullArgumentError, PadlossError, Status
from .executor import Executor
from .l1_loss import l1_loss_backward, l1_loss_backward_get_workspace_size
from .npu_targets import Target, targets
from .plan_cache import plan_cache
from .warmup import warmup

__version__ = "0.1.0"

__all__ = [
    "Backend", "BackendError", "BackendInfo", "Executor", "InvalidArgumentError",
    "NullArgumentError", "PadlossError", "Status", "__version__", "available_backends", "config",
    "circular_pad2d_backward", "circular_pad2d_backward_get_workspace_size",
    "l1_loss_backward", "l1_loss_backward_get_workspace_size", "plan_cache", "Target", "targets",
    "use_backend", "warmup",
]
