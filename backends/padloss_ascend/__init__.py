"""padloss's Ascend NPU path through torch_npu, and the same torch code for any device.

Two backends share the device-generic torch-ops plans: ``ascend`` (NPU tensors,
with native CANN kernels where they can be reached) and ``torch`` (CUDA
tensors automatically, CPU data on request). Importing this package imports
neither torch nor torch_npu.
"""
from .ascend_backend import AscendBackend
from .torch_backend import TorchBackend

backend = AscendBackend()
torch_backend = TorchBackend()

__all__ = ["AscendBackend", "TorchBackend", "backend", "torch_backend"]
