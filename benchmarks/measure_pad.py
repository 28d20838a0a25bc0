"""Closing-note numbers for circular_pad2d_backward (not a test; timings only).

Runs itself in two subprocesses, torch's default allocator and
THP_MEM_ALLOC_ENABLE=1 (torch reads it at start-up), and in each times, in
interleaved rounds: padloss (preallocated out), a parallel copy of the same
bytes, and torch autograd's backward of F.pad(mode="circular").
Usage: python benchmarks/measure_pad.py [--shape 16 64 256 256] [--rounds 7]
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


def measure(shape, pads, rounds):
    import numba
    import torch

    import padloss
    from padloss import benchmark
    from padloss_numba.stream import make_stream

    left, right, top, bottom = pads
    gshape = shape[:-2] + (shape[-2] + top + bottom, shape[-1] + left + right)
    rows = []
    for name, dt in DTYPES.items():
        go = np.random.default_rng(0).standard_normal(gshape, dtype=np.float32).astype(dt)
        out = np.empty(shape, dt)
        nbytes = go.nbytes + out.nbytes
        t0 = time.perf_counter()
        padloss.circular_pad2d_backward(go, out, pads, out=out)
        first = time.perf_counter() - t0
        copy = make_stream(1, out.nbytes // 4)          # float32 words: read + write out.nbytes each
        tdt = getattr(torch, name)
        x = torch.zeros(shape, dtype=tdt, requires_grad=True)
        y = torch.nn.functional.pad(x, pads, mode="circular")
        tgo = torch.from_numpy(go.view(np.int16)).view(tdt) if go.itemsize == 2 else torch.from_numpy(go)
        res = benchmark.interleaved({
            "padloss": (lambda: padloss.circular_pad2d_backward(go, out, pads, out=out), nbytes),
            "copy": (copy, 2 * out.nbytes),
            "torch": (lambda: torch.autograd.grad(y, x, tgo, retain_graph=True), nbytes),
        }, rounds=rounds, calls=3)
        rows.append(dict(dtype=name, first_call_s=first, median_ms=res["padloss"].median_s * 1e3,
                         gbps=res["padloss"].gbps, copy_gbps=res["copy"].gbps,
                         ratio_to_copy=benchmark.ratio(res["padloss"], res["copy"]),
                         torch_ms=res["torch"].median_s * 1e3,
                         speedup_vs_torch=benchmark.speedup(res["padloss"], res["torch"])))
    tiny_go, tiny_out = np.ones((2, 3, 10, 10), np.float32), np.empty((2, 3, 8, 8), np.float32)
    padloss.circular_pad2d_backward(tiny_go, tiny_out, (1, 1, 1, 1), out=tiny_out)
    tiny = benchmark.time_round(lambda: padloss.circular_pad2d_backward(tiny_go, tiny_out, (1, 1, 1, 1),
                                                                        out=tiny_out), 20000)
    return dict(threads=numba.get_num_threads(), thp=os.environ.get("THP_MEM_ALLOC_ENABLE", "0"),
                rows=rows, tiny_call_us=tiny * 1e6)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", type=int, nargs=4, default=[16, 64, 256, 256])
    parser.add_argument("--pads", type=int, nargs=4, default=[3, 3, 3, 3])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(tuple(args.shape), tuple(args.pads), args.rounds)))
        return
    for thp in ("0", "1"):
        env = dict(os.environ, THP_MEM_ALLOC_ENABLE=thp)
        cmd = [sys.executable, __file__, "--child", "--rounds", str(args.rounds),
               "--shape", *map(str, args.shape), "--pads", *map(str, args.pads)]
        report = json.loads(subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout)
        print(f"threads={report['threads']} THP_MEM_ALLOC_ENABLE={thp} shape={args.shape} pads={args.pads}")
        print(f"{'dtype':9} {'first s':>8} {'ms':>8} {'GB/s':>7} {'copy GB/s':>9} {'x copy':>7} "
              f"{'torch ms':>9} {'x torch':>8}")
        for r in report["rows"]:
            print(f"{r['dtype']:9} {r['first_call_s']:8.3f} {r['median_ms']:8.2f} {r['gbps']:7.1f} "
                  f"{r['copy_gbps']:9.1f} {r['ratio_to_copy']:7.2f} {r['torch_ms']:9.1f} "
                  f"{r['speedup_vs_torch']:8.1f}")
        print(f"tiny (2, 3, 8, 8) float32 one-shot call: {report['tiny_call_us']:.2f} us\n")


if __name__ == "__main__":
    main()
