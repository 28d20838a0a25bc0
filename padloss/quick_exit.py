"""Ending padloss's own processes without the interpreter's teardown.

Once a process that ran Numba kernels has printed its last line, Python still
finalizes every module and object before the process ends, longer still with
torch loaded (docs/performance.md, "Cold start: padloss's own processes end
without the interpreter's teardown"). Nobody needs that work, but whoever waits
on the process waits for it: the command line for its compile pool and peer
children, the user at their shell for the command line. :func:`quick_exit` ends
the process as C's ``quick_exit`` does: the exit handlers run (``atexit``:
logging's flush, a device runtime's release), stdout and stderr are flushed, and
the rest is skipped (``os._exit``, as multiprocessing's workers end).

Only the entry points of padloss's own processes call it (``python -m padloss``,
the ``padloss`` script, ``python -m padloss.child``, the bench's first-result
script), never library code: a program that imports padloss ends as it always did.
"""
from __future__ import annotations

import atexit
import os
import sys

_run_exit_handlers = getattr(atexit, "_run_exitfuncs", None)
"""CPython's own call of the ``atexit`` handlers at exit (no public name runs them
early; tests/test_quick_exit.py fails if it goes, and without it quick_exit
falls back on a plain exit)."""


def quick_exit(status: int | None = 0) -> None:
    """End the process with exit ``status`` (None: 0) once the exit handlers have run
    and stdout and stderr are flushed; a plain ``sys.exit`` where this Python lacks
    the handlers' call. Unlike a plain exit it waits for no thread still running
    (padloss's processes start none)."""
    if _run_exit_handlers is None:
        sys.exit(status)
    _run_exit_handlers()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):   # a closed pipe or stream: nothing more can reach it
            pass
    os._exit(status or 0)
