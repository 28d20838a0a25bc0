"""The child processes the command line starts, each a module run with arguments:

    python -m padloss.child warmup OP DTYPE...      compile one op's kernels, a dtype at a time
    python -m padloss.child prepare OP REDUCTION SIZES DTYPES MIXES
                                                    compile what the bench times for one op
    python -m padloss.child peer SPEC               time a peer framework (padloss.bench.peers)

A compiling child prints a line as each piece is ready (padloss.console.run_children
draws them); Numba compiles on one core in each, and their cache writes are locked.
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


def prepare(op: str, reduction: str, sizes: str, dtypes: str, mixes: str) -> None:
    """The bench's kernels for ``op`` at each of ``sizes`` x ``dtypes`` (comma-separated),
    and with the first of them the ceilings of ``mixes`` (counts of input streams)."""
    from padloss.bench import workloads

    logging.getLogger("padloss").setLevel(logging.ERROR)   # its note on slow first calls: asked for here
    pending = [int(n) for n in mixes.split(",") if n]
    for size in sizes.split(","):
        for dtype in dtypes.split(","):
            workloads.prepare(workloads.workload(op, dtype, size, reduction, filled=False), pending)
            pending = []
            print(size, dtype, flush=True)


def peer(spec: str) -> None:
    from padloss.bench import peers

    peers.peer_side(json.loads(spec))


KINDS = {"warmup": warmup, "prepare": prepare, "peer": peer}

if __name__ == "__main__":
    KINDS[sys.argv[1]](*sys.argv[2:])
