"""padloss's Numba CPU backend: parallel JIT kernels, bit-faithful to the Ascend numerics."""
from . import disk_cache

disk_cache.install()   # before any kernel is decorated: it picks the cache folder

from .numba_backend import NumbaBackend  # noqa: E402

backend = NumbaBackend()

__all__ = ["NumbaBackend", "backend"]
