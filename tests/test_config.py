"""padloss.config: every setting read from its variable once, changed through set()."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import padloss
from padloss import config

README = Path(__file__).resolve().parent.parent / "README.md"


def test_the_environment_is_read_at_import():
    env = {k: v for k, v in os.environ.items() if not k.startswith("PADLOSS_")}
    env.update(PADLOSS_BACKEND="numba", PADLOSS_NUMBA_CACHE="0", PADLOSS_CACHE_DIR="/nowhere",
               PADLOSS_CACHE_TRUSTED="1", PADLOSS_ASCEND_ACLNN="0", PADLOSS_TARGET="atlas-a2")
    script = ("import json, os, padloss\n"
              "before = padloss.config.settings()\n"
              "os.environ['PADLOSS_BACKEND'] = 'torch'\n"          # edits after import: no effect
              "print(json.dumps([before, padloss.config.settings()]))")
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                          check=True)
    before, after = json.loads(proc.stdout)
    assert before == after == {"backend": "numba", "numba_cache": False, "cache_dir": "/nowhere",
                               "cache_trusted": True, "target": "atlas-a2", "ascend_aclnn": False}


def test_defaults_without_variables(monkeypatch):
    for s in config.SETTINGS:
        monkeypatch.delenv(s.variable, raising=False)
    try:
        config.reload()
        assert config.settings() == {"backend": None, "numba_cache": True, "cache_dir": None,
                                     "cache_trusted": False, "target": "spec", "ascend_aclnn": True}
    finally:
        monkeypatch.undo()
        config.reload()


def test_set_changes_the_next_call_and_restores_as_a_block():
    go, x = np.ones((1, 2, 6, 6), np.float32), np.empty((1, 2, 4, 4), np.float32)
    _, ex = padloss.circular_pad2d_backward_get_workspace_size(go, x, (1, 1, 1, 1), x)
    assert ex.backend.name == "numba"
    with config.set(backend="no-such-backend"):
        assert config.current.backend == "no-such-backend"
        with pytest.raises(padloss.PadlossError, match="unknown backend 'no-such-backend'.*PADLOSS_BACKEND"):
            padloss.circular_pad2d_backward(go, x, (1, 1, 1, 1))
    assert config.current.backend is None or config.current.backend == os.environ.get("PADLOSS_BACKEND")
    padloss.circular_pad2d_backward(go, x, (1, 1, 1, 1))


def test_set_checks_every_name_and_value_before_changing_any():
    before = config.settings()
    with pytest.raises(TypeError, match="unknown setting 'backends'"):
        config.set(numba_cache=False, backends="numba")
    with pytest.raises(TypeError, match="numba_cache=1 is not a valid value"):
        config.set(backend="numba", numba_cache=1)
    assert config.settings() == before


def test_the_readme_table_is_the_settings_table():
    assert config.table() in README.read_text(encoding="utf-8")
