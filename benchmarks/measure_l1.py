"""Closing-note numbers for l1_loss_backward (not a test; timings only).

Runs itself in two subprocesses, torch's default allocator and
THP_MEM_ALLOC_ENABLE=1 (torch reads it at start-up), and in each times, in
interleaved rounds: padloss (preallocated out), a streaming kernel with the
same big reads and writes (none: 3 reads + 1 write, mean: 2 + 1, broadcast
mean: self + out, a copy) in normal stores (the ceiling of the issue's bars)
and in non-temporal ones (the stronger yardstick, "x nt"), and torch
autograd's backward of F.l1_loss.
Cases: flat ``elements``-long tensors with reduction none and mean, and a
broadcast mean with self (B, N) and target (N,).
Usage: python benchmarks/measure_l1.py [--elements 30000000] [--row 10000] [--rounds 7]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import ml_dtypes
import numpy as np

DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def _cases(elements: int, row: int):
    """(name, reduction, grad shape, self shape, target shape, big streams read)."""
    return [
        ("none", "none", (elements,), (elements,), (elements,), 3),
        ("mean", "mean", (), (elements,), (elements,), 2),
        ("bcast mean", "mean", (), (elements // row, row), (row,), 1),
    ]


def measure(elements: int, row: int, rounds: int) -> dict:
    import numba
    import torch

    import padloss
    from padloss.bench import timing as benchmark
    from padloss_numba.stream import make_stream

    rng = np.random.default_rng(0)
    rows = []
    for name, dt in DTYPES.items():
        tdt = getattr(torch, name)
        for case, reduction, gshape, xshape, tshape, reads in _cases(elements, row):
            go, x, t = (rng.standard_normal(s, dtype=np.float32).astype(dt) for s in (gshape, xshape, tshape))
            out = np.empty(np.broadcast_shapes(gshape, xshape, tshape), dt)
            nbytes = go.nbytes + x.nbytes + t.nbytes + out.nbytes
            def call(go=go, x=x, t=t, reduction=reduction, out=out):
                return padloss.l1_loss_backward(go, x, t, reduction, out=out)
            t0 = time.perf_counter()
            call()
            first = time.perf_counter() - t0
            ceiling = make_stream(reads, out.nbytes // 4)      # float32 words moving out.nbytes each
            nt_ceiling = make_stream(reads, out.nbytes // 4, nontemporal=True)
            as_torch = (lambda a, tdt=tdt: torch.from_numpy(a.view(np.int16)).view(tdt)) \
                if out.itemsize == 2 else torch.from_numpy
            tx = as_torch(x).clone().requires_grad_()
            loss = torch.nn.functional.l1_loss(tx, as_torch(t).expand(tx.shape), reduction=reduction)
            tgo = as_torch(go)
            res = benchmark.interleaved({
                "padloss": (call, nbytes),
                "ceiling": (ceiling, (reads + 1) * out.nbytes),
                "nt ceiling": (nt_ceiling, (reads + 1) * out.nbytes),
                "torch": (lambda loss=loss, tx=tx, tgo=tgo: torch.autograd.grad(loss, tx, tgo,
                                                                               retain_graph=True), nbytes),
            }, rounds=rounds, calls=3)
            rows.append(dict(dtype=name, case=case, first_call_s=first,
                             median_ms=res["padloss"].median_s * 1e3, gbps=res["padloss"].gbps,
                             ceiling_gbps=res["ceiling"].gbps,
                             ratio_to_ceiling=benchmark.ratio(res["padloss"], res["ceiling"]),
                             ratio_to_nt_ceiling=benchmark.ratio(res["padloss"], res["nt ceiling"]),
                             torch_ms=res["torch"].median_s * 1e3,
                             speedup_vs_torch=benchmark.speedup(res["padloss"], res["torch"])))
            del loss, tx
    tiny = [np.array(1.0, np.float32), np.ones((4, 8), np.float32), np.zeros(8, np.float32),
            np.empty((4, 8), np.float32)]
    padloss.l1_loss_backward(*tiny[:3], "mean", out=tiny[3])
    tiny_s = benchmark.time_round(lambda: padloss.l1_loss_backward(*tiny[:3], "mean", out=tiny[3]), 20000)
    return dict(threads=numba.get_num_threads(), thp=os.environ.get("THP_MEM_ALLOC_ENABLE", "0"),
                rows=rows, tiny_call_us=tiny_s * 1e6)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=30_000_000)
    parser.add_argument("--row", type=int, default=10_000, help="N of the broadcast case")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.elements, args.row, args.rounds)))
        return
    for thp in ("0", "1"):
        env = dict(os.environ, THP_MEM_ALLOC_ENABLE=thp)
        cmd = [sys.executable, __file__, "--child", "--rounds", str(args.rounds),
               "--elements", str(args.elements), "--row", str(args.row)]
        report = json.loads(subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout)
        print(f"threads={report['threads']} THP_MEM_ALLOC_ENABLE={thp} elements={args.elements} "
              f"broadcast=({args.elements // args.row}, {args.row}) + ({args.row},)")
        print(f"{'dtype':9} {'case':11} {'first s':>8} {'ms':>7} {'GB/s':>6} {'ceil GB/s':>9} "
              f"{'x ceil':>7} {'x nt':>6} {'torch ms':>9} {'x torch':>8}")
        for r in report["rows"]:
            print(f"{r['dtype']:9} {r['case']:11} {r['first_call_s']:8.3f} {r['median_ms']:7.2f} "
                  f"{r['gbps']:6.1f} {r['ceiling_gbps']:9.1f} {r['ratio_to_ceiling']:7.2f} "
                  f"{r['ratio_to_nt_ceiling']:6.2f} "
                  f"{r['torch_ms']:9.1f} {r['speedup_vs_torch']:8.1f}")
        print(f"tiny (4, 8) float32 mean one-shot call: {report['tiny_call_us']:.2f} us\n")


if __name__ == "__main__":
    main()
