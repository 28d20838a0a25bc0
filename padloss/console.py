"""What the command line draws and runs beside itself: a progress bar, tables, and
child processes (padloss.child) whose progress it draws."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import TextIO


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


def table(header: list[str], rows: list[list[str]], right: set[int] = frozenset()) -> str:
    """Columns padded to their widest cell (right-aligned where ``right`` says)."""
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    cell = lambda r, i: r[i].rjust(widths[i]) if i in right else r[i].ljust(widths[i])  # noqa: E731
    return "\n".join("  ".join(cell(r, i) for i in range(len(header))).rstrip() for r in [header] + rows)


def pool_size(jobs: int) -> int:
    """How many children :func:`run_jobs` starts for ``jobs`` jobs: one per CPU (each
    compiles on one core), no more than there are jobs."""
    return max(1, min(jobs, os.cpu_count() or 1))


def compile_first(command: str, jobs: list[tuple[str, list[str]]], progress: Progress) -> list[str]:
    """:func:`run_jobs` for a command's compiles ahead of its work, saying so on stderr first;
    the labels of the jobs that failed (what they left, the command compiles itself)."""
    print(f"{command}: compiling its kernels first, {pool_size(len(jobs))} processes at once (the first "
          "run of these sources; later runs load them)", file=sys.stderr)
    return run_jobs(jobs, progress)


def run_jobs(jobs: list[tuple[str, list[str]]], progress: Progress) -> list[str]:
    """Run each job (label, [KIND, ARGS...] of padloss.child) in a pool of
    :func:`pool_size` ``serve`` children, each taking the next job in the list as it
    finishes one, so the caller lists the longest first; each line a job prints counts
    one step of ``progress`` done. Returns the labels of the jobs that failed: a child
    that dies fails the job it held, and a new one takes its place."""
    import selectors

    from .child import JOB_DONE

    pending, failed = list(jobs), []
    holding: dict[subprocess.Popen, str] = {}
    unread: dict[subprocess.Popen, bytes] = {}   # each child's output after its last whole line
    selector = selectors.DefaultSelector()

    def hand_next(child: subprocess.Popen) -> None:
        try:
            if pending:
                holding[child], argv = pending.pop(0)
                child.stdin.write((json.dumps(argv) + "\n").encode())
                child.stdin.flush()
            else:
                child.stdin.close()
        except BrokenPipeError:   # it died: its stdout's end comes next
            pass

    def start() -> None:
        child = subprocess.Popen([sys.executable, "-m", "padloss.child", "serve"], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE)
        selector.register(child.stdout, selectors.EVENT_READ, child)
        unread[child] = b""
        hand_next(child)

    def ended(child: subprocess.Popen) -> None:
        selector.unregister(child.stdout)
        if not child.stdin.closed:
            child.stdin.close()
        child.wait()
        if child in holding:
            failed.append(holding.pop(child))
            if pending:
                start()

    for _ in range(pool_size(len(jobs))):
        start()
    while selector.get_map():
        for key, _ in selector.select():
            child = key.data
            # os.read, not readline: lines a buffered reader took in ahead would wait unseen
            chunk = os.read(key.fileobj.fileno(), 1 << 16)
            *lines, unread[child] = (unread[child] + chunk).split(b"\n")
            for line in map(bytes.decode, lines):
                if line == JOB_DONE:
                    del holding[child]
                    hand_next(child)
                else:
                    progress.finished(f"{holding.get(child)}, {line.strip()} ready")
            if not chunk:
                ended(child)
    return failed
