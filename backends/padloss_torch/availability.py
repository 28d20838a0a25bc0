"""Whether torch can be used, found without importing it.

padloss lists every backend (``padloss.available_backends()``) and picks one
for each call; neither may pay for importing torch just to look, so these
checks read ``importlib.util.find_spec`` and ``sys.modules`` only.
"""
from __future__ import annotations

import importlib.util
import sys


def importable(name: str) -> bool:
    """Whether module ``name`` is imported or could be, without importing it
    (``sys.modules[name] = None`` is the standard way to block a module)."""
    if name in sys.modules:
        return sys.modules[name] is not None
    return importlib.util.find_spec(name) is not None


def torch_availability() -> tuple[bool, str]:
    if importable("torch"):
        return True, ""
    return False, "torch is not installed (pip install 'padloss[torch]')"
