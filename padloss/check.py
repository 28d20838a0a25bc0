"""``padloss check``: the catalogue's check cases on every available backend against
padloss.reference, bit for bit (NaN payloads aside)."""
from __future__ import annotations

from typing import Any

import numpy as np

import padloss

from . import catalogue
from .catalogue import CheckCase
from .console import Progress, table


def differing(got: Any, want: np.ndarray) -> int:
    """Elements whose bits differ (two NaNs match whatever their payload)."""
    got = np.asarray(got)
    if got.shape != want.shape or got.dtype != want.dtype:
        return max(want.size, 1)
    bits = np.dtype(f"u{got.itemsize}")
    same = got.view(bits) == want.view(bits)
    nan = np.isnan(got.astype(np.float64)) & np.isnan(want.astype(np.float64))
    return int(np.count_nonzero(~(same | nan)))


def run(cases: list[CheckCase] | None = None, target: str | None = None) -> int:
    """Each case on every available backend, under ``target`` (None: the setting's);
    prints the table; 1 on any mismatch or crash. A call the target's product refuses
    counts as refused, with its status, not as a failure."""
    if target is None:
        target = padloss.config.current.target
    with padloss.config.set(target=target):
        return _run(catalogue.check_cases() if cases is None else cases, target)


def _run(cases: list[CheckCase], target: str) -> int:
    backends = [b.name for b in padloss.available_backends() if b.available]
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
