"""The ``padloss`` command line: ``info``, ``check``, ``warmup``, ``bench`` and ``cache``.

``padloss`` alone runs ``padloss bench --quick``, the main job: both ops timed
against their peers and against the memory-bandwidth ceiling of this machine.
Each command is one function here over a module that does the work (padloss.check,
padloss.warmup, padloss.bench, the backends' own hooks). torch is optional
everywhere: it is imported only by ``bench`` (in a child process) and ``info``,
and only when it is installed.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import platform
import sys
import time

import padloss

from . import catalogue, dispatch
from .bench.run import THP_VAR
from .bench.workloads import SIZES
from .console import Progress, pool_size, run_jobs
from .quick_exit import quick_exit

NO_SUBCOMMAND = ["bench", "--quick"]


# ---------------------------------------------------------------------------- info

def _versions() -> str:
    parts = [f"Python {platform.python_version()}"]
    for dist in ("numpy", "numba", "ml_dtypes", "torch", "torch_npu"):
        try:
            parts.append(f"{dist} {importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            pass
    return ", ".join(parts)


def _torch_mode() -> str:
    """Which form padloss.torch takes with the installed torch (importing it, if there)."""
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed"
    from padloss.torch import ops

    if ops.CUSTOM_OPS_MISSING is None:
        return "custom ops (torch.ops.padloss, torch.compile fullgraph)"
    return f"Function mode (torch.autograd.Function; no torch.ops.padloss: {ops.CUSTOM_OPS_MISSING})"


def info(args: argparse.Namespace) -> int:
    print(f"padloss {padloss.__version__} ({_versions()})")
    print("backends, highest priority first:")
    for b in padloss.available_backends():
        state = "available" if b.available else "unavailable"
        devices = ",".join(b.devices) or "-"
        row = f"  {b.name:10} {state:11} priority {b.priority:<4} automatic for {devices:5}  {b.reason}"
        print(row.rstrip())
    print(f"padloss.torch: {_torch_mode()}")
    for backend in dispatch.registry.by_priority():
        if backend.availability()[0]:
            for line in backend.describe():
                print(f"{backend.name}: {line}")
    cache = padloss.plan_cache
    print(f"plan cache (this process): {cache.size} of {cache.max_size} plans, "
          f"{cache.hits} hits, {cache.misses} misses")
    print(f"targets (docs/targets.md; this one: {padloss.config.current.target}):")
    for t in padloss.targets():
        runs = ", ".join(op.removesuffix("_backward") for op in t.ops if t.supports(op)) or "neither op"
        print(f"  {t.name:18} {t.product} (runs {runs})")
    print("settings (padloss.config):")
    for s in padloss.config.SETTINGS:
        print(f"  {s.name:13} {getattr(padloss.config.current, s.name)!r:10} {s.variable}")
    return 0


# ---------------------------------------------------------------------------- check, warmup, bench

def check(args: argparse.Namespace) -> int:
    from . import check

    return check.run(target=args.target, ahead=True)


def warmup(args: argparse.Namespace) -> int:
    """Compile (or load) every kernel padloss.warmup() prepares, an op and dtype a job,
    in a pool of child processes (padloss.console.run_jobs)."""
    dtypes = args.dtypes or list(catalogue.WARM_DTYPES)
    ops = list(catalogue.OPS)
    jobs = [(op, ["warmup", op, dtype]) for op in ops for dtype in dtypes]
    progress = Progress(len(jobs))
    t0 = time.perf_counter()
    failed = run_jobs(jobs, progress)
    progress.close()
    seconds = time.perf_counter() - t0
    if failed:
        print(f"padloss warmup: failed for {', '.join(sorted(set(failed)))} (see the errors above)")
        return 1
    print(f"padloss warmup: {len(ops)} ops x {len(dtypes)} dtypes ready in {seconds:.1f} s "
          f"({pool_size(len(jobs))} processes); `padloss info` shows the compile cache")
    return 0


def bench(args: argparse.Namespace) -> int:
    from .bench import run

    return run.bench(args)


# ---------------------------------------------------------------------------- cache

def cache(args: argparse.Namespace) -> int:
    """The Numba backend's compile cache (its ``cache_admin``)."""
    admin = dispatch.registry.backends()["numba"].cache_admin()
    if args.action == "info":
        found = admin.info()
        print(f"compile cache: {found['folder']} ({found['bytes'] / 1e6:.1f} MB)")
        entries = ", ".join(f"{op} {n}" for op, n in sorted(found["entries"].items()))
        indexes = ", ".join(f"{n} {state}" for state, n in sorted(found["indexes"].items()))
        print(f"entries (current sources): {entries or 'none'}")
        print(f"kernel indexes: {indexes or 'none'}")
        for name, size in found["other_versions"].items():
            print(f"other version: {name} ({size / 1e6:.1f} MB; `padloss cache clear --all-versions`)")
        return 0
    if args.action == "verify":
        damaged = admin.verify()
        for path, why in damaged:
            print(f"damaged: {path}: {why}")
        print(f"{len(damaged)} damaged files" if damaged else "every entry loads")
        return 1 if damaged else 0
    removed = admin.clear(every_version=args.all_versions)
    print(f"removed {removed} files of padloss's compiled kernels")
    return 0


# ---------------------------------------------------------------------------- arguments

def _positive(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return n


def _threads(text: str) -> int:
    import numba

    n = int(text)
    if not 1 <= n <= numba.config.NUMBA_NUM_THREADS:
        raise argparse.ArgumentTypeError(f"must be between 1 and {numba.config.NUMBA_NUM_THREADS}")
    return n


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="padloss", description="padloss alone runs `padloss bench --quick`, "
                                  "the main job: both ops timed against their peers and the memory ceiling.")
    top.add_argument("--version", action="version", version=f"padloss {padloss.__version__}")
    sub = top.add_subparsers(dest="command", metavar="{info,check,warmup,bench,cache}")
    sub.add_parser("info", help="version, backends, threads, compile cache and its kernel variants, "
                                     "plan cache, settings")
    k = sub.add_parser("check", help="both ops on every available backend against padloss.reference; "
                                     "exit status 1 on any mismatch")
    k.add_argument("--target", choices=[t.name for t in padloss.targets()], default=None,
                   help="check under this target (docs/targets.md): what its product refuses is "
                        "counted as refused; default: the target setting")
    w = sub.add_parser("warmup", help="compile (or load) the common kernels ahead, one process per CPU",
                       description="Compile, or load from the disk cache, the kernels padloss.warmup() "
                                   "prepares (serial and parallel variants), an op and dtype a job, in a "
                                   "pool of one process per CPU.")
    w.add_argument("--dtypes", nargs="+", choices=list(catalogue.CHECK_DTYPES),
                   default=None, help=f"default: {', '.join(catalogue.WARM_DTYPES)}")
    b = sub.add_parser("bench", help="time both ops against their peers and the bandwidth ceiling",
                       description="Time both ops on every available backend, PyTorch CPU autograd and "
                                   "JAX's jitted vjp (each if installed, in a child process of its own) "
                                   "and the NumPy reference, with streaming ceiling kernels of the same "
                                   "read/write mix, in interleaved rounds.")
    b.add_argument("--quick", action="store_true",
                   help="float32 only, 3 short rounds, the backends of CPU arrays only, the peers "
                        "up to medium: about 10 seconds")
    b.add_argument("--sizes", nargs="+", choices=list(SIZES), default=list(SIZES))
    b.add_argument("--dtypes", nargs="+", choices=list(catalogue.BENCH_DTYPES), default=None,
                   help="default: all (float32 with --quick)")
    b.add_argument("--rounds", type=_positive, default=None,
                   help="interleaved rounds (default 7, 3 with --quick)")
    b.add_argument("--reduction", choices=["mean", "none", "sum"], default="mean", help="L1's (default mean)")
    b.add_argument("--threads", type=_threads, default=None, help="numba and torch threads (default: as set)")
    b.add_argument("--no-torch", action="store_true", help="leave PyTorch out even if installed")
    b.add_argument("--no-jax", action="store_true", help="leave JAX out even if installed")
    b.add_argument("--thp", action="store_true",
                   help=f"run in a child process with {THP_VAR}=1 (torch's huge-page allocator)")
    b.add_argument("--json", action="store_true", help="print the full report as JSON instead of the table")
    b.add_argument("--cold", action="store_true",
                   help="time the start on an empty compile cache instead: each op's first call, "
                        "`padloss check` and the main job, also in reference compile units (minutes)")
    b.add_argument("--plot", metavar="FILE.png", help="also plot GB/s against size (needs matplotlib)")
    c = sub.add_parser("cache", help="the compile cache: info, verify (exit 1 on a damaged entry), clear",
                       description="info: its folder, size, entries per op and stale versions; verify: "
                                   "read every entry back, report damaged files; clear: remove padloss's "
                                   "entries, each under its lock (safe while other processes use it).")
    c.add_argument("action", choices=["info", "verify", "clear"])
    c.add_argument("--all-versions", action="store_true",
                   help="clear: also the folders of other padloss and Numba versions")
    return top


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv) or NO_SUBCOMMAND
    args = parser().parse_args(argv)
    args.argv = argv
    commands = {"info": info, "check": check, "warmup": warmup, "bench": bench, "cache": cache}
    status = commands[args.command](args)
    if argv is NO_SUBCOMMAND:
        print("\n(the quick run; `padloss bench` times every dtype and the peers at large, "
              "`padloss check` compares with padloss.reference, `padloss info` shows the set-up)")
    return status


def run() -> None:
    """The ``padloss`` script and ``python -m padloss``: :func:`main`, then the end of
    the process without the interpreter's teardown (padloss.quick_exit)."""
    quick_exit(main())
