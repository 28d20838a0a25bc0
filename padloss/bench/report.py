"""``padloss bench``'s report: the side-by-side table and the plot, from the JSON report."""
from __future__ import annotations

from ..console import table
from .ceilings import CEILING, CEILING_NT, CEILING_PART, best_ceiling
from .peers import STEP, STEP_BATCH, STEP_MODEL
from .timing import Result, ratio, speedup
from .workloads import AUTOGRAD_PADLOSS, JAX_VJP, TORCH_AUTOGRAD, TORCH_NATIVE, Workload


def result_rows(w: Workload, size: str, dtype: str, results: dict[str, Result]) -> list[dict]:
    """The report's rows of one workload: each result with its ratios to the ceilings and peers."""
    results = dict(results, **{CEILING: best_ceiling(results)})
    ceiling, nt = results[CEILING], results[CEILING_NT]
    torch, native = results.get(TORCH_AUTOGRAD), results.get(TORCH_NATIVE)
    jax = results.get(JAX_VJP)
    found = []
    for name, r in results.items():
        found.append(dict(op=w.label, size=size, dtype=dtype, impl=name, nbytes=r.nbytes,
                         median_s=r.median_s, gbps=r.gbps, ratio_to_ceiling=ratio(r, ceiling),
                         ratio_to_nt=ratio(r, nt),
                         speedup_vs_torch=speedup(r, torch) if torch else None,
                         speedup_vs_native=speedup(r, native) if native else None,
                         speedup_vs_jax=speedup(r, jax) if jax else None,
                         seconds=r.seconds))
    return found


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
    cells = []
    for (op, size, dtype), (ours, *_, theirs) in cases.items():
        cells.append([op, size or str(tuple(ours["shape"])), dtype, _time(ours["median_s"]),
                      _time(theirs["median_s"]), f"{ours['speedup_vs_torch']:.1f}"])
    header = ["through torch autograd", "size", "dtype", AUTOGRAD_PADLOSS, "torch", "x torch"]
    return ["", "through torch autograd, in interleaved rounds of their own. A backward: y.backward(g, "
            "retain_graph=True)",
            "  on one graph built once by padloss.torch.circular_pad2d / l1_loss (torch's forward, padloss's "
            "backward)",
            "  or by F.pad / F.l1_loss, the leaf's .grad reset to None before each call (as zero_grad() "
            "leaves it).",
            f"  {STEP}: {STEP_MODEL},",
            f"  nn.L1Loss and SGD, batch {tuple(STEP_BATCH)} float32: zero_grad, forward, loss, "
            "backward, step, inside",
            f"  `with padloss.torch.patch():` ({AUTOGRAD_PADLOSS} column) or unpatched "
            "(torch column).",
            "  x torch: torch's time / padloss's, median of per-round ratios.",
            "", table(header, cells, {3, 4, 5})]


def _shown_impls(report: dict) -> list[str]:
    """The implementations the table and the plot show, in order: the ceilings' parts are
    in the JSON only; their best and the streamed ceiling are shown."""
    return [impl for impl in dict.fromkeys(r["impl"] for r in report["results"])
            if not impl.startswith(CEILING_PART)]


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
        lines += [f"x torch: speedup over {TORCH_AUTOGRAD}. What runs torch is timed in a child "
                  "process of its own",
                  "  (torch's threads spin after each op and slowed what ran next), "
                  "so x torch and their x ceil",
                  f"  are ratios of medians. {TORCH_NATIVE}: torch's native "
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
    drawn = table(header, rows, {i for i, h in enumerate(header) if i >= 3 and h != "|"}).split("\n")
    above = ""
    for bar, op in zip((i for i, ch in enumerate(drawn[0]) if ch == "|"), ops):
        above = above.ljust(bar) + "| " + op
    lines += [above, *drawn]
    for peer, key in ((TORCH_NATIVE, "speedup_vs_native"), (JAX_VJP, "speedup_vs_jax")):
        # the largest size the peer was timed at (--quick leaves large out)
        timed_at = [size for size in report["sizes"] if any(r["size"] == size and r.get(key)
                                                            for r in report["results"])]
        largest = timed_at[-1] if timed_at else None
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
                            linestyle="--" if impl in (CEILING, CEILING_NT) else "-")
            ax.set(xscale="log", yscale="log", title=f"{op}, {dtype}",
                   xlabel="bytes read + written per call", ylabel="GB/s")
    axes[0][0].legend(fontsize=8)
    threads = report["threads"]
    fig.suptitle(f"padloss {report['padloss']}: numba {threads['numba']} threads, "
                 f"pytorch allocator {report['torch_allocator']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
