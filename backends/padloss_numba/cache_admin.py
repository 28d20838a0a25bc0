"""``padloss cache``: what the compile cache folder holds, whether it loads, and clearing it.

The folder (disk_cache.cache_dir) holds, per kernel, one index (``.nbi``: Numba's version,
the source stamp, the signatures) and one data file a signature (``.nbc``: its machine
code). Clearing takes each index's lock, as a loading or saving process does, so a process
using the folder meanwhile sees either the whole entry or none, and compiles it again.
"""
from __future__ import annotations

import contextlib
import pickle
import re
from collections import Counter
from pathlib import Path

from .disk_cache import CURRENT, DAMAGED, cache_dir, read_index

try:
    import fcntl
except ImportError:   # not POSIX: cleared unlocked
    fcntl = None

# the module a kernel comes from -> what it computes
KERNEL_MODULES = {"pad_kernel": "circular_pad2d_backward", "l1_kernel": "l1_loss_backward",
                  "stream": "bench ceilings"}
_FOLDER_NAME = re.compile(r"padloss-.+-numba-.+")


def _op_of(index: Path) -> str:
    return KERNEL_MODULES.get(index.name.split(".", 1)[0], "other")


def info() -> dict:
    """The folder, its size, current entries per op, and what is stale: entries of older
    sources here, and folders of other padloss or Numba versions beside it."""
    folder = cache_dir()
    indexes = sorted(folder.glob("*.nbi")) if folder.is_dir() else []
    entries, states = Counter(), Counter()
    for index in indexes:
        state, overloads = read_index(index)
        states[state.split(":")[0]] += 1
        if state == CURRENT:
            entries[_op_of(index)] += len(overloads)
    others = [p for p in folder.parent.iterdir() if p.is_dir() and p != folder
              and _FOLDER_NAME.fullmatch(p.name)] if folder.parent.is_dir() else []
    return {"folder": str(folder), "bytes": _bytes(folder), "entries": dict(entries),
            "indexes": dict(states),
            "other_versions": {p.name: _bytes(p) for p in sorted(others)}}


def _bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else 0


def verify() -> list[tuple[str, str]]:
    """Every index of the folder and every data file a current index names, read back
    and unpickled as Numba's loader does (short of linking the machine code): the
    (path, why) of each that fails. Empty: the folder loads cleanly."""
    folder = cache_dir()
    damaged = []
    for index in sorted(folder.glob("*.nbi")) if folder.is_dir() else []:
        with _locked(index, shared=True):
            state, overloads = read_index(index)
            if state.startswith(DAMAGED):
                damaged.append((str(index), state.removeprefix(DAMAGED)))
                continue
            for name in sorted(set(overloads.values())):
                path = folder / name
                try:
                    pickle.loads(path.read_bytes())
                except FileNotFoundError:
                    damaged.append((str(path), "missing: its index names it"))
                except Exception as exc:
                    damaged.append((str(path), f"{type(exc).__name__}: {exc}"))
    return damaged


def clear(every_version: bool = False) -> int:
    """Remove padloss's entries (indexes, data files, leftover temporary files, variant
    records) from the folder, each kernel's under its lock; with ``every_version``, from
    the folders of other padloss and Numba versions too. The lock files stay: a process
    may hold one open. Returns the number of files removed."""
    folder = cache_dir()
    folders = [folder]
    if every_version and folder.parent.is_dir():
        folders += [p for p in folder.parent.iterdir() if p.is_dir() and p != folder
                    and _FOLDER_NAME.fullmatch(p.name)]
    removed = 0
    for f in folders:
        if not f.is_dir():
            continue
        for index in sorted(f.glob("*.nbi")):
            with _locked(index, shared=False):   # a current index and the data files it names
                _, overloads = read_index(index)
                for path in [*(f / name for name in set(overloads.values())), index]:
                    removed += _unlink(path)
        for path in [*f.glob("*.tmp.*"), *f.glob("*.nbc"), *(f / "variants").glob("*.json")]:
            removed += _unlink(path)     # orphans: data files no index names, records
    return removed


def _unlink(path: Path) -> int:
    try:
        path.unlink()
        return 1
    except FileNotFoundError:
        return 0


@contextlib.contextmanager
def _locked(index: Path, shared: bool):
    """The lock a loading (shared) or saving (exclusive) process takes on ``index``."""
    if fcntl is None:
        yield
        return
    with open(f"{index}.lock", "ab") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield
