"""Where each padded position comes from, per axis, for circular padding.

Shared by the validation (which bounds the pads) and by every backend (which
turns it into loops or tensor slices). Negative pads crop first, then the
cropped range wraps around, with PyTorch's ``F.pad(mode="circular")`` meaning.
"""
from __future__ import annotations

from typing import NamedTuple


class CircularAxis(NamedTuple):
    """One padded axis: input size, cropped range, and the wrapped bands.

    Input index ``crop + c`` (``0 <= c < kept``) receives the gradient of
    output ``before + c`` (centre), of ``before + c - kept`` when
    ``c >= kept - before`` (the band padded before the data wraps to the end),
    and of ``before + c + kept`` when ``c < after`` (the band after wraps to
    the start). Input indices outside the kept range were cropped: gradient 0.
    """

    size: int     # input extent S
    crop: int     # first kept input index: max(-pad_before, 0)
    kept: int     # kept extent after cropping
    before: int   # wrapped band before the data: max(pad_before, 0)
    after: int    # wrapped band after the data: max(pad_after, 0)

    @property
    def padded(self) -> int:
        return self.before + self.kept + self.after


def circular_axis(size: int, pad_before: int, pad_after: int) -> CircularAxis:
    crop = max(-pad_before, 0)
    kept = size - crop - max(-pad_after, 0)
    return CircularAxis(size, crop, kept, max(pad_before, 0), max(pad_after, 0))


def axis_rule_violation(size: int, pad_before: int, pad_after: int) -> str | None:
    """Why (size, pads) is not a valid circular padding, or None if it is.

    The documented Ascend bound is ``pad < size``; negative pads follow
    PyTorch: the padded size stays >= 1 and a positive pad wraps at most once
    around the cropped extent. Not cached: torch.compile traces it with
    symbolic sizes (repeated array calls skip validation through padloss.fastpath).
    """
    if size + pad_before + pad_after < 1:
        return f"the padded size {size} + {pad_before} + {pad_after} must be >= 1"
    for pad, other in ((pad_before, pad_after), (pad_after, pad_before)):
        if pad >= size:
            return f"pad {pad} must be smaller than the input size {size}"
        if pad > size + min(other, 0):
            return (f"pad {pad} wraps more than once around the cropped size "
                    f"{size + min(other, 0)}")
    return None
