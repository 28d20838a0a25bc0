"""What ``padloss info`` says of the Numba backend: its threads, its compile cache
and the kernel variants that cache holds for the current sources."""
from __future__ import annotations

import os

import numba

from . import disk_cache, variants


def threads() -> tuple[str, int]:
    """(threading layer, thread count); the layer is only known after a parallel launch."""
    from .stream import make_stream

    make_stream(1, 1)
    return numba.threading_layer(), numba.get_num_threads()


def compile_cache() -> str:
    """The cache folder, whether it is used and why not, and what it holds."""
    folder = disk_cache.cache_dir()
    files = [p for p in folder.glob("*") if p.is_file()] if folder.is_dir() else []
    why = disk_cache.untrusted(folder)
    state = ("on" if not why else f"not used: {why} (PADLOSS_CACHE_TRUSTED=1 trusts it)") \
        if disk_cache.ENABLED else "off (PADLOSS_NUMBA_CACHE=0)"
    size = sum(p.stat().st_size for p in files) / 1e6
    return f"{folder} ({state}; {len(files)} files, {size:.1f} MB)"


def compiled_variants() -> list[str]:
    """Lines naming the kernel variants the compile cache holds for the current sources."""
    found, stale = variants.listing()
    bodies = sum(len(v["bodies"]) for v in found.values())
    lines = [f"compiled variants (current sources): {bodies} bodies for {len(found)} op/dtype sets"
             + (f"; {stale} records of older sources, whose files are stale" if stale else "")]
    for (op, dtypes), v in sorted(found.items()):
        lines.append(f"  {op:24} {dtypes:42} bodies: {', '.join(sorted(v['bodies']))}"
                     f" | entries: {', '.join(sorted(v['entries'], reverse=True))}")
    return lines


def lines() -> list[str]:
    layer, count = threads()
    return [f"threading layer {layer}, {count} threads ({os.cpu_count()} CPUs)",
            f"compile cache: {compile_cache()}", *compiled_variants()]


def compiled_for(calls) -> bool:
    """True when the cache holds, for the current sources, a kernel of each (op, dtype)
    of ``calls`` reading that dtype, or when there is no cache a compile could fill."""
    if not disk_cache.ENABLED:
        return True
    found = {(op, dtype) for op, dtypes in variants.listing()[0]
             for dtype in dtypes.replace("->", ",").replace(" ", "").split(",")}
    return all(call in found for call in calls)
