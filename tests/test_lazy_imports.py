"""padloss never imports torch or torch_npu on its own, and works without them;
nor ml_dtypes (0.9 s to import, 0.7.0) until bfloat16 is asked for.

Each check runs in a fresh interpreter, so nothing this test process imported
counts. "torch absent" is simulated by wrapping every import finder so that it
cannot see torch or torch_npu: ``import torch`` fails and
``importlib.util.find_spec("torch")`` is None, as on a machine without them.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

HIDE_TORCH = """
import importlib.abc, sys

class Hidden(importlib.abc.MetaPathFinder):
    def __init__(self, finder):
        self.finder = finder

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("torch", "torch_npu"):
            return None
        return self.finder.find_spec(name, path, target)

sys.meta_path[:] = [Hidden(f) for f in sys.meta_path]
"""

USE_NUMBA = """
import numpy as np, padloss
from padloss import reference
go = np.arange(63, dtype=np.float32).reshape(1, 7, 9)
out = padloss.circular_pad2d_backward(go, np.empty((1, 5, 5), np.float32), [2, 2, 1, 1])
assert (out == reference.circular_pad2d_backward(go, (1, 5, 5), [2, 2, 1, 1])).all()
s, t = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4), np.zeros(4, np.float16)
out = padloss.l1_loss_backward(np.float32(2), s, t, "mean")
assert (out == reference.l1_loss_backward(np.float32(2), s, t, "mean")).all()
"""


def run_python(*parts: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PADLOSS_BACKEND"}
    script = "\n".join(textwrap.dedent(p) for p in parts)
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_import_and_numba_without_torch():
    run_python(HIDE_TORCH, """
        import importlib.util
        assert importlib.util.find_spec("torch") is None
        import padloss
        infos = {b.name: b for b in padloss.available_backends()}
        assert infos["numba"].available
        assert infos["torch"].reason == "torch is not installed (pip install 'padloss[torch]')"
        assert infos["ascend"].reason.startswith("torch_npu is not installed")
        """, USE_NUMBA, """
        try:
            padloss.circular_pad2d_backward(go, np.empty((1, 5, 5), np.float32), [2, 2, 1, 1],
                                            backend="torch")
        except padloss.BackendError as exc:
            assert "torch is not installed" in str(exc), exc
        else:
            raise AssertionError("backend='torch' ran without torch")
        assert "torch" not in sys.modules
        try:
            import padloss.torch
        except ImportError as exc:
            assert "pip install 'padloss[torch]'" in str(exc), exc
        else:
            raise AssertionError("padloss.torch imported without torch")
        """)


def test_import_and_numba_never_import_torch():
    pytest.importorskip("torch")
    run_python("""
        import sys
        import padloss, padloss_ascend, padloss_torch
        padloss.available_backends()
        """, USE_NUMBA, """
        assert "torch" not in sys.modules and "torch_npu" not in sys.modules
        """)


def test_torch_cpu_tensors_stay_off_the_torch_path():
    pytest.importorskip("torch")
    run_python("""
        import sys, torch, padloss
        go = torch.ones(2, 3, 7, 9)
        _, ex = padloss.circular_pad2d_backward_get_workspace_size(go, torch.empty(2, 3, 5, 5),
                                                                   [2, 2, 1, 1], torch.empty(2, 3, 5, 5))
        assert ex.backend.name == "numba"
        assert "torch_npu" not in sys.modules
        assert "padloss_torch.pad" not in sys.modules     # no torch plan was built
        """)


def test_ml_dtypes_is_imported_only_for_bfloat16():
    pytest.importorskip("torch")
    run_python("""
        import sys
        import padloss.cli, padloss.bench.run, padloss_torch
        """, USE_NUMBA, """
        padloss.circular_pad2d_backward(np.ones((1, 5, 5), np.float16), np.empty((1, 3, 3), np.float16),
                                        [1, 1, 1, 1])
        assert "ml_dtypes" not in sys.modules
        import torch
        x = torch.tensor([[1.5, -2.0, 0.25]], dtype=torch.bfloat16)
        got = padloss.l1_loss_backward(torch.tensor(3.0, dtype=torch.bfloat16), x, torch.zeros(3), "sum")
        assert got.dtype is torch.float32 and got.tolist() == [[3.0, -3.0, 3.0]], got
        got = padloss.l1_loss_backward(torch.tensor(3.0, dtype=torch.bfloat16), x, x.flip(1), "mean")
        assert got.dtype is torch.bfloat16 and got.tolist() == [[1.0, 0.0, -1.0]], got
        assert "ml_dtypes" in sys.modules   # the bfloat16 tensors' NumPy views needed it
        """)


def test_import_padloss_loads_no_tool():
    """The catalogue, the reference model, the check and the bench are the tools', loaded
    when a tool (or padloss.warmup()) runs, not by ``import padloss``."""
    run_python("""
        import sys, padloss
        loaded = [m for m in ("padloss.catalogue", "padloss.reference", "padloss.check", "padloss.bench")
                  if m in sys.modules]
        assert not loaded, loaded
        """)
