"""Progress of long commands, on stderr so stdout stays the result.

On a terminal: a transient spinner (and bar, when the amount of work is known). When stdout or stderr is
not a terminal (piped, captured, in CI) a live display shows nothing, so plain lines are written instead:
each stage, counted work every `every_s` seconds, and a reminder after a long silence.
"""

from __future__ import annotations

import sys
import threading
import time
from types import TracebackType
from typing import TextIO

from harness.cli.terminal.output import console_for, visible


def _live() -> bool:
    return console_for(stderr=True).is_terminal and sys.stdout.isatty()


def _elapsed(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    return f"{int(seconds // 60)} min {seconds % 60:02.0f} s"


class Progress:
    """`with Progress("small train", total=15) as p: ... p.stage("warm-up") ... p.advance(3)`."""

    def __init__(
        self,
        label: str,
        total: int | None = None,
        *,
        unit: str = "",
        live: bool | None = None,
        every_s: float = 10.0,
        quiet_s: float = 30.0,
        file: TextIO | None = None,
    ) -> None:
        self.label = label
        self.total = total
        self.unit = unit
        self.live = _live() if live is None else live
        self.every_s = every_s
        self.quiet_s = quiet_s
        self.file = file
        self.text = ""
        self.done = 0
        self._start = time.monotonic()
        self._last_line = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._bar = None
        self._task = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Progress:
        self._start = time.monotonic()
        if self.live:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                SpinnerColumn,
                TextColumn,
                TimeElapsedColumn,
            )
            from rich.progress import Progress as Bar

            counted = [BarColumn(), MofNCompleteColumn()] if self.total else []
            self._bar = Bar(
                SpinnerColumn(),
                TextColumn("{task.description}", markup=False),
                *counted,
                TimeElapsedColumn(),
                console=console_for(stderr=True),  # COLUMNS as the tables take it
                transient=True,
            )
            self._bar.start()
            self._task = self._bar.add_task(self.label, total=self.total)
        else:
            self._thread = threading.Thread(target=self._remind, name="harness-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._bar is not None:
            self._bar.stop()
        if self._thread is not None:
            self._thread.join()

    def stage(self, text: str) -> None:
        """A new stage of the work (a baseline run, the run under nsys): always said."""
        self.text = text
        if self._bar is not None:
            self._bar.update(self._task, description=f"{self.label}: {text}" if text else self.label)
        else:
            self._line()

    def advance(self, done: int, total: int | None = None) -> None:
        """`done` of `total` units finished; said every `every_s` seconds, and at the first and the last. A
        count that did not change is not said again (a watch reports 0 before the first step ends, and the
        stage's line already said 0)."""
        total = total if total is not None else self.total
        if done == self.done and total == self.total:
            return
        first = self.done == 0
        self.done, self.total = done, total
        if self._bar is not None:
            self._bar.update(self._task, completed=done, total=self.total)
            return
        now = time.monotonic()
        if first or done == self.total or now - self._last_line >= self.every_s:
            self._line()

    def _message(self) -> str:

        parts = [self.label]
        if self.text:
            parts.append(self.text)
        if self.total:
            parts.append(f"{self.done}/{self.total}{' ' + self.unit if self.unit else ''}")
        return visible(": ".join(parts))

    def _line(self, still: bool = False) -> None:
        with self._lock:
            now = time.monotonic()
            self._last_line = now
            lead = "still running: " if still else ""
            out = self.file or sys.stderr
            print(f"progress: {lead}{self._message()} [{_elapsed(now - self._start)}]", file=out, flush=True)

    def _remind(self) -> None:
        """After `quiet_s` without a line, say that the work goes on (an nsys run can take minutes)."""
        while not self._stop.wait(min(self.quiet_s, 1.0)):
            if time.monotonic() - max(self._last_line, self._start) >= self.quiet_s:
                self._line(still=True)
