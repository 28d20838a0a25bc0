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
"""
from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

import numba
from numba.core import caching

from padloss import rules
from padloss.config import current as settings

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


@functools.lru_cache(maxsize=1)
def source_stamp() -> str:
    """Hash of every .py file of this package and of padloss/rules.py: any edit
    invalidates all kernels."""
    digest = hashlib.sha256()
    for path in sorted(PACKAGE_DIR.glob("*.py")) + [RULES_FILE]:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


class PadlossCacheLocator(caching._CacheLocator):
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


def install() -> None:
    """Put the locator first in Numba's list (idempotent)."""
    classes = caching.CacheImpl._locator_classes
    if PadlossCacheLocator not in classes:
        classes.insert(0, PadlossCacheLocator)
