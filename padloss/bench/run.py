"""``padloss bench``: both ops timed against their peers and their ceilings.

The parent process times padloss's own backends and the ceilings; each peer
framework times in a child of its own (padloss.bench.peers); on a first run of new
sources a pool of child processes compiles the kernels ahead (padloss.child).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys

import padloss

from .. import dispatch
from ..catalogue import BENCH_DTYPES, BENCHED
from ..console import Progress, compile_first
from . import peers, rounds, timing
from .report import format_report, plot, result_rows
from .workloads import PADDING, REFERENCE, SIZES, TORCH_BACKENDS, candidates, workload

THP_VAR = "THP_MEM_ALLOC_ENABLE"   # torch's huge-page allocator; read when torch starts
MATPLOTLIB_MISSING = 2             # exit status of ``bench --plot`` without matplotlib
FIRST_RESULT = os.path.join(os.path.dirname(__file__), "first_result.py")


def _numba_threads() -> tuple[str, int]:
    """(Numba's threading layer, its thread count); the layer is known once a parallel
    kernel has run (the ceilings' have, by the end of a bench)."""
    import numba

    try:
        layer = numba.threading_layer()
    except ValueError:
        layer = "not started"
    return layer, numba.get_num_threads()


def first_result_s(runs: int = 3, warm_first: bool = True) -> float:
    """Seconds from ``import padloss`` to a first result, in a fresh interpreter
    (numpy already imported) with a warm compile cache: the median of ``runs``,
    after one run that warms the cache unless ``warm_first`` is off (the caller
    has just run the same call, the tiny float32 pad)."""
    times = []
    for _ in range(runs + warm_first):
        done = subprocess.run([sys.executable, FIRST_RESULT], capture_output=True, text=True, check=True)
        times.append(float(done.stdout))
    return statistics.median(times[warm_first:])


def _rerun_with_thp(argv: list[str]) -> int:
    """torch reads THP_MEM_ALLOC_ENABLE only at start-up: run the whole bench
    again in a child process that has it set (so every ratio is still taken
    in interleaved rounds within one process)."""
    env = dict(os.environ, **{THP_VAR: "1"})
    rest = [a for a in argv if a != "--thp"]
    return subprocess.run([sys.executable, "-m", "padloss", *rest], env=env).returncode


def _latency(reduction: str, n_rounds: int, round_s: float) -> list[dict]:
    """The tiny float32 call, one-shot and as a cached executor's run(), interleaved."""
    rows = []
    for op in BENCHED:
        w = workload(op, "float32", "tiny", reduction)
        runs = {"one-shot call": w.padloss(None), "executor.run()": w.executor().run}
        calls = {name: timing.calls_per_round(fn, round_s) for name, fn in runs.items()}
        timed = {name: (fn, w.nbytes) for name, fn in runs.items()}
        results = timing.interleaved(timed, n_rounds, calls, warmup=0)
        rows += [dict(op=w.label, call=n, median_s=r.median_s) for n, r in results.items()]
    return rows


def _backends(args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
    """The padloss backends the bench times, and why each other one is not timed."""
    infos = padloss.available_backends()
    not_measured = {f"padloss {b.name}": b.reason for b in infos if not b.available}
    backends = [b.name for b in infos if b.available]
    if args.quick:   # the backends padloss picks for NumPy arrays: a CPU one computes where they live
        not_measured.update({f"padloss {b.name}": f"--quick (computes on {', '.join(b.devices)}; "
                             "`padloss bench` times it on the CPU too)"
                             for b in infos if b.available and "cpu" not in b.devices})
        backends = [b.name for b in infos if b.available and "cpu" in b.devices]
    return backends, not_measured


def _measure(args: argparse.Namespace, progress: Progress, backends: list[str],
             not_measured: dict[str, str], peer_children: dict[str, subprocess.Popen]) -> dict:
    import numba

    cpu_start = timing.cpu_seconds()
    if args.threads:
        numba.set_num_threads(args.threads)
    timed_at = rounds.peer_sizes(args)
    left_out = ", ".join(size for size in args.sizes if size not in timed_at)
    for peer, why in peers.timed(args).items():
        name = "pytorch" if peer == "torch" else peer
        if why:
            not_measured[name] = why
        elif left_out:
            not_measured[f"{name} at {left_out}"] = "--quick (`padloss bench` times it there too)"
    if "large" in args.sizes:
        not_measured[REFERENCE] = "at large (a model, not a kernel: 0.2 to 2 s a call)"
    torch_backends = [b for b in backends if b in TORCH_BACKENDS]
    sides = {peer: peers.report(peer, child, progress) for peer, child in peer_children.items()}
    for side in sides.values():
        not_measured.update(side["not_measured"])
    results = []
    for op, size, dtype in rounds.workloads(args):
        progress.step(f"{op}, {size}, {dtype}")
        w = workload(op, dtype, size, args.reduction)
        found, refused = candidates(w, [b for b in backends if b not in torch_backends],
                                    reference=size != "large")
        timed = rounds.time_candidates(w, found, refused, args, not_measured, "")
        theirs = {r[0]: timing.Result(*r) for side in sides.values()
                  for r in side["results"].get(f"{op} {size} {dtype}", [])}
        ours = {name: r for name, r in timed.items() if name.startswith("padloss ")}
        # padloss's first, the peers', the rest
        results += result_rows(w, size, dtype, {**ours, **theirs, **timed})
    progress.step("latency of the tiny call")
    latency = _latency(args.reduction, args.rounds, args.round_s)
    progress.step("first result in a fresh process")
    first = first_result_s(runs=1 if args.quick else 3, warm_first=not args.quick)
    layer, threads = _numba_threads()
    return dict(padloss=padloss.__version__, threading_layer=layer, cpus=os.cpu_count(),
                others_busy_cores=timing.others_busy_cores(cpu_start, timing.cpu_seconds()),
                threads=dict(numba=threads, torch=sides["torch"]["threads"] if "torch" in sides else None),
                torch_allocator=f"{THP_VAR}={os.environ[THP_VAR]}" if THP_VAR in os.environ else "default",
                rounds=args.rounds, sizes={s: SIZES[s] for s in args.sizes},
                padding=PADDING, dtypes=args.dtypes, results=results,
                autograd=sides["torch"]["autograd"] if "torch" in sides else [],
                not_measured=not_measured, latency=latency, first_result_s=first)


def compile_ahead(args: argparse.Namespace) -> list[tuple[str, list[str]]]:
    """The compile jobs (``python -m padloss.child prepare`` and ``ceilings``, for
    padloss.console.run_jobs) of the bench's kernels, when an available backend would
    compile some of them (``dispatch.would_compile``): a first run, whose compiles would
    otherwise run one after another on one core; none when every backend would load or
    has nothing to compile. Two jobs an op and dtype: the larger sizes (large first: a job
    of its own for the large outputs compiled the pad's body a second time, beside the
    medium one's job; its large outputs only add the streamed rows), then the tiny size
    (the pad's rows too narrow for windows run a body of their own, compiled beside the
    other jobs; L1's tiny job shares its body with the larger sizes' job ahead of it, and
    mostly finds it compiled); then one job a ceiling's mix, so that the cores share them
    as the ops' jobs end."""
    if not dispatch.would_compile([(op.name, dtype) for op in BENCHED.values() for dtype in args.dtypes]):
        return []
    larger = [size for size in sorted(args.sizes, key=lambda size: size != "large") if size != "tiny"]
    groups = [",".join(sizes) for sizes in (larger, [size for size in args.sizes if size == "tiny"]) if sizes]
    jobs = [(op, ["prepare", op, args.reduction, sizes, dtype])
            for sizes in groups for dtype in args.dtypes for op in BENCHED]
    mixes = sorted({workload(op, "float32", "tiny", args.reduction, filled=False).ceiling_inputs
                    for op in BENCHED})
    return jobs + [("ceilings", ["ceilings", str(n_inputs)]) for n_inputs in mixes]


def bench(args: argparse.Namespace) -> int:
    """``padloss bench`` with its parsed arguments (padloss.cli); the exit status."""
    if args.cold:
        from . import cold

        return cold.main()
    if args.thp and os.environ.get(THP_VAR) != "1":
        return _rerun_with_thp(args.argv)
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        print("padloss bench: --plot needs matplotlib, which is not installed "
              "(pip install matplotlib); nothing was measured", file=sys.stderr)
        return MATPLOTLIB_MISSING
    if args.quick:
        args.dtypes = args.dtypes or ["float32"]
        args.rounds = args.rounds or 3
    args.dtypes = args.dtypes or list(BENCH_DTYPES)
    args.rounds = args.rounds or 7
    args.round_s = 0.005 if args.quick else 0.02
    groups = len(rounds.workloads(args)) + 2 + sum(peers.steps(args, peer)
                                                   for peer, why in peers.timed(args).items() if why is None)
    ahead = compile_ahead(args)
    # a prepare job prints a line a size, a ceilings job one
    progress = Progress(groups + sum(len(args.sizes) if argv[0] == "prepare" else 1 for _, argv in ahead))
    backends, not_measured = _backends(args)
    peer_children = peers.start(args, backends)   # importing their frameworks meanwhile
    try:
        if ahead:
            compile_first("padloss bench", ahead, progress)
        report = _measure(args, progress, backends, not_measured, peer_children)
    finally:
        progress.close()
        for child in peer_children.values():   # still waiting if the bench failed first
            if child.poll() is None:
                child.kill()
    print(json.dumps(report, indent=1) if args.json else format_report(report))
    if args.plot:
        plot(report, args.plot)
        print(f"plot written to {args.plot}", file=sys.stderr)
    return 0
