"""The ``padloss`` command line: ``info``, ``check``, ``warmup``, ``bench`` and ``cache``.

``padloss`` alone runs ``padloss bench --quick``, the main job: both ops timed
against their peers and against the memory-bandwidth ceiling of this machine.
torch is optional everywhere: it is imported only by ``bench``, and only when
it is installed.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import platform
import subprocess
import sys
from typing import Any, Callable, NamedTuple, TextIO

import numpy as np

import padloss
from padloss import benchmark, reference
from padloss.arrays import numpy_dtype
from padloss.warmup import DTYPES as WARMUP_DTYPES
from padloss.warmup import OPS as WARMUP_OPS

THP_VAR = "THP_MEM_ALLOC_ENABLE"   # torch's huge-page allocator; read when torch starts
MATPLOTLIB_MISSING = 2             # exit status of ``bench --plot`` without matplotlib
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


def _numba_threads() -> tuple[str, int]:
    """(threading layer, thread count); the layer is only known after a parallel launch."""
    import numba

    from padloss_numba.stream import make_stream

    make_stream(1, 1)
    return numba.threading_layer(), numba.get_num_threads()


def _compile_cache() -> str:
    from padloss_numba import disk_cache

    folder = disk_cache.cache_dir()
    files = [p for p in folder.glob("*") if p.is_file()] if folder.is_dir() else []
    why = disk_cache.untrusted(folder)
    state = ("on" if not why else f"not used: {why} (PADLOSS_CACHE_TRUSTED=1 trusts it)") \
        if disk_cache.ENABLED else "off (PADLOSS_NUMBA_CACHE=0)"
    size = sum(p.stat().st_size for p in files) / 1e6
    return f"{folder} ({state}; {len(files)} files, {size:.1f} MB)"


def _compiled_variants() -> list[str]:
    """Lines naming the kernel variants the compile cache holds for the current sources."""
    from padloss_numba import variants

    found, stale = variants.listing()
    bodies = sum(len(v["bodies"]) for v in found.values())
    lines = [f"compiled variants (current sources): {bodies} bodies for {len(found)} op/dtype sets"
             + (f"; {stale} records of older sources, whose files are stale" if stale else "")]
    for (op, dtypes), v in sorted(found.items()):
        lines.append(f"  {op:24} {dtypes:42} bodies: {', '.join(sorted(v['bodies']))}"
                     f" | entries: {', '.join(sorted(v['entries'], reverse=True))}")
    return lines


def info(args: argparse.Namespace) -> int:
    print(f"padloss {padloss.__version__} ({_versions()})")
    print("backends, highest priority first:")
    for b in padloss.available_backends():
        state = "available" if b.available else "unavailable"
        devices = ",".join(b.devices) or "-"
        row = f"  {b.name:10} {state:11} priority {b.priority:<4} automatic for {devices:5}  {b.reason}"
        print(row.rstrip())
    print(f"padloss.torch: {_torch_mode()}")
    layer, threads = _numba_threads()
    print(f"numba: threading layer {layer}, {threads} threads ({os.cpu_count()} CPUs)")
    print(f"compile cache: {_compile_cache()}")
    print("\n".join(_compiled_variants()))
    cache = padloss.plan_cache
    print(f"plan cache (this process): {cache.size} of {cache.max_size} plans, "
          f"{cache.hits} hits, {cache.misses} misses")
    print("settings (padloss.config):")
    for s in padloss.config.SETTINGS:
        print(f"  {s.name:13} {getattr(padloss.config.current, s.name)!r:10} {s.variable}")
    return 0


# ---------------------------------------------------------------------------- cache

def cache(args: argparse.Namespace) -> int:
    from padloss_numba import cache_admin

    if args.action == "info":
        found = cache_admin.info()
        print(f"compile cache: {found['folder']} ({found['bytes'] / 1e6:.1f} MB)")
        entries = ", ".join(f"{op} {n}" for op, n in sorted(found["entries"].items()))
        indexes = ", ".join(f"{n} {state}" for state, n in sorted(found["indexes"].items()))
        print(f"entries (current sources): {entries or 'none'}")
        print(f"kernel indexes: {indexes or 'none'}")
        for name, size in found["other_versions"].items():
            print(f"other version: {name} ({size / 1e6:.1f} MB; `padloss cache clear --all-versions`)")
        return 0
    if args.action == "verify":
        damaged = cache_admin.verify()
        for path, why in damaged:
            print(f"damaged: {path}: {why}")
        print(f"{len(damaged)} damaged files" if damaged else "every entry loads")
        return 1 if damaged else 0
    removed = cache_admin.clear(every_version=args.all_versions)
    print(f"removed {removed} files of padloss's compiled kernels")
    return 0


# ---------------------------------------------------------------------------- progress

class Progress:
    """A one-line bar on stderr, redrawn in place (only on a terminal)."""

    WIDTH = 24

    def __init__(self, total: int, stream: TextIO | None = None):
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty()
        self.total, self.done = total, 0

    def step(self, label: str) -> None:
        """Show that ``label`` starts (steps taken in order)."""
        self._draw(label)
        self.done += 1

    def finished(self, label: str) -> None:
        """Count one step done (in whatever order steps finish) and show it."""
        self.done += 1
        self._draw(label)

    def _draw(self, label: str) -> None:
        if self.enabled:
            filled = self.WIDTH * self.done // self.total
            self.stream.write(f"\r[{'#' * filled}{'.' * (self.WIDTH - filled)}] "
                              f"{self.done}/{self.total} {label:<50.50}")
            self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\r" + " " * (self.WIDTH + 62) + "\r")
            self.stream.flush()


# ---------------------------------------------------------------------------- check

CHECK_DTYPES = ("float32", "float16", "bfloat16", "float64")


def _values(shape: tuple[int, ...], dtype: str, seed: int) -> np.ndarray:
    """Normal values with infinities, NaNs, signed zeros and half-overflow values sprinkled in."""
    import ml_dtypes  # its finfo knows bfloat16 too; imported only here (0.9 s, see numpy_dtype)

    dt = numpy_dtype(dtype)
    x = np.random.default_rng(seed).standard_normal(shape) * 4
    flat = x.reshape(-1)
    flat[::17] = float(ml_dtypes.finfo(dt).max) / 2
    flat[3::29], flat[5::31], flat[7::37], flat[11::13] = np.inf, -np.inf, np.nan, -0.0
    return x.astype(dt)


class CheckCase(NamedTuple):
    op: str
    name: str
    dtype: str
    compute: Callable[[str], Any]         # backend name -> padloss's result
    expected: Callable[[], np.ndarray]    # padloss.reference's result


def _pad_case(name: str, dtype: str, shape: tuple, pads: tuple, layout: str = "contiguous") -> CheckCase:
    left, right, top, bottom = pads
    padded = shape[:-2] + (shape[-2] + top + bottom, shape[-1] + left + right)
    if layout == "strided":       # every other column of a wider array
        go = _values(padded[:-1] + (2 * padded[-1],), dtype, 0)[..., ::2]
    elif layout == "channels-last":
        go = np.moveaxis(_values((padded[0],) + padded[2:] + (padded[1],), dtype, 0), -1, 1)
    else:
        go = _values(padded, dtype, 0)

    def compute(backend: str):
        out = np.full(shape, 7, go.dtype)   # anything left unwritten shows up
        return padloss.circular_pad2d_backward(go, out, pads, out=out, backend=backend)

    return CheckCase("circular_pad2d_backward", name, dtype, compute,
                     lambda: reference.circular_pad2d_backward(go, shape, pads))


def _l1_case(name: str, dtype: str, shapes: tuple, reduction: str, *, target_dtype: str | None = None,
             out_dtype: str | None = None, strided: bool = False) -> CheckCase:
    gshape, xshape, tshape = shapes
    go = _values(gshape, dtype, 0)
    x = _values(xshape[:-1] + (2 * xshape[-1],), dtype, 1)[..., ::2] if strided else _values(xshape, dtype, 1)
    if target_dtype is None:
        t = _values(tshape, dtype, 2)
    else:                                                # small integers, some equal to self
        t = np.random.default_rng(2).integers(-2, 3, tshape).astype(target_dtype)
    if xshape == tshape and target_dtype is None:
        t.reshape(-1)[::7] = x.reshape(-1)[::7]          # equal values: sign 0
    out_dt = numpy_dtype(out_dtype) if out_dtype else np.dtype(reference.promote(go.dtype, x.dtype, t.dtype))

    def compute(backend: str):
        out = np.full(np.broadcast_shapes(gshape, xshape, tshape), 7, out_dt)
        return padloss.l1_loss_backward(go, x, t, reduction, out=out, backend=backend)

    return CheckCase("l1_loss_backward", name, dtype, compute,
                     lambda: reference.l1_loss_backward(go, x, t, reduction, out_dtype=out_dt))


def check_cases() -> list[CheckCase]:
    """A spread of calls: both ranks, cropping and wrapping pads, strided and
    broadcast inputs, every reduction, serial and parallel sizes, every dtype."""
    cases = []
    for dt in CHECK_DTYPES:
        other = "float16" if dt != "float16" else "float32"
        cases += [
            _pad_case("3-D (1, 1, 5), pads (1, 1, 0, 0)", dt, (1, 1, 5), (1, 1, 0, 0)),
            _pad_case("(2, 3, 8, 8), pads 3", dt, (2, 3, 8, 8), (3, 3, 3, 3)),
            _pad_case("asymmetric pads (5, 2, 4, 7)", dt, (2, 4, 16, 24), (5, 2, 4, 7)),
            _pad_case("negative pads crop (-2, 3, 1, -1)", dt, (2, 3, 9, 10), (-2, 3, 1, -1)),
            _pad_case("pads = size - 1", dt, (1, 2, 5, 6), (5, 5, 4, 4)),
            _pad_case("strided grad_output", dt, (2, 3, 8, 8), (2, 1, 1, 2), "strided"),
            _pad_case("parallel (4, 16, 64, 64)", dt, (4, 16, 64, 64), (1, 2, 3, 4)),
            _pad_case("parallel, channels-last", dt, (4, 16, 64, 64), (3, 3, 3, 3), "channels-last"),
        ]
        same = ((2, 3, 8, 8),) * 3
        cases += [
            _l1_case("none", dt, same, "none"),
            _l1_case("mean, 0-d grad_output", dt, ((), (2, 3, 8, 8), (2, 3, 8, 8)), "mean"),
            _l1_case("sum, 0-d grad_output", dt, ((), (5, 7), (5, 7)), "sum"),
            _l1_case("broadcast (4,5,6) (4,1,6) (5,1)", dt, ((4, 5, 6), (4, 1, 6), (5, 1)), "none"),
            _l1_case("int32 target", dt, same, "none", target_dtype="int32"),
            _l1_case(f"out in {other}", dt, same, "mean", out_dtype=other),
            _l1_case("strided self", dt, same, "none", strided=True),
            _l1_case("parallel mean, broadcast target", dt, ((), (64, 1024), (1024,)), "mean"),
            _l1_case("parallel none (4, 16, 64, 64)", dt, ((4, 16, 64, 64),) * 3, "none"),
        ]
    return cases


def differing(got: Any, want: np.ndarray) -> int:
    """Elements whose bits differ (two NaNs match whatever their payload)."""
    got = np.asarray(got)
    if got.shape != want.shape or got.dtype != want.dtype:
        return max(want.size, 1)
    bits = np.dtype(f"u{got.itemsize}")
    same = got.view(bits) == want.view(bits)
    nan = np.isnan(got.astype(np.float64)) & np.isnan(want.astype(np.float64))
    return int(np.count_nonzero(~(same | nan)))


def _table(header: list[str], rows: list[list[str]], right: set[int] = frozenset()) -> str:
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    cell = lambda r, i: r[i].rjust(widths[i]) if i in right else r[i].ljust(widths[i])  # noqa: E731
    return "\n".join("  ".join(cell(r, i) for i in range(len(header))).rstrip() for r in [header] + rows)


def check(args: argparse.Namespace) -> int:
    backends = [b.name for b in padloss.available_backends() if b.available]
    print(f"padloss check: both ops on {', '.join(backends)} against padloss.reference, "
          f"bit for bit (NaN payloads aside)")
    rows, notes, failed = [], [], 0
    cases = check_cases()
    progress = Progress(len(cases))
    for case in cases:
        progress.step(f"{case.op} {case.name}, {case.dtype}")
        want = case.expected()
        cells = []
        for backend in backends:
            try:
                bad = differing(case.compute(backend), want)
            except padloss.PadlossError as exc:
                cells.append("n/a")
                notes.append(f"n/a  {backend}, {case.op} {case.name}, {case.dtype}: {exc}")
                continue
            except Exception as exc:   # a crash is a failure too, reported with the rest
                cells.append("ERROR")
                notes.append(f"ERROR  {backend}, {case.op} {case.name}, {case.dtype}: {exc!r}")
                failed += 1
                continue
            cells.append("ok" if not bad else f"MISMATCH {bad}/{want.size}")
            failed += bool(bad)
        rows.append([case.op, case.name, case.dtype] + cells)
    progress.close()
    print(_table(["op", "case", "dtype"] + backends, rows))
    for note in notes:
        print(note)
    checked = len(rows) * len(backends)
    print(f"{failed} of {checked} checks failed" if failed else f"all {checked} checks match")
    return 1 if failed else 0


# ---------------------------------------------------------------------------- warmup

def compile_in_children(scripts: dict[str, list[str]], progress: Progress) -> list[str]:
    """Run ``python -c script args...`` for each label (label -> [script, args...]) all
    at once, Numba compiling on one core in each (their cache writes are locked:
    padloss_numba.disk_cache); each line a child prints counts one step of
    ``progress`` done. Returns the labels whose child failed."""
    import selectors

    children = {label: subprocess.Popen([sys.executable, "-c", *argv], stdout=subprocess.PIPE, text=True)
                for label, argv in scripts.items()}
    selector = selectors.DefaultSelector()
    for label, child in children.items():
        selector.register(child.stdout, selectors.EVENT_READ, label)
    open_pipes = len(children)
    while open_pipes:
        for key, _ in selector.select():
            line = key.fileobj.readline()
            if not line:
                selector.unregister(key.fileobj)
                open_pipes -= 1
                continue
            progress.finished(f"{key.data}, {line.strip()} ready")
    return [label for label, child in children.items() if child.wait() != 0]


# A child's script: warm one op's kernels, one dtype at a time, saying when each is done.
_WARMUP_CHILD = """
import sys, padloss
op, *dtypes = sys.argv[1:]
for dtype in dtypes:
    padloss.warmup(ops=[op], dtypes=[dtype])
    print(dtype, flush=True)
"""


def warmup(args: argparse.Namespace) -> int:
    """Compile (or load) every kernel padloss.warmup() prepares, one child process
    per op, all at once."""
    import time

    dtypes = args.dtypes or list(WARMUP_DTYPES)
    ops = list(WARMUP_OPS)
    progress = Progress(len(ops) * len(dtypes))
    t0 = time.perf_counter()
    failed = compile_in_children({op: [_WARMUP_CHILD, op, *dtypes] for op in ops}, progress)
    progress.close()
    seconds = time.perf_counter() - t0
    if failed:
        print(f"padloss warmup: failed for {', '.join(failed)} (see the errors above)")
        return 1
    print(f"padloss warmup: {len(ops)} ops x {len(dtypes)} dtypes ready in {seconds:.1f} s "
          f"({len(ops)} processes); compile cache: {_compile_cache()}")
    return 0


# ---------------------------------------------------------------------------- bench

def _rerun_with_thp(argv: list[str]) -> int:
    """torch reads THP_MEM_ALLOC_ENABLE only at start-up: run the whole bench
    again in a child process that has it set (so every ratio is still taken
    in interleaved rounds within one process)."""
    env = dict(os.environ, **{THP_VAR: "1"})
    rest = [a for a in argv if a != "--thp"]
    return subprocess.run([sys.executable, "-m", "padloss", *rest], env=env).returncode


def _rows(w: benchmark.Workload, size: str, dtype: str, results: dict[str, benchmark.Result]) -> list[dict]:
    results = dict(results, **{benchmark.CEILING: benchmark.best_ceiling(results)})
    ceiling, nt = results[benchmark.CEILING], results[benchmark.CEILING_NT]
    torch, native = results.get(benchmark.TORCH_AUTOGRAD), results.get(benchmark.TORCH_NATIVE)
    jax = results.get(benchmark.JAX_VJP)
    rows = []
    for name, r in results.items():
        rows.append(dict(op=w.label, size=size, dtype=dtype, impl=name, nbytes=r.nbytes,
                         median_s=r.median_s, gbps=r.gbps, ratio_to_ceiling=benchmark.ratio(r, ceiling),
                         ratio_to_nt=benchmark.ratio(r, nt),
                         speedup_vs_torch=benchmark.speedup(r, torch) if torch else None,
                         speedup_vs_native=benchmark.speedup(r, native) if native else None,
                         speedup_vs_jax=benchmark.speedup(r, jax) if jax else None,
                         seconds=r.seconds))
    return rows


def _latency(reduction: str, rounds: int, round_s: float) -> list[dict]:
    """The tiny float32 call, one-shot and as a cached executor's run(), interleaved."""
    rows = []
    for op in ("pad", "l1"):
        w = benchmark.workload(op, "float32", "tiny", reduction)
        runs = {"one-shot call": w.padloss(None), "executor.run()": w.executor().run}
        calls = {name: benchmark.calls_per_round(fn, round_s) for name, fn in runs.items()}
        timed = {name: (fn, w.nbytes) for name, fn in runs.items()}
        results = benchmark.interleaved(timed, rounds, calls, warmup=0)
        rows += [dict(op=w.label, call=n, median_s=r.median_s) for n, r in results.items()]
    return rows


def autograd_sizes(args: argparse.Namespace) -> list[str]:
    """The sizes of the through-autograd rows: every size asked for; tiny alone with --quick
    (torch's autograd takes seconds a call on the large pad)."""
    return [s for s in args.sizes if s == "tiny" or not args.quick]


def _autograd_rows(op: str, size: str | None, shape: tuple[int, ...], dtype: str,
                   runs: dict[str, Callable[[], object]], args: argparse.Namespace) -> list[dict]:
    """Time the candidates (padloss's first, torch's last) in interleaved rounds;
    x torch is over the last one."""
    calls = {name: benchmark.calls_per_round(fn, args.round_s) for name, fn in runs.items()}
    timed = benchmark.interleaved({name: (fn, 0) for name, fn in runs.items()}, args.rounds, calls,
                                  warmup=0)
    peer = timed[list(timed)[-1]]
    return [dict(op=op, size=size, shape=list(shape), dtype=dtype, impl=name, median_s=r.median_s,
                 speedup_vs_torch=benchmark.speedup(r, peer), seconds=r.seconds) for name, r in timed.items()]


def _autograd_backward(w: benchmark.Workload, size: str, dtype: str, args: argparse.Namespace,
                       not_measured: dict[str, str]) -> list[dict]:
    try:
        runs = benchmark.autograd_backward(w)
    except padloss.PadlossError as exc:
        not_measured[f"{benchmark.AUTOGRAD_PADLOSS}, {w.label}, {size}, {dtype}"] = str(exc)
        return []
    return _autograd_rows(w.label, size, w.out.shape, dtype, runs, args)


def _workloads(args: argparse.Namespace):
    """(op, size, dtype) of every workload the bench times, in order."""
    return [(op, size, dtype) for size in args.sizes for dtype in args.dtypes for op in ("pad", "l1")]


def _time_candidates(w: benchmark.Workload, found: dict, refused: dict[str, str], args: argparse.Namespace,
                     not_measured: dict[str, str], group: str, compiles: bool = True
                     ) -> dict[str, benchmark.Result]:
    """Interleaved rounds of ``found``; ``compiles=False`` for callables that compile
    nothing on a first call (torch's), which then make no untimed calls."""
    not_measured.update({f"{name}, {w.label}": why for name, why in refused.items()})
    if not compiles:
        return benchmark.sized_rounds(found, args.rounds, args.round_s, group=group)
    calls = {name: benchmark.calls_per_round(fn, args.round_s) for name, (fn, _) in found.items()}
    return benchmark.interleaved(found, rounds=args.rounds, calls=calls, warmup=0, group=group)


PEERS = ("torch", "jax")
"""The frameworks timed as peers, each in a child process of its own (peer_side), as
Result.group: after each parallel op their threads spin for a while (torch's
OpenMP ones halved the medium pad's and its ceiling's measured bandwidth on 2
cores), so nothing of theirs runs in the process that times padloss's kernels."""


def peer_side(spec: dict) -> None:
    """The bench's timings of one peer framework (``spec["peer"]``), run in a child
    process: per workload, for torch the padloss backends of ``spec["backends"]`` that
    run its ops, its autograd and native kernel, then the rows through torch
    autograd and the training step; for jax its jitted vjp. It first imports its
    framework (torch also makes each tiny call once, untimed: their lazy start-ups)
    and waits for a line on stdin, the parent's go. Prints "step <label>" as each
    workload starts, then "report <json>"."""
    args = argparse.Namespace(**spec)
    not_measured: dict[str, str] = {}
    through_autograd, threads = False, None   # the padloss.torch rows: torch's child, where it imports
    if args.peer == "torch":
        import torch

        if args.threads:
            torch.set_num_threads(args.threads)
        threads = torch.get_num_threads()
        missing = benchmark.padloss_torch_missing()
        through_autograd = missing is None
        if missing is not None:
            not_measured[benchmark.AUTOGRAD_PADLOSS] = missing
        padloss.available_backends()   # imports each backend (Numba's loads its kernels after the go)
        for op in ("pad", "l1"):   # lazy start-ups (torch's autograd, padloss's torch backend), untimed
            warm, _ = benchmark.torch_candidates(benchmark.workload(op, "float32", "tiny", args.reduction),
                                                 args.backends)
            for fn, _ in warm.values():
                fn()
    else:
        import jax.numpy  # noqa: F401  (its import, while the parent still compiles)
    sys.stdin.readline()   # the parent's go: its compiles are done and nothing else runs

    def step(label: str) -> None:
        print("step", label, flush=True)

    results, autograd = {}, []
    for op, size, dtype in _workloads(args):
        step(f"{op}, {size}, {dtype}: {args.peer}")
        w = benchmark.workload(op, dtype, size, args.reduction)
        if args.peer == "torch":
            found, refused = benchmark.torch_candidates(w, args.backends)
        else:
            found, refused = benchmark.jax_candidates(w), {}
        # torch compiles nothing on a first call (padloss's backends here were called once), jax's jit does
        timed = _time_candidates(w, found, refused, args, not_measured, args.peer,
                                 compiles=args.peer != "torch")
        results[f"{op} {size} {dtype}"] = [list(r) for r in timed.values()]
        if through_autograd and size in autograd_sizes(args):
            step(f"{op} through torch autograd, {size}, {dtype}")
            autograd += _autograd_backward(w, size, dtype, args, not_measured)
    if through_autograd:
        step("training step, patched and not")
        autograd += _autograd_rows(benchmark.STEP, None, benchmark.STEP_BATCH, "float32",
                                   benchmark.training_step(), args)
    print("report", json.dumps(dict(results=results, autograd=autograd, not_measured=not_measured,
                                    threads=threads)), flush=True)


_PEER_CHILD = """
import json, sys
from padloss import cli
cli.peer_side(json.loads(sys.argv[1]))
"""


def _peer_steps(args: argparse.Namespace, peer: str) -> int:
    """How many progress steps a peer's child takes."""
    if peer == "torch":
        return (len(args.sizes) + len(autograd_sizes(args))) * len(args.dtypes) * 2 + 1
    return len(_workloads(args))


def _peers(args: argparse.Namespace) -> dict[str, str | None]:
    """Each peer framework -> None when it is timed, else why not."""
    installed = {"torch": benchmark.torch_installed(), "jax": benchmark.jax_installed()}
    why = {}
    for peer in PEERS:
        if not installed[peer]:
            why[peer] = "not installed"
        elif getattr(args, f"no_{peer}"):
            why[peer] = f"--no-{peer}"
        else:
            why[peer] = None
    return why


def _start_peer_sides(args: argparse.Namespace, backends: list[str]) -> dict[str, subprocess.Popen]:
    """Start each timed peer's child (peer_side). It imports its framework and warms it
    up while this process compiles, then waits: :func:`_peer_report` sets it timing
    once nothing else runs."""
    torch_backends = [b for b in backends if b in benchmark.TORCH_BACKENDS]
    spec = dict(sizes=args.sizes, dtypes=args.dtypes, reduction=args.reduction, rounds=args.rounds,
                round_s=args.round_s, quick=args.quick, threads=args.threads, backends=torch_backends)
    return {peer: subprocess.Popen([sys.executable, "-c", _PEER_CHILD, json.dumps(dict(spec, peer=peer))],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            for peer, why in _peers(args).items() if why is None}


def _peer_report(peer: str, child: subprocess.Popen, progress: Progress) -> dict:
    """Let a started peer child time its workloads, its steps drawn on ``progress``; its report."""
    try:
        child.stdin.write("go\n")
        child.stdin.close()
    except BrokenPipeError:   # it died while starting: its errors are above, its exit status below
        pass
    report = None
    for line in child.stdout:
        kind, _, rest = line.rstrip("\n").partition(" ")
        if kind == "step":
            progress.step(rest)
        elif kind == "report":
            report = json.loads(rest)
    if child.wait() != 0 or report is None:
        raise RuntimeError(f"padloss bench: the child process timing {peer} failed (see its errors above)")
    return report


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

    cpu_start = benchmark.cpu_seconds()
    if args.threads:
        numba.set_num_threads(args.threads)
    not_measured.update({"pytorch" if peer == "torch" else peer: why
                         for peer, why in _peers(args).items() if why})
    if "large" in args.sizes:
        not_measured[benchmark.REFERENCE] = "at large (a model, not a kernel: 0.2 to 2 s a call)"
    torch_backends = [b for b in backends if b in benchmark.TORCH_BACKENDS]
    sides = {peer: _peer_report(peer, child, progress) for peer, child in peer_children.items()}
    for side in sides.values():
        not_measured.update(side["not_measured"])
    results = []
    for op, size, dtype in _workloads(args):
        progress.step(f"{op}, {size}, {dtype}")
        w = benchmark.workload(op, dtype, size, args.reduction)
        found, refused = benchmark.candidates(w, [b for b in backends if b not in torch_backends],
                                              reference=size != "large")
        timed = _time_candidates(w, found, refused, args, not_measured, "")
        theirs = {r[0]: benchmark.Result(*r) for side in sides.values()
                  for r in side["results"].get(f"{op} {size} {dtype}", [])}
        ours = {name: r for name, r in timed.items() if name.startswith("padloss ")}
        results += _rows(w, size, dtype, {**ours, **theirs, **timed})   # padloss's, the peers', the rest
    progress.step("latency of the tiny call")
    latency = _latency(args.reduction, args.rounds, args.round_s)
    progress.step("first result in a fresh process")
    first = benchmark.first_result_s(runs=1 if args.quick else 3, warm_first=not args.quick)
    layer, threads = _numba_threads()
    return dict(padloss=padloss.__version__, threading_layer=layer, cpus=os.cpu_count(),
                others_busy_cores=benchmark.others_busy_cores(cpu_start, benchmark.cpu_seconds()),
                threads=dict(numba=threads, torch=sides["torch"]["threads"] if "torch" in sides else None),
                torch_allocator=f"{THP_VAR}={os.environ[THP_VAR]}" if THP_VAR in os.environ else "default",
                rounds=args.rounds, sizes={s: benchmark.SIZES[s] for s in args.sizes},
                padding=benchmark.PADDING, dtypes=args.dtypes, results=results,
                autograd=sides["torch"]["autograd"] if "torch" in sides else [],
                not_measured=not_measured, latency=latency, first_result_s=first)


def _time(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    return f"{seconds * 1e3:.2f} ms" if seconds < 1 else f"{seconds:.2f} s"


def _cells(row: dict | None) -> list[str]:
    if row is None:
        return [""] * 5
    speedup = row["speedup_vs_torch"]
    return [_time(row["median_s"]), f"{row['gbps']:.2f}", f"{row['ratio_to_ceiling']:.2f}",
            f"{row['ratio_to_nt']:.2f}", "-" if speedup is None else f"{speedup:.1f}"]


def _autograd_report(rows: list[dict]) -> list[str]:
    """The through-autograd rows, one line per case: padloss's time, torch's, x torch."""
    if not rows:
        return []
    cases: dict[tuple, list[dict]] = {}
    for r in rows:
        cases.setdefault((r["op"], r["size"], r["dtype"]), []).append(r)
    table = []
    for (op, size, dtype), (ours, *_, theirs) in cases.items():
        table.append([op, size or str(tuple(ours["shape"])), dtype, _time(ours["median_s"]),
                      _time(theirs["median_s"]), f"{ours['speedup_vs_torch']:.1f}"])
    header = ["through torch autograd", "size", "dtype", benchmark.AUTOGRAD_PADLOSS, "torch", "x torch"]
    return ["", "through torch autograd, in interleaved rounds of their own. A backward: y.backward(g, "
            "retain_graph=True)",
            "  on one graph built once by padloss.torch.circular_pad2d / l1_loss (torch's forward, padloss's "
            "backward)",
            "  or by F.pad / F.l1_loss, the leaf's .grad reset to None before each call (as zero_grad() "
            "leaves it).",
            f"  {benchmark.STEP}: {benchmark.STEP_MODEL},",
            f"  nn.L1Loss and SGD, batch {tuple(benchmark.STEP_BATCH)} float32: zero_grad, forward, loss, "
            "backward, step, inside",
            f"  `with padloss.torch.patch():` ({benchmark.AUTOGRAD_PADLOSS} column) or unpatched "
            "(torch column).",
            "  x torch: torch's time / padloss's, median of per-round ratios.",
            "", _table(header, table, {3, 4, 5})]


def _shown_impls(report: dict) -> list[str]:
    """The implementations the table and the plot show, in order: the ceilings' parts are
    in the JSON only; their best and the streamed ceiling are shown."""
    return [impl for impl in dict.fromkeys(r["impl"] for r in report["results"])
            if not impl.startswith(benchmark.CEILING_PART)]


def format_report(report: dict) -> str:
    """The side-by-side table (one column group per op), then latency."""
    ops = list(dict.fromkeys(r["op"] for r in report["results"]))
    by_key = {(r["size"], r["dtype"], r["impl"], r["op"]): r for r in report["results"]}
    threads = report["threads"]
    torch = "not measured" if threads["torch"] is None else \
        f"{threads['torch']} threads, allocator {report['torch_allocator']}"
    lines = [
        f"padloss {report['padloss']} bench: numba {threads['numba']} threads ({report['threading_layer']} "
        f"layer); pytorch {torch}",
        "other processes kept " + ("? (unknown here)" if report["others_busy_cores"] is None else
                                   f"{report['others_busy_cores']:.2f}") + f" of {report['cpus']} CPUs busy "
        "during the run (any load slows parallel calls down)",
        "sizes (self's shape; padding 3 on every side): "
        + ", ".join(f"{s} {tuple(shape)}" for s, shape in report["sizes"].items()),
        f"{report['rounds']} interleaved rounds per size, dtype and op. time: median per call. "
        "GB/s: bytes read + written / time.",
        "x ceil: GB/s / the ceiling's: per round, the best of a prange kernel and NumPy's own streaming",
        "  the op's read/write mix (pad: a copy; L1: 2 reads + 1 write, 3 + 1 for none) in normal",
        "  stores, timed in the same rounds. x nt: / the same mix with the output streamed past the",
        "  caches (non-temporal stores, from 16 MiB), as L1 and the 16-bit pad stream their large",
        "  outputs (so x ceil can pass 1 there).",
    ]
    if threads["torch"] is not None:
        lines += [f"x torch: speedup over {benchmark.TORCH_AUTOGRAD}. What runs torch is timed in a child "
                  "process of its own",
                  "  (torch's threads spin after each op and slowed what ran next), "
                  "so x torch and their x ceil",
                  f"  are ratios of medians. {benchmark.TORCH_NATIVE}: torch's native "
                  "reflection_pad2d_backward on the same shapes."]
    lines += [""]
    header = ["size", "dtype", "implementation"]
    for _ in ops:
        header += ["|", "time", "GB/s", "x ceil", "x nt", "x torch"]
    impls = _shown_impls(report)
    rows, last = [], None
    for size in report["sizes"]:
        for dtype in report["dtypes"]:
            for impl in impls:
                found = [by_key.get((size, dtype, impl, op)) for op in ops]
                if not any(found):
                    continue
                rows.append([*((size, dtype) if (size, dtype) != last else ("", "")), impl]
                            + sum((["|"] + _cells(r) for r in found), []))
                last = (size, dtype)
    table = _table(header, rows, {i for i, h in enumerate(header) if i >= 3 and h != "|"}).split("\n")
    above = ""
    for bar, op in zip((i for i, ch in enumerate(table[0]) if ch == "|"), ops):
        above = above.ljust(bar) + "| " + op
    lines += [above, *table]
    largest = list(report["sizes"])[-1]
    for peer, key in ((benchmark.TORCH_NATIVE, "speedup_vs_native"), (benchmark.JAX_VJP, "speedup_vs_jax")):
        cells: dict[str, list[str]] = {}
        for r in report["results"]:
            if r["size"] == largest and r["impl"].startswith("padloss") and r.get(key):
                cells.setdefault(f"{r['impl']}, {r['op']}", []).append(f"{r['dtype']} {r[key]:.1f}x")
        if cells:
            lines += ["", f"speedup over {peer} at {largest} (medians: timed in its own process):"]
            lines += [f"  {impl}: {', '.join(c)}" for impl, c in cells.items()]
    lines += _autograd_report(report["autograd"])
    if report["not_measured"]:
        lines += ["", "not measured:"] + [f"  {name}: {why}" for name, why in report["not_measured"].items()]
    lines += ["", "tiny float32 call, automatic backend (interleaved rounds):"]
    lines += [f"  {r['op']:28} {r['call']:15} {_time(r['median_s'])}" for r in report["latency"]]
    lines += [f"first result in a fresh process (import padloss + first call, warm compile cache): "
              f"{report['first_result_s']:.3f} s"]
    return "\n".join(lines)


def plot(report: dict, path: str) -> None:
    """Bandwidth against bytes moved, one line per implementation; one panel per op and dtype."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ops = list(dict.fromkeys(r["op"] for r in report["results"]))
    impls = _shown_impls(report)
    dtypes = report["dtypes"]
    fig, axes = plt.subplots(len(ops), len(dtypes), figsize=(4.8 * len(dtypes), 3.8 * len(ops)),
                             squeeze=False, sharex=True)
    for i, op in enumerate(ops):
        for j, dtype in enumerate(dtypes):
            ax = axes[i][j]
            for k, impl in enumerate(impls):   # one colour per implementation in every panel
                points = sorted((r["nbytes"], r["gbps"]) for r in report["results"]
                                if (r["op"], r["dtype"], r["impl"]) == (op, dtype, impl))
                if points:
                    ax.plot(*zip(*points), marker="o", label=impl, color=f"C{k}",
                            linestyle="--" if impl in (benchmark.CEILING, benchmark.CEILING_NT) else "-")
            ax.set(xscale="log", yscale="log", title=f"{op}, {dtype}",
                   xlabel="bytes read + written per call", ylabel="GB/s")
    axes[0][0].legend(fontsize=8)
    threads = report["threads"]
    fig.suptitle(f"padloss {report['padloss']}: numba {threads['numba']} threads, "
                 f"pytorch allocator {report['torch_allocator']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# A child's script: compile (or load) what the bench times for one op, a size and dtype at a time,
# and with the first of them the ceiling kernels of the mixes it is given (counts of input streams).
_PREPARE_CHILD = """
import logging, sys
from padloss import benchmark
logging.getLogger("padloss").setLevel(logging.ERROR)   # its note on slow first calls: asked for here
op, reduction, sizes, dtypes = sys.argv[1], sys.argv[2], sys.argv[3].split(","), sys.argv[4].split(",")
mixes = [int(n) for n in sys.argv[5].split(",") if n]
for size in sizes:
    for dtype in dtypes:
        benchmark.prepare(benchmark.workload(op, dtype, size, reduction, filled=False), mixes)
        mixes = []
        print(size, dtype, flush=True)
"""


def compile_ahead(args: argparse.Namespace) -> dict[str, list[str]]:
    """The children (one per op, see compile_in_children) that compile the bench's
    kernels before it measures, when the compile cache holds no pad kernel of the
    bench's dtypes for the current sources: a first run, whose compiles would
    otherwise run one after another on one core. None when the cache holds them,
    or when the Numba backend or its disk cache is off (a child's compile would be lost)."""
    if not any(b.name == "numba" and b.available for b in padloss.available_backends()):
        return {}
    from padloss_numba import disk_cache, variants

    found, _ = variants.listing()
    if not disk_cache.ENABLED or any((benchmark.PadWorkload.op, d) in found for d in args.dtypes):
        return {}
    # the pad child compiles every ceiling kernel too, evening out the children: the L1
    # child's kernels take longer (outputs it streams are a variant of their own)
    mixes = sorted({benchmark.workload(op, "float32", "tiny", args.reduction, filled=False).ceiling_inputs
                    for op in ("pad", "l1")})
    return {op: [_PREPARE_CHILD, op, args.reduction, ",".join(args.sizes), ",".join(args.dtypes),
                 ",".join(map(str, mixes)) if op == "pad" else ""]
            for op in ("pad", "l1")}


def bench(args: argparse.Namespace) -> int:
    if args.thp and os.environ.get(THP_VAR) != "1":
        return _rerun_with_thp(args.argv)
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        print("padloss bench: --plot needs matplotlib, which is not installed "
              "(pip install matplotlib); nothing was measured", file=sys.stderr)
        return MATPLOTLIB_MISSING
    if args.quick:
        args.dtypes = args.dtypes or ["float32"]
        args.rounds = args.rounds or 3
    args.dtypes = args.dtypes or list(benchmark.DTYPES)
    args.rounds = args.rounds or 7
    args.round_s = 0.005 if args.quick else 0.02
    groups = len(_workloads(args)) + 2 + sum(_peer_steps(args, peer) for peer, why in _peers(args).items()
                                             if why is None)
    ahead = compile_ahead(args)
    progress = Progress(groups + len(ahead) * len(args.sizes) * len(args.dtypes))
    backends, not_measured = _backends(args)
    peer_children = _start_peer_sides(args, backends)   # importing their frameworks meanwhile
    try:
        if ahead:
            print(f"padloss bench: compiling its kernels first, {len(ahead)} processes at once (the first "
                  "run of these sources; later runs load them)", file=sys.stderr)
            compile_in_children(ahead, progress)   # what a failed child left, the bench compiles itself
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
    sub.add_parser("check", help="both ops on every available backend against padloss.reference; "
                                 "exit status 1 on any mismatch")
    w = sub.add_parser("warmup", help="compile (or load) the common kernels ahead, one process per op",
                       description="Compile, or load from the disk cache, the kernels padloss.warmup() "
                                   "prepares (serial and parallel variants), all ops at once.")
    w.add_argument("--dtypes", nargs="+", choices=["float16", "bfloat16", "float32", "float64"],
                   default=None, help="default: float16, bfloat16, float32")
    b = sub.add_parser("bench", help="time both ops against their peers and the bandwidth ceiling",
                       description="Time both ops on every available backend, PyTorch CPU autograd and "
                                   "JAX's jitted vjp (each if installed, in a child process of its own) "
                                   "and the NumPy reference, with streaming ceiling kernels of the same "
                                   "read/write mix, in interleaved rounds.")
    b.add_argument("--quick", action="store_true",
                   help="float32 only, 3 short rounds, the backends of CPU arrays only: about 16 seconds")
    b.add_argument("--sizes", nargs="+", choices=list(benchmark.SIZES), default=list(benchmark.SIZES))
    b.add_argument("--dtypes", nargs="+", choices=list(benchmark.DTYPES), default=None,
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
        print("\n(the quick run; `padloss bench` times every dtype, `padloss check` compares with "
              "padloss.reference, `padloss info` shows the set-up)")
    return status
