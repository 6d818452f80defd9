"""Progress of a sweep on the terminal: a rich bar on a TTY, plain lines otherwise, with an
ETA from the mean run time. Used by local sweeps and by ``--slurm --wait``.

:func:`printable` is the one filter for text that came from a file (a run's log tail, a
manifest's run id or exit note, a value quoted in an error) on its way to the terminal:
scalescope's commands, the analysis side's included, print such text only through it.
"""

from __future__ import annotations

import sys

__all__ = ["Progress", "fmt_seconds", "printable"]


def _escape_table() -> dict[int, str]:
    table = {}
    # C0 controls but newline and tab (ESC starts CSI/OSC sequences: title set, screen clear;
    # CR and backspace overwrite what was printed), DEL, and C1 controls (0x9b is a one-byte
    # CSI, 0x9d a one-byte OSC on some terminals)
    for code in [*range(0x00, 0x20), *range(0x7F, 0xA0)]:
        if chr(code) not in "\n\t":
            table[code] = f"\\x{code:02x}"
    # bidirectional overrides and isolates reorder what the eye reads ("Trojan source")
    for code in [0x200E, 0x200F, 0x061C, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]:
        table[code] = f"\\u{code:04x}"
    # lone surrogates: a file name that is not UTF-8 (Python keeps its bytes as U+DC80..U+DCFF)
    # cannot be printed or written as UTF-8 at all
    for code in range(0xD800, 0xE000):
        table[code] = f"\\u{code:04x}"
    return table


_ESCAPES = _escape_table()


def printable(text: object) -> str:
    """``str(text)`` safe to print on a terminal: newlines and tabs kept, every other control
    character (ESC, CSI, OSC, BEL, CR, backspace, C1 controls, bidi overrides and marks) shown
    escaped as ``\\x1b``, ``\\u202e``, so no escape sequence from a file reaches the terminal;
    a lone surrogate (a file name that is not UTF-8) as ``\\udcff``, so the text can always
    be printed and written as UTF-8. The HTML report escapes labels with this same function.

    >>> printable("ok\\x1b]0;pwned\\x07\\tdone\\n")
    'ok\\\\x1b]0;pwned\\\\x07\\tdone\\n'
    """
    return str(text).translate(_ESCAPES)


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
        msg = printable(msg)  # run ids, exit notes and log lines come from files
        if self._bar is not None:
            self._bar.console.print(msg, markup=False, highlight=False)
        else:
            print(msg, file=self.stream, flush=True)

    def start(self, run_id: str) -> None:
        if self._bar is not None:
            self._bar.update(self._task, description=printable(run_id))
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

