"""The compile cache survives damage: real files damaged by hand, real fresh processes.

Every case: a warm cache is copied, damaged, then used by a new process, which must give
the reference's bits, say once which file it could not use, and leave a cache that the
next process loads whole (no compile, no warning). No mock of the file system.
"""
from __future__ import annotations

import json
import os
import pickle
import random
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(os.name != "posix", reason="the cache lock is POSIX's flock")

_CALLS = """
import json, resource, signal, sys
if len(sys.argv) > 1:   # a file size limit: writes past it fail as on a full disk or quota
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), int(sys.argv[1])))
import numpy as np, padloss
from numba.core import event
from padloss import reference
go = (np.arange(2 * 3 * 10 * 10, dtype=np.float32) / 7).reshape(2, 3, 10, 10)
x, t = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3), np.zeros(3, np.float32)
with event.install_recorder("numba:compile") as compiles:
    pad = padloss.circular_pad2d_backward(go, np.empty((2, 3, 8, 8), np.float32), (1, 1, 1, 1))
    l1 = padloss.l1_loss_backward(np.float32(1), x, t, "mean")
ok = np.array_equal(pad, reference.circular_pad2d_backward(go, (2, 3, 8, 8), (1, 1, 1, 1))) and \\
    np.array_equal(l1, reference.l1_loss_backward(np.float32(1), x, t, "mean"))
print(json.dumps({"ok": bool(ok), "compiles": len(compiles.buffer) // 2}))
"""


def run(cache_dir, *args, **env) -> dict:
    """The two calls in a fresh process on ``cache_dir``: its JSON line and its stderr."""
    env = {**os.environ, "PADLOSS_CACHE_DIR": str(cache_dir), "NUMBA_NUM_THREADS": "1", **env}
    env.pop("PADLOSS_NUMBA_CACHE", None)
    proc = subprocess.run([sys.executable, "-c", _CALLS, *map(str, args)], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["ok"], "a result differs from padloss.reference"
    return {**result, "stderr": proc.stderr}


def kernel_files(cache_dir, suffix: str) -> list:
    return sorted(p for p in cache_dir.rglob(f"*{suffix}") if p.is_file())


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    """A cache holding the two calls' kernels (compiled once for the module)."""
    folder = tmp_path_factory.mktemp("warm")
    first = run(folder)
    assert first["compiles"] > 0 and kernel_files(folder, ".nbi") and kernel_files(folder, ".nbc")
    assert run(folder)["compiles"] == 0
    return folder


@pytest.fixture
def copy_of(warm, tmp_path):
    shutil.copytree(warm, tmp_path / "cache")
    return tmp_path / "cache"


def _half(data: bytes) -> bytes:
    return data[: len(data) // 2]


DAMAGE = {
    "truncated": _half,
    # the same bytes every run (os.urandom's, once in a while, unpickled into an object)
    "random bytes": lambda data: random.Random(len(data)).randbytes(len(data)),
    "emptied": lambda data: b"",
    "another format": lambda data: pickle.dumps({}),   # unpickles, but is no index or kernel
}


@pytest.mark.parametrize("suffix", [".nbi", ".nbc"], ids=["index", "data"])
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_entry_is_a_miss_and_is_replaced(copy_of, suffix, damage):
    files = kernel_files(copy_of, suffix)
    for path in files:            # as a half-finished copy leaves them: every file of a kind
        path.write_bytes(DAMAGE[damage](path.read_bytes()))
    damaged = run(copy_of)
    assert damaged["compiles"] > 0
    # one warning a damaged file, naming it
    lines = [line for line in damaged["stderr"].splitlines() if "padloss: the compile cache file" in line]
    named = [path for path in files if any(f"file {path} cannot be used" in line for line in lines)]
    assert named and len(lines) == len(set(lines)) == len(named)
    repaired = run(copy_of)
    assert repaired["compiles"] == 0 and "padloss:" not in repaired["stderr"]


def test_an_unwritable_cache_keeps_kernels_in_memory(tmp_path):
    """Writes past a file size limit fail (EFBIG) as on a full disk: the calls still work,
    one warning says why, and nothing half-written is left for the next process."""
    limited = run(tmp_path, 64)
    assert limited["compiles"] > 0
    warnings = [line for line in limited["stderr"].splitlines() if "cannot write the compile cache" in line]
    assert len(warnings) == 1 and str(tmp_path) in warnings[0]
    assert not [p for p in tmp_path.rglob("*.tmp.*")]
    after = run(tmp_path)            # no limit: a clean cache, written now
    assert after["compiles"] > 0 and "padloss:" not in after["stderr"].replace("padloss: compiled", "")
    assert run(tmp_path)["compiles"] == 0


@pytest.mark.parametrize("whose", ["group-writable", "world-writable", "another user's"])
def test_a_folder_others_can_write_is_not_trusted(copy_of, whose):
    folder = next(p for p in copy_of.iterdir() if p.is_dir())     # padloss-<version>-numba-<version>
    if whose == "another user's":
        if os.getuid() != 0:
            pytest.skip("chown needs root")
        os.chown(folder, 65534, 65534)
    else:
        folder.chmod(0o775 if whose == "group-writable" else 0o757)
    before = sorted(p.name for p in folder.iterdir())
    refused = run(copy_of)
    assert refused["compiles"] > 0                                 # nothing loaded from it
    notes = [line for line in refused["stderr"].splitlines() if "not using the compile cache" in line]
    assert len(notes) == 1 and str(folder) in notes[0] and "PADLOSS_CACHE_TRUSTED=1" in notes[0]
    assert sorted(p.name for p in folder.iterdir()) == before       # nor written to it
    trusted = run(copy_of, PADLOSS_CACHE_TRUSTED="1")
    assert trusted["compiles"] == 0 and "padloss:" not in trusted["stderr"]


def test_folders_padloss_makes_are_trusted_under_a_group_umask(tmp_path):
    """A umask of 002 (Debian's for user-private groups) would make the folders
    group-writable, and so refused: padloss creates them writable by the user alone."""
    script = "import os, sys; os.umask(0o002); sys.argv = ['-c']; exec(sys.stdin.read())"
    env = {**os.environ, "PADLOSS_CACHE_DIR": str(tmp_path / "made"), "NUMBA_NUM_THREADS": "1"}
    for expected_compiles in (True, False):
        proc = subprocess.run([sys.executable, "-c", script], input=_CALLS, env=env, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0 and "not using the compile cache" not in proc.stderr, proc.stderr[-2000:]
        assert (json.loads(proc.stdout)["compiles"] > 0) == expected_compiles
    for folder in (tmp_path / "made", *(tmp_path / "made").iterdir()):
        assert folder.stat().st_mode & 0o022 == 0, oct(folder.stat().st_mode)


def test_the_root_folder_is_checked_too(copy_of):
    copy_of.chmod(0o777)
    assert "not using the compile cache" in run(copy_of)["stderr"]
    env = {**os.environ, "PADLOSS_CACHE_DIR": str(copy_of)}
    info = subprocess.run([sys.executable, "-m", "padloss", "info"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert f"(not used: {copy_of} is writable by its group or by others" in info.stdout


def test_four_cold_processes_compile_into_one_folder(tmp_path):
    """As DDP ranks or test workers do: all right, and the folder loads cleanly after."""
    env = {**os.environ, "PADLOSS_CACHE_DIR": str(tmp_path), "NUMBA_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, "-c", _CALLS], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        assert json.loads(out)["ok"]
    after = run(tmp_path)
    assert after["compiles"] == 0 and "padloss:" not in after["stderr"]


def cli(cache_dir, *args) -> subprocess.CompletedProcess:
    env = {**os.environ, "PADLOSS_CACHE_DIR": str(cache_dir)}
    return subprocess.run([sys.executable, "-m", "padloss", "cache", *args], env=env, capture_output=True,
                          text=True, timeout=120)


def test_padloss_cache_verify_finds_a_damaged_entry_and_clear_removes_entries(copy_of):
    info = cli(copy_of, "info")
    assert info.returncode == 0
    assert "circular_pad2d_backward" in info.stdout and "l1_loss_backward" in info.stdout
    assert cli(copy_of, "verify").stdout.strip().endswith("every entry loads")
    data = kernel_files(copy_of, ".nbc")[0]
    data.write_bytes(_half(data.read_bytes()))
    verify = cli(copy_of, "verify")
    assert verify.returncode == 1
    assert f"damaged: {data}:" in verify.stdout and "1 damaged files" in verify.stdout
    folder = data.parent
    other = copy_of / "padloss-0.0.1-numba-0.1.0"          # another version's folder, and a stranger's file
    other.mkdir()
    (other / "x.nbi").write_bytes(b"old")
    (folder / "notes.txt").write_text("not padloss's")
    clear = cli(copy_of, "clear")
    assert clear.returncode == 0 and not kernel_files(folder, ".nbc") and not kernel_files(folder, ".nbi")
    assert (other / "x.nbi").exists() and (folder / "notes.txt").exists()
    assert cli(copy_of, "clear", "--all-versions").returncode == 0 and not (other / "x.nbi").exists()
    assert (folder / "notes.txt").exists()
    assert run(copy_of)["compiles"] > 0            # cleared: compiled again, and correct


def test_clear_is_safe_while_another_process_uses_the_folder(copy_of):
    """Processes calling both ops while the folder is cleared under them: every result
    right, and the folder loads cleanly afterwards."""
    env = {**os.environ, "PADLOSS_CACHE_DIR": str(copy_of), "NUMBA_NUM_THREADS": "1"}
    users = [subprocess.Popen([sys.executable, "-c", _CALLS], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for _ in range(3):
        assert cli(copy_of, "clear").returncode == 0
    for proc in users:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0 and json.loads(out)["ok"], err[-3000:]
    run(copy_of)
    assert cli(copy_of, "verify").returncode == 0



_BODY_SYMBOL = """
import json, sys, numpy as np
from padloss_numba import indirect
names, real = [], indirect.address
def address(dispatcher, signature):
    names.append(dispatcher.overloads[tuple(signature)].fndesc.llvm_func_name)
    return real(dispatcher, signature)
indirect.address = address
import padloss
reduction = sys.argv[1]
x, t = np.ones((4, 3), np.float16), np.zeros((1, 3), np.float16)
g = np.ones((4, 3), np.float16) if reduction == "none" else np.float16(1)
padloss.l1_loss_backward(g, x, t, reduction)
print(json.dumps(names))
"""


def test_variants_compiled_in_two_processes_have_their_own_symbols(tmp_path):
    """Entry points call a body by the address of its symbol (indirect.address). Numba
    names the symbol after the qualified name, the signature and a per-process counter,
    so L1's "none" and "mean" bodies (same signature), each compiled first in a process
    of its own, had one name; a process loading both from the cache could then be handed
    one body for the other (4 runs of 50 in .ci/stability gave "mean" results off by the
    element count, as the "none" body computes). Each variant's name carries its closure's
    constants now (disk_cache._named_for_its_variant)."""
    names = {}
    for reduction in ("none", "mean"):
        env = {**os.environ, "PADLOSS_CACHE_DIR": str(tmp_path / reduction), "NUMBA_NUM_THREADS": "1"}
        proc = subprocess.run([sys.executable, "-c", _BODY_SYMBOL, reduction], env=env, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        (names[reduction],) = json.loads(proc.stdout)
    assert names["none"] != names["mean"]
