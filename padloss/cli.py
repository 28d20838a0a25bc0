"""The ``padloss`` command line.

With no arguments it shows the op working: the spec's worked example, then
one timed call on a real-sized tensor.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import padloss


def _demo() -> int:
    go = np.ones((1, 1, 7), np.float32)
    out = padloss.circular_pad2d_backward(go, np.empty((1, 1, 5), np.float32), [1, 1, 0, 0])
    print("spec example: gradOutput [[[1 1 1 1 1 1 1]]], padding [1, 1, 0, 0]")
    print(f"  gradInput {out.astype(int).tolist()}  (spec: [[[2, 1, 1, 1, 2]]])")
    shape, pads = (16, 64, 256, 256), (3, 3, 3, 3)
    go = np.random.default_rng(0).standard_normal((16, 64, 262, 262), dtype=np.float32)
    out = np.empty(shape, np.float32)
    t0 = time.perf_counter()
    padloss.circular_pad2d_backward(go, out, pads, out=out)
    first = time.perf_counter() - t0
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        padloss.circular_pad2d_backward(go, out, pads, out=out)
        times.append(time.perf_counter() - t0)
    t = float(np.median(times))
    gbytes = (go.nbytes + out.nbytes) / 1e9
    print(f"float32 {shape}, padding {list(pads)}: first call {first * 1e3:.0f} ms, "
          f"then median {t * 1e3:.1f} ms = {gbytes / t:.1f} GB/s read+written")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="padloss", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"padloss {padloss.__version__}")
    parser.parse_args(argv)
    return _demo()
