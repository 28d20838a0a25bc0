"""Where compiled kernels persist between processes, and when they go stale.

Numba's own on-disk cache keys a kernel on its own source file only, so a
change to a helper it inlines (convert.py, say) would silently reuse old
machine code. padloss therefore registers its own cache locator, used for the
kernels of this package and nothing else:

- directory: the ``cache_dir`` setting (``PADLOSS_CACHE_DIR``) if set, else
  ``$XDG_CACHE_HOME/padloss`` (``~/.cache/padloss``), in a sub-folder per
  padloss and Numba version;
- freshness: a hash of every source file of this package and of
  ``padloss/rules.py`` (the kernels read its rounding mode), so editing any of
  them recompiles every kernel once;
- opt-out: the ``numba_cache`` setting (``PADLOSS_NUMBA_CACHE=0``) compiles in
  memory only; the kernels read it when this backend loads.

Parallel kernels are cached too: the thread count is a run-time argument of
every kernel (never read inside one), and the tests run cached kernels at 1
and 2 threads.

Several processes may compile into one folder at once (DDP ranks, warmup's
children, test workers): every kernel made by :func:`jit` reads and writes its
cache entries under a file lock (:class:`LockedIndex`).

The cache never fails a call (:class:`GuardedCache`): an entry that cannot be read
(truncated, corrupt, emptied, another format) is a miss, compiled again and replaced
atomically; a folder that cannot be written keeps the kernel in memory. Its files are
machine code that a load runs, so a folder others can write (group- or world-writable,
or owned by another user) is neither read nor written unless the ``cache_trusted``
setting says so. Each of these says so once, as a warning of the ``padloss`` logger.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import pickle
import stat
from pathlib import Path

try:
    import fcntl
except ImportError:        # not POSIX: entries are saved unlocked, as Numba itself does
    fcntl = None

import numba

from padloss import rules
from padloss.config import current as settings

from . import numba_internals

log = logging.getLogger("padloss")
PACKAGE_DIR = Path(__file__).resolve().parent
RULES_FILE = Path(rules.__file__).resolve()
ENABLED = settings.numba_cache   # what the kernels, decorated when this backend loads, use


def cache_dir() -> Path:
    """The folder compiled kernels are written to (created on first use)."""
    from padloss import __version__

    root = settings.cache_dir
    if not root:
        root = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "padloss")
    return Path(root) / f"padloss-{__version__}-numba-{numba.__version__}"


def untrusted(folder: Path) -> str | None:
    """Why ``folder`` (the kernels' folder) and the root above it, which padloss creates,
    may hold code others wrote; None where they may not, or the setting trusts them."""
    if settings.cache_trusted:
        return None
    for path in (folder, folder.parent):
        try:
            info = path.stat()
        except OSError:
            continue          # not there yet: padloss creates it, as this user
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return f"{path} is writable by its group or by others"
        if hasattr(os, "getuid") and info.st_uid != os.getuid():
            return f"{path} belongs to another user (uid {info.st_uid})"
    return None


_said: set = set()


def _say_once(key, message: str, *args) -> None:
    if key not in _said:
        _said.add(key)
        log.warning(message, *args)


def _reason(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"


def _damaged(path, why: str, what_now: str) -> None:
    _say_once(("damaged", str(path)), "padloss: the compile cache file %s cannot be used (%s): %s",
              path, why, what_now)


@functools.lru_cache(maxsize=1)
def source_stamp() -> str:
    """Hash of every .py file of this package and of padloss/rules.py: any edit
    invalidates all kernels."""
    digest = hashlib.sha256()
    for path in sorted(PACKAGE_DIR.glob("*.py")) + [RULES_FILE]:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


CURRENT, STALE, OTHER_NUMBA, MISSING, DAMAGED = "current", "stale", "other numba", "missing", "damaged: "


def read_index(path, stamp: str | None = None) -> tuple[str, dict]:
    """(state, signatures -> data file name) of one kernel's index file, the one reader
    of that format: its state is CURRENT (of ``stamp``, default the current sources),
    STALE (of other sources), OTHER_NUMBA, MISSING or DAMAGED + why; only a current
    index gives its entries."""
    try:
        with open(path, "rb") as f:
            version = pickle.load(f)
            if not isinstance(version, str):
                return DAMAGED + f"not an index: it starts with a {type(version).__name__}", {}
            if version != numba.__version__:
                return OTHER_NUMBA, {}
            found, overloads = pickle.loads(f.read())
    except FileNotFoundError:
        return MISSING, {}
    except Exception as exc:    # any way a damaged file fails to unpickle
        return DAMAGED + _reason(exc), {}
    return (CURRENT, overloads) if found == (stamp or source_stamp()) else (STALE, {})


class PadlossCacheLocator(numba_internals.CacheLocator):
    """Numba cache locator for functions defined in this package only."""

    def __init__(self, py_func, py_file):
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno

    def get_cache_path(self) -> str:
        return str(cache_dir())

    def get_source_stamp(self) -> str:
        return source_stamp()

    def get_disambiguator(self) -> str:
        return str(self._lineno)

    def ensure_cache_path(self) -> None:
        """Create the root and the kernels' folder writable by this user alone, whatever
        the umask (under a umask of 002 they would be group-writable, so not trusted)."""
        folder = cache_dir()
        for path in (folder.parent, folder):
            os.makedirs(path, mode=0o755, exist_ok=True)
        super().ensure_cache_path()

    @classmethod
    def from_function(cls, py_func, py_file):
        if Path(py_file).resolve().parent != PACKAGE_DIR:
            return None   # not ours: Numba's own locators decide
        locator = cls(py_func, py_file)
        try:
            locator.ensure_cache_path()
        except OSError:
            return None   # unwritable: fall back to Numba's locators
        return locator


class LockedIndex(numba_internals.IndexDataCacheFile):
    """Numba's index and data files of one kernel, read under a shared lock and
    written under an exclusive one (``<index>.lock`` beside them).

    Numba saves a new entry unlocked: read the index, take the first free data
    file number, write the index, then the data. Two processes saving variants of
    one kernel at once can take the same number, and a reader between the index
    and the data write can load a stale file: either way a later process runs one
    variant's machine code for another's arguments.
    """

    def save(self, key, data):
        with self._locked(fcntl.LOCK_EX):
            super().save(key, data)

    loaded_from = None   # the data file the last load read (GuardedCache names it if it does not rebuild)

    def load(self, key):
        """Numba's load, naming a data file that cannot be read (a miss: the save replaces it)."""
        with self._locked(fcntl.LOCK_SH):
            data_name = self._load_index().get(key)
            if data_name is None:
                return None
            self.loaded_from = self._data_path(data_name)
            try:
                return self._load_data(data_name)
            except FileNotFoundError:   # removed while the index still names it
                return None
            except Exception as exc:    # truncated, corrupt, emptied, another format
                _damaged(self._data_path(data_name), _reason(exc),
                         "the kernel compiles again; the file is replaced")
                return None

    def _load_index(self):
        """The index, or none where it cannot be read or another Numba wrote it: the next
        save writes a new one. (An index of other sources is stale, not damaged: Numba
        returns none for it, silently.)"""
        state, overloads = read_index(self._index_path, self._source_stamp)
        if state.startswith(DAMAGED) or state == OTHER_NUMBA:
            why = state.removeprefix(DAMAGED) if state.startswith(DAMAGED) else "written by another Numba"
            _damaged(self._index_path, why, "its kernels compile again and the index is replaced")
        return overloads

    @contextlib.contextmanager
    def _locked(self, mode: int):
        try:
            lock = open(self._index_path + ".lock", "ab")
        except OSError:      # the folder is gone: Numba recreates it before a save, a load finds nothing
            yield
            return
        with lock:
            fcntl.flock(lock, mode)   # released when the file closes
            yield


class GuardedCache(numba_internals.FunctionCache):
    """Numba's cache of one kernel, which never fails a call: a folder others can
    write is not used, an entry that cannot be loaded is a miss (compiled again; the
    save replaces it), and a save that cannot be written leaves the kernel in memory."""

    def load_overload(self, sig, target_context):
        why = untrusted(cache_dir())
        if why:
            _say_once(("untrusted", why), "padloss: not using the compile cache: %s, and its files are "
                      "machine code that loading runs (PADLOSS_CACHE_TRUSTED=1 trusts it); "
                      "kernels compile in memory", why)
            return None
        files = self._cache_file
        if isinstance(files, LockedIndex):
            files.loaded_from = None
        try:
            return super().load_overload(sig, target_context)
        except Exception as exc:   # a data file that unpickles but does not rebuild: named where known
            _damaged(getattr(files, "loaded_from", None) or files._index_path, _reason(exc),
                     f"an entry for {sig} does not load: it compiles again and the entry is replaced")
            return None

    def save_overload(self, sig, data):
        if untrusted(cache_dir()):
            return
        try:
            super().save_overload(sig, data)
        except OSError as exc:
            _say_once(("unwritable", str(cache_dir())), "padloss: cannot write the compile cache in %s "
                      "(%s): kernels stay in memory for this process", cache_dir(), exc)


def install() -> None:
    """Put the locator first in Numba's list (idempotent)."""
    numba_internals.add_cache_locator(PadlossCacheLocator)


def adopt(dispatcher) -> None:
    """Make a cached kernel's cache a :class:`GuardedCache` with :class:`LockedIndex` files."""
    numba_internals.adopt_cache(dispatcher, GuardedCache, LockedIndex if fcntl is not None else None)
