"""Progress of a sweep on the terminal: a rich bar on a TTY, plain lines otherwise, with an
ETA from the mean run time. Used by local sweeps and by ``--slurm --wait``."""

from __future__ import annotations

import sys

__all__ = ["Progress", "fmt_seconds"]


class Progress:
    """A rich progress bar on a terminal, plain lines otherwise; ETA from the mean run time."""

    def __init__(self, total: int, *, stream=None):
        self.total, self.done, self.walls = total, 0, []
        self.stream = stream or sys.stdout
        self._bar = None
        if total and getattr(self.stream, "isatty", lambda: False)():
            try:
                from rich.progress import BarColumn, TextColumn, TimeElapsedColumn
                from rich.progress import Progress as RichProgress

                self._bar = RichProgress(TextColumn("{task.description}"), BarColumn(),
                                     TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                                     TextColumn("ETA {task.fields[eta]}"), transient=False)
                self._task = self._bar.add_task("sweep", total=total, eta="?")
                self._bar.start()
            except Exception:
                self._bar = None

    def eta(self) -> str:
        if not self.walls:
            return "?"
        left = sum(self.walls) / len(self.walls) * (self.total - self.done)
        return fmt_seconds(left)

    def print(self, msg: str) -> None:
        if self._bar is not None:
            self._bar.console.print(msg, markup=False, highlight=False)
        else:
            print(msg, file=self.stream, flush=True)

    def start(self, run_id: str) -> None:
        if self._bar is not None:
            self._bar.update(self._task, description=run_id)
        else:
            self.print(f"[{self.done + 1}/{self.total}] {run_id} ... (ETA {self.eta()})")

    def finish(self, run_id: str, status: str, wall_s: float | None, *, counted: bool = True) -> None:
        if counted and wall_s is not None:
            self.walls.append(wall_s)
        self.done += 1
        took = "" if wall_s is None else f" in {fmt_seconds(wall_s)}"
        self.print(f"[{self.done}/{self.total}] {run_id}: {status}{took}")
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done, eta=self.eta())

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


def fmt_seconds(s: float) -> str:
    """``12.3 s``, ``4.5 min`` or ``1.2 h``."""
    if s < 90:
        return f"{s:.1f} s"
    if s < 5400:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"

