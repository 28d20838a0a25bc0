"""padloss's Numba CPU backend: parallel JIT kernels, bit-faithful to the Ascend numerics."""
from .backend import NumbaBackend

backend = NumbaBackend()

__all__ = ["NumbaBackend", "backend"]
