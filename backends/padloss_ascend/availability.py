"""Whether the Ascend NPU can be used, found without importing torch or torch_npu.

padloss lists every backend (``padloss.available_backends()``) and picks one
for each call; neither may pay for importing torch_npu just to look.
So these checks read ``importlib.util.find_spec`` and ``sys.modules`` only: an
NPU tensor can exist only after its owner imported torch_npu, so until then
the Ascend backend is simply not needed, and the reason says so.
"""
from __future__ import annotations

import os
import sys

from padloss_torch.availability import importable

INSTALL_HINT = "install the torch_npu release built for your torch and CANN: docs/ascend.md"
# Set by CANN's set_env.sh; the runtime library torch_npu loads lives below them.
CANN_HOME_VARS = ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME")
CANN_RUNTIME_LIBRARY = "libascendcl.so"


def cann_runtime_dirs() -> list[str]:
    """Folders where CANN's runtime library may be: the toolkit's lib64 and LD_LIBRARY_PATH."""
    dirs = [os.path.join(os.environ[v], "lib64") for v in CANN_HOME_VARS if os.environ.get(v)]
    dirs += [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
    return dirs


def cann_runtime_found() -> bool:
    return any(os.path.exists(os.path.join(d, CANN_RUNTIME_LIBRARY)) for d in cann_runtime_dirs())


def ascend_availability() -> tuple[bool, str]:
    """(True, "") once torch_npu is imported and sees an NPU; else the first missing piece."""
    if sys.modules.get("torch_npu") is None:
        if not importable("torch_npu"):
            return False, f"torch_npu is not installed ({INSTALL_HINT})"
        if not cann_runtime_found():
            return False, (f"the CANN runtime is missing: {CANN_RUNTIME_LIBRARY} is in none of "
                           f"$ASCEND_HOME_PATH/lib64, $ASCEND_TOOLKIT_HOME/lib64, $LD_LIBRARY_PATH "
                           f"(install the CANN toolkit and source its set_env.sh)")
        return False, "torch_npu is installed but not imported (import torch_npu to use the NPU)"
    torch = sys.modules["torch"]
    npu = getattr(torch, "npu", None)
    if npu is None or not npu.is_available() or npu.device_count() == 0:
        return False, "torch_npu is imported but finds no NPU device"
    return True, ""
