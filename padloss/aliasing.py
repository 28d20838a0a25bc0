"""The rules that an output shares no memory with an input, and a workspace with
neither, for every checker.

The kernels read the inputs while they write the output and their scratch, so
an alias would be silently wrong (and the Numba bodies are compiled on the
promise that there is none: padloss_numba.noalias). Full validation
(padloss.op), the fast path's per-call check (padloss.fastpath) and an
executor's new buffers and workspace (padloss.executor) all apply these
functions; this module imports nothing of theirs, so none of them import each
other for it.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .arrays import Tensor, overlaps
from .errors import invalid_argument


def check_output_overlap(op: str, names: Sequence[str], tensors: Sequence[Tensor]) -> None:
    """The output (last) must not share memory with any input (the others)."""
    out = tensors[-1]
    for name, t in zip(names[:-1], tensors[:-1]):
        if overlaps(out, t):
            raise invalid_argument(op, names[-1], f"shares memory with '{name}'; the output must "
                                                  f"not overlap an input")


def check_workspace_overlap(op: str, names: Sequence[str], tensors: Sequence[Tensor],
                            workspace: np.ndarray) -> None:
    """A caller's CPU workspace must not share memory with any of the call's tensors."""
    for name, t in zip(names, tensors):
        if t.device == "cpu" and np.may_share_memory(workspace, t.native):
            raise invalid_argument(op, "workspace", f"shares memory with '{name}'; the workspace "
                                                    f"must be a buffer of its own")
