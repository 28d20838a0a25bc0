"""padloss's ``ascend`` backend: torch tensors on an Ascend NPU, through torch_npu.

Native CANN kernels where they can be reached, else the device-generic plans of
the ``torch`` backend (padloss_torch). Importing this package imports neither
torch nor torch_npu.
"""
from .ascend_backend import AscendBackend

backend = AscendBackend()

__all__ = ["AscendBackend", "backend"]
