"""padloss's ``torch`` backend: the spec's numerics in plain torch ops, on any
device torch runs on (CUDA tensors automatically, CPU data on request).

The Ascend backend builds on these plans where no native CANN kernel can take
a call. Importing this package does not import torch.
"""
from .backend import TorchBackend

backend = TorchBackend()

__all__ = ["TorchBackend", "backend"]
