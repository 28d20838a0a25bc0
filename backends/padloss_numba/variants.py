"""What kernel variants the disk cache holds, for ``padloss info``.

Numba's cache index is a private pickle, and files compiled from older sources
linger beside the current ones, so the folder's contents do not say what is
compiled. Instead each plan that builds a variant (an op's body for some
dtypes, with its serial or parallel entry point) records it once per process
in a small file under ``variants/`` in the cache folder, with the source stamp
the kernels are keyed on. One file per variant, named by its content: processes
compiling at once (``padloss warmup``) never write one file with different text.
"""
from __future__ import annotations

import hashlib
import json
import os
from collections import defaultdict

from .convert import STORAGE_CODE
from .disk_cache import ENABLED, cache_dir, source_stamp

KIND_NAME = {code: name for name, code in STORAGE_CODE.items()}


def _folder():
    return cache_dir() / "variants"


def record(op: str, dtypes: str, body: str, parallel: bool) -> None:
    """Note that ``op``'s kernel for ``dtypes``, body ``body``, threading ``parallel``, is
    in the cache (nothing when the disk cache is off; a folder that cannot be written
    only loses the note)."""
    if not ENABLED:
        return
    text = json.dumps({"stamp": source_stamp(), "op": op, "dtypes": dtypes, "body": body,
                       "entry": "parallel" if parallel else "serial"}, sort_keys=True)
    path = _folder() / (hashlib.sha256(text.encode()).hexdigest()[:20] + ".json")
    if path.exists():
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.stem}.{os.getpid()}.tmp")
        partial.write_text(text)
        os.replace(partial, path)
    except OSError:
        pass


def listing() -> tuple[dict[tuple[str, str], dict[str, set[str]]], int]:
    """The variants recorded for the current sources, as (op, dtypes) -> {"bodies",
    "entries"}, and how many records are from older sources (their files are stale)."""
    current: dict[tuple[str, str], dict[str, set[str]]] = defaultdict(
        lambda: {"bodies": set(), "entries": set()})
    stale = 0
    folder = _folder()
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
        try:
            entry = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if entry.get("stamp") != source_stamp():
            stale += 1
            continue
        found = current[entry["op"], entry["dtypes"]]
        found["bodies"].add(entry["body"])
        found["entries"].add(entry["entry"])
    return dict(current), stale
