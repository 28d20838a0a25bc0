"""What the command line draws and runs beside itself: a progress bar, tables, and
child processes (padloss.child) whose progress it draws."""
from __future__ import annotations

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


def run_children(children: dict[str, list[str]], progress: Progress) -> list[str]:
    """Run ``python -m padloss.child KIND ARGS...`` for each label (label -> [KIND, ARGS...])
    all at once; each line a child prints counts one step of ``progress`` done. Returns
    the labels whose child failed."""
    import selectors

    started = {label: subprocess.Popen([sys.executable, "-m", "padloss.child", *argv], stdout=subprocess.PIPE,
                                       text=True)
               for label, argv in children.items()}
    selector = selectors.DefaultSelector()
    for label, child in started.items():
        selector.register(child.stdout, selectors.EVENT_READ, label)
    open_pipes = len(started)
    while open_pipes:
        for key, _ in selector.select():
            line = key.fileobj.readline()
            if not line:
                selector.unregister(key.fileobj)
                open_pipes -= 1
                continue
            progress.finished(f"{key.data}, {line.strip()} ready")
    return [label for label, child in started.items() if child.wait() != 0]
