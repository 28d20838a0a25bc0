"""The README's "With PyTorch" section runs as written (its DDP script included)."""
from __future__ import annotations

import os
import re
import socket
import subprocess
import sys

import pytest

pytest.importorskip("torch")

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")


def section_blocks() -> list[str]:
    text = open(README, encoding="utf-8").read()
    section = text.split("## With PyTorch", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_script(tmp_path, code: str, name: str) -> None:
    script = tmp_path / name
    script.write_text(code)
    env = dict(os.environ, NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                          timeout=240, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]


def test_the_with_pytorch_section_has_its_examples():
    blocks = section_blocks()
    assert len(blocks) == 3 and "pt.patch()" in blocks[0] and "torch.ops.padloss" in blocks[1] \
        and "DistributedDataParallel" in blocks[2]


def test_the_usage_example_runs(tmp_path):
    run_script(tmp_path, section_blocks()[0], "usage.py")


def test_the_custom_ops_example_runs(tmp_path):
    from padloss.torch import ops
    if ops.CUSTOM_OPS_MISSING is not None:
        pytest.skip(f"Function mode: {ops.CUSTOM_OPS_MISSING}")
    run_script(tmp_path, section_blocks()[1], "custom_ops.py")


def test_the_ddp_example_runs(tmp_path):
    code = section_blocks()[2].replace("127.0.0.1:29512", f"127.0.0.1:{free_port()}")
    run_script(tmp_path, code, "ddp_example.py")
