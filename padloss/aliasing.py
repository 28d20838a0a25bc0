"""The rule that an output shares no memory with an input, for every checker.

The kernels read the inputs while they write the output, so an alias would be
silently wrong. Full validation (padloss.op), the fast path's per-call check
(padloss.fastpath) and an executor's new buffers (padloss.executor) all apply
this one function; it imports nothing of theirs, so none of them import each
other for it.
"""
from __future__ import annotations

from typing import Sequence

from .arrays import Tensor, overlaps
from .errors import invalid_argument


def check_output_overlap(op: str, names: Sequence[str], tensors: Sequence[Tensor]) -> None:
    """The output (last) must not share memory with any input (the others)."""
    out = tensors[-1]
    for name, t in zip(names[:-1], tensors[:-1]):
        if overlaps(out, t):
            raise invalid_argument(op, names[-1], f"shares memory with '{name}'; the output must "
                                                  f"not overlap an input")
