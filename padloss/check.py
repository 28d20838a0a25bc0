"""``padloss check``: the catalogue's check cases on every available backend against
padloss.reference, bit for bit (NaN payloads aside)."""
from __future__ import annotations

import contextlib
from typing import Any

import numpy as np

import padloss

from . import catalogue, dispatch
from .catalogue import CheckCase
from .console import Progress, compile_first, table


def differing(got: Any, want: np.ndarray) -> int:
    """Elements whose bits differ (two NaNs match whatever their payload)."""
    got = np.asarray(got)
    if got.shape != want.shape or got.dtype != want.dtype:
        return max(want.size, 1)
    bits = np.dtype(f"u{got.itemsize}")
    same = got.view(bits) == want.view(bits)
    nan = np.isnan(got.astype(np.float64)) & np.isnan(want.astype(np.float64))
    return int(np.count_nonzero(~(same | nan)))


def run(cases: list[CheckCase] | None = None, target: str | None = None, ahead: bool = False) -> int:
    """Each case (None: the catalogue's) on every available backend, under ``target``
    (None: the setting's), their kernels compiled first in child processes with
    ``ahead`` (:func:`compile_ahead`); prints the table; 1 on any mismatch or crash. A
    call the target's product refuses counts as refused, with its status, not as a failure."""
    if target is None:
        target = padloss.config.current.target
    cases = catalogue.check_cases() if cases is None else cases
    if ahead:
        compile_ahead(cases, target)
    with padloss.config.set(target=target):
        return _run(cases, target)


def compile_ahead(cases: list[CheckCase], target: str) -> None:
    """Compile the kernels of ``cases`` under ``target`` in a pool of child processes,
    an op and dtype a job (padloss.console.compile_first), when an available backend would
    compile some of them (``dispatch.would_compile``): on an empty compile cache, the
    check's compiles would otherwise run one after another on one core. A job computes
    the catalogue's cases of its op and dtype; what it leaves uncompiled, the check
    compiles itself."""
    calls = list(dict.fromkeys((case.op, case.dtype) for case in cases))
    if not dispatch.would_compile(calls):
        return
    progress = Progress(len(calls))
    compile_first("padloss check", [(op, ["check", op, dtype, target]) for op, dtype in calls], progress)
    progress.close()


def compile_cases(op: str, dtype: str, target: str) -> None:
    """Compile (or load) the kernels of the catalogue's check cases of ``op`` in ``dtype``
    under ``target`` (a job of :func:`compile_ahead`): each case computed on every
    available backend; results and errors are the check's to find, which computes them
    again."""
    with padloss.config.set(target=target):
        backends = _available()
        for case in catalogue.OPS[op].check_cases(dtype):
            for backend in backends:
                with contextlib.suppress(Exception):
                    case.compute(backend)


def _available() -> list[str]:
    """The names of the backends the check runs on."""
    return [b.name for b in padloss.available_backends() if b.available]


def _run(cases: list[CheckCase], target: str) -> int:
    backends = _available()
    print(f"padloss check: {', '.join(catalogue.OPS)} on {', '.join(backends)} against padloss.reference, "
          f"bit for bit (NaN payloads aside), target {target}")
    rows, notes, failed, refused = [], [], 0, 0
    progress = Progress(len(cases))
    for case in cases:
        progress.step(f"{case.op} {case.name}, {case.dtype}")
        want, cells = None, []   # the reference's result, made once a backend computed one
        for backend in backends:
            try:
                got = case.compute(backend)
                want = case.expected() if want is None else want
                bad = differing(got, want)
            except padloss.PadlossError as exc:
                if exc.target is not None:
                    cells.append(f"refused {int(exc.status)}")
                    refused += 1
                    continue
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
    print(table(["op", "case", "dtype"] + backends, rows))
    for note in notes:
        print(note)
    checked = len(rows) * len(backends) - refused
    print(f"{failed} of {checked} checks failed" if failed else f"all {checked} checks match", end="")
    print(f"; {refused} calls refused by target {target} (docs/targets.md)" if refused else "")
    return 1 if failed else 0
