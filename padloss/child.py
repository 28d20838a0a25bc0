"""The child processes the command line starts, each a module run with arguments:

    python -m padloss.child warmup OP DTYPE...      compile one op's kernels, a dtype at a time
    python -m padloss.child prepare OP REDUCTION SIZES DTYPES
                                                    compile what the bench times for one op
    python -m padloss.child ceilings N_INPUTS       compile the bench's ceiling kernels of one mix
    python -m padloss.child check OP DTYPE TARGET   compile what ``padloss check`` runs of one op and dtype
    python -m padloss.child serve                   run jobs (one of the above each) from stdin
    python -m padloss.child peer SPEC               time a peer framework (padloss.bench.peers)

A compiling child prints a line as each piece is ready; a pool of ``serve`` children
(padloss.console.run_jobs) shares out the compiles and draws those lines. Numba
compiles on one core in each, and their cache writes are locked.
"""
from __future__ import annotations

import json
import logging
import sys


def warmup(op: str, *dtypes: str) -> None:
    import padloss

    for dtype in dtypes:
        padloss.warmup(ops=[op], dtypes=[dtype])
        print(dtype, flush=True)


def prepare(op: str, reduction: str, sizes: str, dtypes: str) -> None:
    """The bench's kernels for ``op`` at each of ``sizes`` x ``dtypes`` (comma-separated)."""
    from padloss.bench import workloads

    logging.getLogger("padloss").setLevel(logging.ERROR)   # its note on slow first calls: asked for here
    for size in sizes.split(","):
        for dtype in dtypes.split(","):
            workloads.prepare(workloads.workload(op, dtype, size, reduction, filled=False))
            print(size, dtype, flush=True)


def ceilings(n_inputs: str) -> None:
    """The bench's ceiling kernels of the mix that reads ``n_inputs`` streams."""
    from padloss.bench import ceilings

    ceilings.prepare(int(n_inputs))
    print(f"ceilings of {n_inputs} inputs", flush=True)


def check(op: str, dtype: str, target: str) -> None:
    """The kernels ``padloss check`` runs of ``op`` in ``dtype`` under ``target``
    (padloss.check.compile_cases)."""
    from padloss import check

    logging.getLogger("padloss").setLevel(logging.ERROR)
    check.compile_cases(op, dtype, target)
    print(dtype, flush=True)


JOB_DONE = "job done"
"""What a ``serve`` child prints when it has finished a job and takes the next."""


def serve() -> None:
    """Jobs from stdin, one a line (a JSON list: a kind of KINDS and its arguments), run
    in turn, each followed by a line :data:`JOB_DONE`, until stdin closes. A job that
    raises ends the child (its traceback on stderr, exit status 1)."""
    for line in sys.stdin:
        kind, *args = json.loads(line)
        KINDS[kind](*args)
        print(JOB_DONE, flush=True)


def peer(spec: str) -> None:
    from padloss.bench import peers

    peers.peer_side(json.loads(spec))


KINDS = {"warmup": warmup, "prepare": prepare, "ceilings": ceilings, "check": check, "serve": serve,
         "peer": peer}

if __name__ == "__main__":
    from padloss.quick_exit import quick_exit

    KINDS[sys.argv[1]](*sys.argv[2:])
    quick_exit()   # the parent waits for this process's end: no teardown (padloss.quick_exit)
