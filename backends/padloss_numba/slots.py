"""Packed int64 arrays that a plan fills and its kernel reads, declared once by name.

A kernel takes its geometry as one int64 array rather than tuples or scalars: Numba
unboxes nested tuple arguments slowly and every argument costs a little on each call.
:class:`Slots` names the array's fields and their widths; the plan packs it by name,
and the kernel reads the fields at the offsets it gives (module constants, which
Numba folds).
"""
from __future__ import annotations

from typing import Iterable

import numpy as np


class Slots:
    """Fields of a packed int64 array, in order: ``Slots(dims=8, block=1)`` puts ``dims``
    at 0..7 and ``block`` at 8. Each field's offset is an attribute (``slots.block == 8``)."""

    def __init__(self, **widths: int):
        self.widths = widths
        offset = 0
        for name, width in widths.items():
            setattr(self, name, offset)
            offset += width
        self.size = offset

    def pack(self, **values: int | Iterable[int]) -> np.ndarray:
        """The array holding every field: an int for a field of width 1, else that many ints."""
        if values.keys() != self.widths.keys():
            raise TypeError(f"fields {sorted(self.widths)} expected, got {sorted(values)}")
        packed = []
        for name, width in self.widths.items():
            value = values[name]
            field = [value] if width == 1 and not isinstance(value, Iterable) else list(value)
            if len(field) != width:
                raise ValueError(f"field {name!r} holds {width} values, got {len(field)}")
            packed += field
        return np.array(packed, np.int64)
