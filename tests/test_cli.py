"""The ``padloss`` command line: output structure and exit codes (never timings)."""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
import types

import numpy as np
import pytest
from test_lazy_imports import HIDE_TORCH

import bounds
import padloss
from padloss import catalogue, check, cli, console, reference
from padloss.bench import ceilings, peers, rounds, run, timing, workloads
from padloss.bench import report as bench_report

OPS = ("circular_pad2d_backward", "l1_loss_backward (mean)")


def run_cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = cli.main(list(argv))
    return status, out.getvalue()


@pytest.fixture(scope="module")
def report() -> dict:
    """One short bench run, as JSON (1 round, tiny only)."""
    status, out = run_cli("bench", "--quick", "--sizes", "tiny", "--rounds", "1", "--json")
    assert status == 0
    return json.loads(out)


def test_info_shows_version_backends_threads_and_caches():
    status, out = run_cli("info")
    assert status == 0
    lines = out.splitlines()
    assert lines[0].startswith(f"padloss {padloss.__version__} (Python ")
    for b in padloss.available_backends():
        row = next(line for line in lines if line.split()[:1] == [b.name])
        assert ("available" if b.available else "unavailable") in row.split()
        assert b.reason in row
    assert any(line.startswith("numba: threading layer ") and " threads " in line for line in lines)
    assert any(line.startswith("numba: compile cache: ") for line in lines)
    assert any(line.startswith("plan cache (this process): ") for line in lines)
    settings = lines[lines.index("settings (padloss.config):") + 1:]
    for s, line in zip(padloss.config.SETTINGS, settings):
        assert line.split() == [s.name, repr(getattr(padloss.config.current, s.name)), s.variable]


_VARIANTS = """
import numpy as np, padloss
from padloss import cli
padloss.circular_pad2d_backward(np.ones((2, 3, 10, 10), np.float32), np.empty((2, 3, 8, 8), np.float32),
                                (1, 1, 1, 1))
padloss.l1_loss_backward(np.float32(1), np.ones((2, 3), np.float32), np.zeros(3, np.int32), "sum")
cli.main(["info"])
"""


def test_info_lists_the_compiled_variants_of_the_current_sources():
    env = {k: v for k, v in os.environ.items() if k != "PADLOSS_NUMBA_CACHE"}   # the disk cache on
    done = subprocess.run([sys.executable, "-c", _VARIANTS], capture_output=True, text=True, check=True,
                          env=env)
    lines = [line.removeprefix("numba: ") for line in done.stdout.splitlines()]   # the backend's own lines
    head = next(line for line in lines if line.startswith("compiled variants (current sources): "))
    assert int(head.split(": ")[1].split()[0]) >= 2   # bodies

    def cells(line):   # the bodies and the entries a line lists
        bodies, entries = line.split(" bodies: ")[1].split(" | entries: ")
        return bodies.split(", "), entries.split(", ")

    pad = cells(next(line for line in lines if line.split()[:2] == ["circular_pad2d_backward", "float32"]))
    assert "C-contiguous" in pad[0] and "serial" in pad[1]
    l1 = cells(next(line for line in lines if line.split()[:1] == ["l1_loss_backward"]
                    and "float32, float32, int32 -> float32 " in line))
    assert "exact" in l1[0] and "serial" in l1[1]   # "sum", grad_output in the output's dtype


def test_variant_records_of_older_sources_count_as_stale(tmp_path, monkeypatch):
    from padloss_numba import disk_cache, variants

    monkeypatch.setattr(variants, "ENABLED", True)
    with padloss.config.set(cache_dir=str(tmp_path)):
        monkeypatch.setattr(variants, "source_stamp", lambda: "older sources")
        variants.record("l1_loss_backward", "float32, float32, float32 -> float32", "exact", True)
        variants.record("l1_loss_backward", "float32, float32, float32 -> float32", "exact", True)  # once
        monkeypatch.setattr(variants, "source_stamp", disk_cache.source_stamp)
        variants.record("circular_pad2d_backward", "float16", "any layout", False)
        found, stale = variants.listing()
    assert stale == 1
    assert found == {("circular_pad2d_backward", "float16"):
                     {"bodies": {"any layout"}, "entries": {"serial"}}}


class Terminal(io.StringIO):
    """stderr as a terminal: where the progress bar draws."""

    def isatty(self) -> bool:
        return True


def test_check_passes_on_every_available_backend(monkeypatch):
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setattr(padloss.dispatch, "would_compile", lambda calls: False)   # no compile jobs first
    status, out = run_cli("check")
    drawn = terminal.getvalue().split("\r")
    cases = catalogue.check_cases()
    first, last = cases[0], cases[-1]
    label = f"{first.op} {first.name}, {first.dtype}"[:50]             # labels are cut at 50
    assert drawn[1] == f"[{'.' * console.Progress.WIDTH}] 0/{len(cases)} {label}"
    assert drawn[-3].split()[1:3] == [f"{len(cases) - 1}/{len(cases)}", last.op]
    assert drawn[-1] == "" and drawn[-2].strip() == ""        # cleared before the table
    backends = [b.name for b in padloss.available_backends() if b.available]
    lines = out.splitlines()
    assert status == 0, out
    assert lines[1].split() == ["op", "case", "dtype"] + backends
    rows = [line for line in lines if line.startswith(("circular_pad2d_backward", "l1_loss_backward"))]
    assert len(rows) == len(catalogue.check_cases())
    assert all(set(row.split()[-len(backends):]) <= {"ok", "n/a"} for row in rows)
    assert lines[-1] == f"all {len(rows) * len(backends)} checks match"


def test_a_first_check_compiles_its_kernels_ahead_an_op_and_dtype_a_job(monkeypatch, capsys):
    handed, run_jobs = [], console.run_jobs
    monkeypatch.setattr(console, "run_jobs", lambda jobs, progress: handed.extend(jobs) or [])
    monkeypatch.setattr(padloss.dispatch, "would_compile", lambda calls: False)
    cases = catalogue.check_cases()
    check.compile_ahead(cases, "atlas-a2")
    assert handed == []                                               # a later run loads them
    monkeypatch.setattr(padloss.dispatch, "would_compile", lambda calls: True)
    check.compile_ahead(cases, "atlas-a2")
    assert sorted(argv for _, argv in handed) == sorted(
        ["check", op, dtype, "atlas-a2"] for op in catalogue.OPS for dtype in catalogue.CHECK_DTYPES)
    assert "compiling its kernels first" in capsys.readouterr().err
    terminal = Terminal()                                             # one such job, run
    assert run_jobs([("l1", ["check", "l1_loss_backward", "float32", "spec"])],
                    console.Progress(1, terminal)) == []
    assert "l1, float32 ready" in terminal.getvalue()


def test_check_under_a_target_counts_what_its_product_refuses(monkeypatch):
    """atlas-inference runs no circular pad and takes no bfloat16 L1: those calls are refused
    with their statuses, the others still checked; the exit status is 0."""
    picked = {}
    for case in catalogue.check_cases():
        picked.setdefault((case.op, case.dtype), case)
    cases = [picked[("circular_pad2d_backward", "float32")], picked[("l1_loss_backward", "float32")],
             picked[("l1_loss_backward", "bfloat16")]]
    monkeypatch.setattr(catalogue, "check_cases", lambda: cases)
    status, out = run_cli("check", "--target", "atlas-inference")
    assert status == 0, out
    rows = {}
    for line in out.splitlines():
        if line.startswith(("circular_pad2d_backward", "l1_loss_backward")):
            op, _, rest = line.partition(" ")
            dtype, cells = re.search(r"\b(float16|bfloat16|float32)\b +(.*)$", rest).groups()
            rows[op, dtype] = cells.split()
    assert set(rows[("circular_pad2d_backward", "float32")]) == {"refused", "561103"}
    assert "refused" not in rows[("l1_loss_backward", "float32")]
    assert set(rows[("l1_loss_backward", "bfloat16")]) == {"refused", "161002"}
    assert "target atlas-inference" in out.splitlines()[0]
    assert out.splitlines()[-1].endswith("calls refused by target atlas-inference (docs/targets.md)")
    assert padloss.config.current.target == "spec"       # put back


def test_check_exits_1_on_a_mismatch(monkeypatch):
    cases = [c for c in catalogue.check_cases() if c.dtype == "float32"][:3]
    monkeypatch.setattr(catalogue, "check_cases", lambda: cases)
    wrong = reference.circular_pad2d_backward
    monkeypatch.setattr(reference, "circular_pad2d_backward", lambda *a, **kw: wrong(*a, **kw) + 1)
    status, out = run_cli("check")
    assert status == 1
    assert "MISMATCH" in out
    assert out.splitlines()[-1].endswith("checks failed")


def test_check_counts_a_crash_as_a_failure(monkeypatch):
    def crash(backend):
        raise RuntimeError("boom")

    case = catalogue.check_cases()[0]._replace(compute=crash)
    monkeypatch.setattr(catalogue, "check_cases", lambda: [case])
    monkeypatch.setattr(padloss.dispatch, "would_compile", lambda calls: False)   # nothing to compile
    status, out = run_cli("check")
    assert status == 1
    assert "ERROR" in out and "boom" in out


def test_differing_compares_bits_and_lets_nans_match():
    nan_a = np.array([0x7FC00000, 0x7FC00001], np.uint32).view(np.float32)
    assert check.differing(nan_a, nan_a[::-1].copy()) == 0
    assert check.differing(np.array([0.0, 1.0], np.float32), np.array([-0.0, 1.0], np.float32)) == 1
    assert check.differing(np.zeros(3, np.float16), np.zeros(3, np.float32)) == 3


def test_bench_json_holds_every_implementation_and_the_latencies(report):
    assert report["padloss"] == padloss.__version__
    assert report["sizes"] == {"tiny": list(workloads.SIZES["tiny"])}
    assert report["dtypes"] == ["float32"] and report["rounds"] == 1
    assert report["threads"]["numba"] >= 1
    assert report["others_busy_cores"] is None or 0 <= report["others_busy_cores"] <= report["cpus"]
    impls = ["padloss numba", "padloss numba" + workloads.RUN, workloads.REFERENCE, ceilings.CEILING,
             ceilings.CEILING_NT, ceilings.CEILING_PART + "prange", ceilings.CEILING_PART + "numpy"]
    if peers.installed("torch"):
        impls += [workloads.TORCH_AUTOGRAD]
        assert report["torch_allocator"] in ("default", f"{run.THP_VAR}={os.environ.get(run.THP_VAR)}")
    for op in OPS:
        rows = {r["impl"]: r for r in report["results"] if r["op"] == op}
        assert set(impls) <= set(rows)
        for r in rows.values():
            assert r["median_s"] > 0 and r["gbps"] > 0 and r["ratio_to_ceiling"] > 0
            assert len(r["seconds"]) == 1 and r["nbytes"] > 0
        assert rows[ceilings.CEILING]["ratio_to_ceiling"] == pytest.approx(1)
        assert rows[ceilings.CEILING_NT]["ratio_to_nt"] == pytest.approx(1)
        # the ceiling is, round by round, the fastest of the normal-store implementations
        parts = [rows[ceilings.CEILING_PART + name]["seconds"] for name in ("prange", "numpy")]
        assert rows[ceilings.CEILING]["seconds"] == [min(t) for t in zip(*parts)]
        if peers.installed("torch"):
            assert rows[workloads.TORCH_AUTOGRAD]["speedup_vs_torch"] == pytest.approx(1)
    assert {(r["op"], r["call"]) for r in report["latency"]} == \
        {(op, call) for op in OPS for call in ("one-shot call", "executor.run()")}
    assert report["first_result_s"] > 0
    assert "padloss ascend" in report["not_measured"] or \
        next(b for b in padloss.available_backends() if b.name == "ascend").available
    # --quick times the backends padloss picks for NumPy arrays; the others are named, with why
    for b in padloss.available_backends():
        timed = any(r["impl"] == f"padloss {b.name}" for r in report["results"])
        assert timed == (b.available and "cpu" in b.devices), b.name
        if b.available and not timed:
            assert report["not_measured"][f"padloss {b.name}"].startswith("--quick")


@pytest.mark.parametrize("n_inputs", [1, 2, 3])
@pytest.mark.parametrize("skip", [0, 4, 6])
def test_ceilings_write_the_sum_of_their_inputs(n_inputs, skip):
    """Every ceiling makes the pass it stands for: out = the inputs' sum, left to right,
    streamed or not; the streamed one's lines start wherever the output lies (``skip``
    bytes past a line: misaligned elements at 6 stream nothing), with ends that are no
    whole line."""
    from layouts import output_at
    from padloss_numba.nontemporal import STREAM_MIN_BYTES

    n = STREAM_MIN_BYTES // 4 + 37
    rng = np.random.default_rng(n_inputs)
    inputs = tuple(rng.standard_normal(n, dtype=np.float32) for _ in range(n_inputs))
    expected = inputs[0].copy()
    for a in inputs[1:]:
        expected += a
    out = output_at((n,), np.float32, skip)
    found = ceilings.ceilings_over(inputs, out)   # the Numba backend's yardsticks and NumPy's
    assert set(found) == {"prange", "nt"} | ({"numpy"} if n_inputs < 3 else set())
    for name, fn in found.items():
        out[...] = np.nan
        fn()
        np.testing.assert_array_equal(out, expected, err_msg=name)


def test_bench_table_puts_the_ops_side_by_side(report):
    lines = bench_report.format_report(report).splitlines()
    top = next(i for i, line in enumerate(lines) if line.lstrip().startswith("| circular_pad2d_backward"))
    assert [cell.strip() for cell in lines[top].split("|")[1:]] == list(OPS)
    assert lines[top + 1].split() == ["size", "dtype", "implementation"] + \
        ["|", "time", "GB/s", "x", "ceil", "x", "nt", "x", "torch"] * 2
    rows = lines[top + 2:lines.index("", top)]
    assert rows[0].split()[:4] == ["tiny", "float32", "padloss", "numba"]
    assert any(row.split()[:1] == ["ceiling"] for row in rows)
    assert any(row.split()[:2] == ["ceiling", "nt"] for row in rows)
    assert not any(row.split()[:2] in (["ceiling", "prange"], ["ceiling", "numpy"]) for row in rows)
    assert all(row.count("|") == 2 for row in rows)
    assert any(line.startswith("first result in a fresh process") for line in lines)


def test_bench_json_times_the_torch_autograd_path_and_a_training_step(report):
    if not peers.installed("torch"):
        assert report["autograd"] == []
        return
    pairs = [(op, "tiny", [*workloads.SIZES["tiny"]], (workloads.AUTOGRAD_PADLOSS, workloads.TORCH_AUTOGRAD))
             for op in OPS]
    pairs += [(peers.STEP, None, [*peers.STEP_BATCH], (peers.PATCHED, peers.UNPATCHED))]
    rows = report["autograd"]
    assert [(r["op"], r["size"], r["shape"], r["dtype"], r["impl"]) for r in rows] == \
        [(op, size, shape, "float32", impl) for op, size, shape, impls in pairs for impl in impls]
    for ours, peer in zip(rows[::2], rows[1::2]):
        assert ours["median_s"] > 0 and ours["speedup_vs_torch"] > 0 and len(ours["seconds"]) == 1
        assert peer["median_s"] > 0 and peer["speedup_vs_torch"] == pytest.approx(1)


def test_bench_table_lists_the_torch_autograd_rows(report):
    lines = bench_report.format_report(report).splitlines()
    header = ["through", "torch", "autograd", "size"]
    found = [i for i, line in enumerate(lines) if line.split()[:4] == header]
    if not peers.installed("torch"):
        assert found == []
        return
    top, = found
    assert lines[top].split()[4:] == ["dtype", workloads.AUTOGRAD_PADLOSS, "torch", "x", "torch"]
    rows = lines[top + 1:lines.index("", top)]
    assert [row[:len(op)] for row, op in zip(rows, [*OPS, peers.STEP])] == [*OPS, peers.STEP]
    assert len(rows) == 3 and rows[0].split()[1:3] == ["tiny", "float32"]


def test_bench_peers_leave_large_out_with_quick():
    def parsed(*argv):
        return cli.parser().parse_args(["bench", *argv])

    assert rounds.peer_sizes(parsed("--quick")) == ["tiny", "medium"]
    assert rounds.peer_sizes(parsed("--quick", "--sizes", "large")) == []
    assert rounds.peer_sizes(parsed()) == list(workloads.SIZES)
    args = parsed("--quick", "--dtypes", "float32", "float16")
    assert peers.steps(args, "jax") == 2 * 2 * len(OPS)   # the progress bar counts the peers' steps
    assert peers.steps(args, "torch") == (2 + 1) * 2 * len(OPS) + 1
    # a peer with no step left is not started, and the report says why
    large = parsed("--quick", "--sizes", "large", "--dtypes", "float32")
    assert peers.steps(large, "jax") == 0 and peers.steps(large, "torch") == 1   # torch: the training step
    why = peers.timed(large)
    if peers.installed("jax"):
        assert why["jax"] == "--quick (`padloss bench` times it at large)"
    if peers.installed("torch"):
        assert why["torch"] is None


def test_bench_speedups_over_a_peer_are_at_the_largest_size_it_was_timed_at(report):
    if not peers.installed("jax"):
        pytest.skip("needs jax")
    with_large = dict(report, sizes={**report["sizes"], "large": list(workloads.SIZES["large"])})
    lines = bench_report.format_report(with_large).splitlines()
    assert f"speedup over {workloads.JAX_VJP} at tiny (medians: timed in its own process):" in lines


def test_bench_autograd_rows_are_tiny_only_with_quick():
    def sizes(*argv):
        return rounds.autograd_sizes(cli.parser().parse_args(["bench", *argv]))

    assert sizes("--quick") == ["tiny"]
    assert sizes("--quick", "--sizes", "large") == []
    assert sizes() == list(workloads.SIZES)
    assert sizes("--sizes", "large", "tiny") == ["large", "tiny"]


def test_bench_plot_needs_matplotlib(monkeypatch, capsys):
    find_spec = run.importlib.util.find_spec
    monkeypatch.setattr(run.importlib.util, "find_spec",
                        lambda name, *a: None if name == "matplotlib" else find_spec(name, *a))
    assert cli.main(["bench", "--quick", "--plot", "out.png"]) == run.MATPLOTLIB_MISSING
    captured = capsys.readouterr()
    assert "needs matplotlib" in captured.err and captured.out == ""


def test_bench_plot_writes_a_png(report, tmp_path):
    pytest.importorskip("matplotlib")
    bench_report.plot(report, str(tmp_path / "bench.png"))
    assert (tmp_path / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_thp_reruns_itself_with_torchs_huge_page_allocator(monkeypatch):
    monkeypatch.delenv(run.THP_VAR, raising=False)
    seen = {}

    def fake_run(cmd, env):
        seen.update(cmd=cmd, env=env)
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(run.subprocess, "run", fake_run)
    assert cli.main(["bench", "--thp", "--quick", "--json"]) == 0
    assert seen["cmd"] == [sys.executable, "-m", "padloss", "bench", "--quick", "--json"]
    assert seen["env"][run.THP_VAR] == "1"


def test_bench_cold_times_fresh_processes_on_empty_caches_in_reference_units(monkeypatch, capsys):
    """Each figure is a fresh process on an empty cache folder of its own, reported in seconds
    and in units of this machine's reference compile (timed here for real, once)."""
    from padloss.bench import cold

    unit = cold.reference_unit_s(runs=1)
    assert 0 < unit < 60
    folders = []

    def fake_run(argv, cache_dir):
        assert cache_dir is not None and os.listdir(cache_dir) == []   # empty, its own
        folders.append(cache_dir)
        return "2.5\n"

    monkeypatch.setattr(cold, "_run", fake_run)
    monkeypatch.setattr(cold, "reference_unit_s", lambda: 0.5)
    assert cli.main(["bench", "--cold"]) == 0
    out = capsys.readouterr().out
    assert len(set(folders)) == len(folders) == len(cold.FIRST_CALLS) * 3 + len(cold.COMMANDS)
    assert re.search(r"first call l1_loss_backward bfloat16 +2\.50 +5\.0\n", out)
    assert "padloss check" in out and "reference unit" in out


def test_bare_padloss_runs_the_quick_bench(monkeypatch):
    seen = []
    monkeypatch.setattr(cli, "bench", lambda args: seen.append(args) or 0)
    status, out = run_cli()
    assert status == 0 and seen[0].command == "bench" and seen[0].quick
    assert "padloss check" in out and "padloss info" in out


def test_bad_arguments_exit_2():
    bad = (["bench", "--sizes", "huge"], ["bench", "--threads", "0"], ["bench", "--rounds", "0"], ["nope"])
    for argv in bad:
        with pytest.raises(SystemExit) as exc, contextlib.redirect_stderr(io.StringIO()):
            cli.main(argv)
        assert exc.value.code == 2


def test_progress_bar_draws_only_on_a_terminal():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    shown, hidden = Terminal(), io.StringIO()
    for stream in (shown, hidden):
        bar = console.Progress(2, stream)
        bar.step("first")
        bar.step("second")
        bar.close()
    assert "1/2 second" in shown.getvalue() and shown.getvalue().endswith("\r")
    assert hidden.getvalue() == ""


def test_python_m_padloss_and_the_console_script():
    done = subprocess.run([sys.executable, "-m", "padloss", "--version"], capture_output=True, text=True)
    assert (done.returncode, done.stdout.strip()) == (0, f"padloss {padloss.__version__}")
    script = shutil.which("padloss")
    if script is None:
        pytest.skip("the console script is not installed (pip install -e .)")
    done = subprocess.run([script, "--help"], capture_output=True, text=True)
    assert done.returncode == 0 and "{info,check,warmup,bench,cache}" in done.stdout


def test_info_and_bench_work_without_torch():
    script = HIDE_TORCH + """
import sys
import time
import types
from padloss import cli
assert cli.main(["info"]) == 0
assert cli.main(["bench", "--quick", "--sizes", "tiny", "--rounds", "1"]) == 0
assert "torch" not in sys.modules
"""
    env = {k: v for k, v in os.environ.items() if k != "PADLOSS_BACKEND"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert "pytorch: not installed" in done.stdout
    assert "pytorch autograd" not in done.stdout


def test_warmup_prepares_every_op_and_dtype_in_child_processes(monkeypatch):
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    status, out = run_cli("warmup", "--dtypes", "float32", "float16")
    assert status == 0
    assert out.startswith("padloss warmup: 2 ops x 2 dtypes ready in ")
    assert f"({console.pool_size(4)} processes)" in out
    steps = [piece.split() for piece in terminal.getvalue().split("\r") if piece.startswith("[")]
    assert sorted(step[1] for step in steps) == ["1/4", "2/4", "3/4", "4/4"]
    ready = sorted(" ".join(step[2:]) for step in steps)
    assert ready == sorted(f"{op}, {dtype} ready" for op in ("circular_pad2d_backward", "l1_loss_backward")
                           for dtype in ("float32", "float16"))


def test_a_first_bench_compiles_its_kernels_ahead_in_a_pool_of_jobs(monkeypatch):
    from padloss_numba import variants

    args = cli.parser().parse_args(["bench", "--sizes", "tiny"])
    args.dtypes = ["float32"]
    monkeypatch.setattr(variants, "listing", lambda: ({}, 3))                 # nothing for these sources
    jobs = run.compile_ahead(args)
    assert [label for label, _ in jobs] == ["pad", "l1", "ceilings", "ceilings"]   # a job a ceiling's mix
    pad_only = {("circular_pad2d_backward", "float32"): {}}
    monkeypatch.setattr(variants, "listing", lambda: (pad_only, 0))
    assert run.compile_ahead(args) == jobs                                      # L1's are missing
    both = {**pad_only, ("l1_loss_backward", "float32, float32, float32 -> float32"): {}}
    monkeypatch.setattr(variants, "listing", lambda: (both, 0))
    assert run.compile_ahead(args) == []                                        # a later run loads them
    terminal = Terminal()
    progress = console.Progress(4, terminal)
    assert console.run_jobs(jobs, progress) == []
    steps = sorted(" ".join(piece.split()[2:]) for piece in terminal.getvalue().split("\r") if piece)
    assert steps == ["ceilings, ceilings of 1 inputs ready", "ceilings, ceilings of 2 inputs ready",
                     "l1, tiny float32 ready", "pad, tiny float32 ready"]


def test_each_op_and_dtype_is_a_compile_job_of_the_larger_sizes_large_first_then_one_of_tiny(monkeypatch):
    from padloss_numba import variants

    args = cli.parser().parse_args(["bench", "--sizes", "tiny", "medium", "large"])
    args.dtypes = ["float32", "float16"]
    monkeypatch.setattr(variants, "listing", lambda: ({}, 3))
    jobs = run.compile_ahead(args)
    assert [argv[3] for _, argv in jobs[:-2]] == ["large,medium"] * 4 + ["tiny"] * 4
    for group in (jobs[:4], jobs[4:-2]):
        assert sorted((argv[1], argv[4]) for _, argv in group) == sorted(
            (op, dtype) for op in ("pad", "l1") for dtype in ("float32", "float16"))
    assert jobs[-2:] == [("ceilings", ["ceilings", "1"]), ("ceilings", ["ceilings", "2"])]   # last, one a mix


def test_a_job_pool_fails_the_job_a_child_dies_on_and_runs_the_others(monkeypatch):
    monkeypatch.setattr(console, "pool_size", lambda jobs: 1)      # the dead child's place is taken
    terminal = Terminal()
    jobs = [("broken", ["warmup", "no_such_op", "float32"]), ("ceilings", ["ceilings", "1"]),
            ("also broken", ["no_such_kind"])]
    assert console.run_jobs(jobs, console.Progress(1, terminal)) == ["broken", "also broken"]
    assert "ceilings, ceilings of 1 inputs ready" in terminal.getvalue()


def test_ratios_pair_rounds_within_one_process_and_medians_across():
    a = timing.Result("a", 100, [1.0, 2.0, 3.0])
    b = timing.Result("b", 100, [2.0, 2.0, 20.0])
    assert timing.speedup(a, b) == 2.0                  # per round: 2, 1, 6.7
    elsewhere = b._replace(group="torch")                  # timed in the torch child
    assert timing.speedup(a, elsewhere) == 1.0          # medians: 2 / 2
    assert timing.ratio(a, elsewhere) == 1.0


@pytest.mark.skipif(not peers.installed("torch"), reason="needs torch")
def test_bench_times_torch_in_a_child_process_and_never_imports_it():
    """torch's OpenMP threads spin after each op: in the process timing padloss and the
    ceilings they halved the medium pad's bandwidth, so torch runs in a child."""
    script = ("import sys, io, contextlib\nfrom padloss import cli\n"
              "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
              "    assert cli.main(['bench', '--quick', '--sizes', 'tiny', '--rounds', '1', '--json']) == 0\n"
              "import json; report = json.loads(out.getvalue())\n"
              "print(json.dumps(['torch' in sys.modules, sorted({r['impl'] for r in report['results']}),"
              " report['threads']['torch'], len(report['autograd'])]))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    imported, impls, torch_threads, autograd_rows = json.loads(done.stdout)
    assert not imported
    assert workloads.TORCH_AUTOGRAD in impls and "padloss numba" in impls
    assert torch_threads >= 1 and autograd_rows >= 2


def test_bench_times_jax_when_installed_else_says_why(report):
    impls = {r["impl"] for r in report["results"]}
    if peers.installed("jax"):
        assert workloads.JAX_VJP in impls
        assert all(r["speedup_vs_jax"] > 0 for r in report["results"] if r["impl"] == "padloss numba")
    else:
        assert workloads.JAX_VJP not in impls and report["not_measured"]["jax"] == "not installed"


@pytest.mark.vs_peer
@pytest.mark.skipif(not peers.installed("jax"), reason="needs jax")
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_the_jax_peer_computes_the_same_gradients(reduction):
    """Both against the exact float64 values: JAX's float32 sums within one rounding a
    term, its L1 within its division's roundings (two, where it multiplies by 1/N)."""
    pytest.importorskip("torch")   # bounds.pad_terms sums with torch's float64 autograd
    pad = workloads.PadWorkload("float32", (2, 3, 8, 8))
    exact, abs_sum, terms, exact_error = bounds.pad_terms(pad.grad_output, pad.out.shape, pad.padding)
    bounds.assert_within(np.asarray(pad.jax_vjp()()), exact, bounds.sum_bound(np.float32, terms, abs_sum)
                         + exact_error, "jax")
    l1 = workloads.L1Workload("float32", (2, 3, 8, 8), reduction)
    exact, exact_error = bounds.l1_terms(l1.grad_output, l1.self_, l1.target, reduction)
    bounds.assert_within(np.asarray(l1.jax_vjp()()), exact,
                         bounds.rounding_bound(np.float32, 2, np.abs(exact)) + exact_error, "jax")


def test_prepare_plans_a_workload_without_filling_or_running_it():
    padloss.plan_cache.clear()
    w = workloads.workload("l1", "float32", "tiny", "mean", filled=False)
    w.out[...] = 7.0
    workloads.prepare(w)
    assert padloss.plan_cache.size == 1                     # phase 1 planned (and compiled) it
    assert (w.out == 7.0).all()                             # and nothing ran
    planned = padloss.plan_cache.size
    filled = workloads.workload("l1", "float32", "tiny", "mean")
    filled.padloss(None)()
    assert padloss.plan_cache.size == planned               # the timed call finds that plan
    np.testing.assert_array_equal(filled.out, reference.l1_loss_backward(filled.grad_output, filled.self_,
                                                                         filled.target, "mean"))


def test_calls_per_round_warms_up_only_what_may_compile():
    calls = []

    def slow():   # a call longer than the round: one per round, whatever the machine
        calls.append(1)
        time.sleep(0.01)

    assert timing.calls_per_round(slow, round_s=0.005) == 1 and len(calls) == 2   # untimed, timed
    calls.clear()
    assert timing.calls_per_round(slow, round_s=0.005, first_s=0.01) == 1 and not calls


def test_sized_rounds_keep_their_sizing_round_only_where_every_call_fills_a_round(monkeypatch):
    """On a simulated clock that each call moves on by its length: with real sleeps a busy
    machine made the fast call (sleep(0)) seem to fill a round, and the test failed in CI."""
    made = {"slow": 0, "fast": 0}
    now = [0.0]
    monkeypatch.setattr(timing, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))

    def call(name, seconds):
        def fn():
            made[name] += 1
            now[0] += seconds
        return fn

    slow = {"slow": (call("slow", 2.0 ** -6), 8)}   # 15.6 ms: longer than a round
    timed = timing.sized_rounds(slow, rounds=3, round_s=0.005)
    assert made["slow"] == 3 and len(timed["slow"].seconds) == 3 and min(timed["slow"].seconds) >= 0.01
    made["slow"] = 0
    mixed = {**slow, "fast": (call("fast", 2.0 ** -20), 8)}   # ~1 us: its round holds many calls, sized anew
    timed = timing.sized_rounds(mixed, rounds=3, round_s=0.005)
    assert made["slow"] == 4 and made["fast"] > 3 + 6
    assert [len(r.seconds) for r in timed.values()] == [3, 3]


def test_interleaved_rounds_time_each_candidate_once_in_orders_that_change():
    ran: list[str] = []
    candidates = {name: (lambda name=name: ran.append(name), 8) for name in "abcd"}
    timed = timing.interleaved(candidates, rounds=12, calls=1, warmup=0)
    rounds = [tuple(ran[i:i + 4]) for i in range(0, len(ran), 4)]
    assert len(rounds) == 12 and all(sorted(r) == list("abcd") for r in rounds)
    assert len(set(rounds)) > 1 and {r[0] for r in rounds} == set("abcd")   # no fixed first place
    assert all(len(r.seconds) == 12 for r in timed.values())
    ran.clear()
    timing.interleaved(candidates, rounds=12, calls=1, warmup=0)
    assert [tuple(ran[i:i + 4]) for i in range(0, len(ran), 4)] == rounds   # seeded: the same orders again
