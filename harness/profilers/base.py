"""What the profilers share (harness.profilers.nsys, harness.profilers.torch, harness profile -- CMD, and
`harness overhead`): how a profiled run ended (`Outcome`), the profile-folder check, and the baseline run
without a profiler."""

from __future__ import annotations

import os
from pathlib import Path

from harness.core import machine
from harness.core.errors import NsysError
from harness.core.records import RunConfig, RunResult


class Outcome:
    """How a profiled run ended, for the exit code: `error` (with `exit_code`), or runs the database would
    not take (`unsaved`). Mixed into the result dataclasses of the profilers."""

    error: str | None
    exit_code: int
    unsaved: list[str]

    @property
    def failed(self) -> bool:
        return self.error is not None or bool(self.unsaved)

    @property
    def exit_status(self) -> int:
        if self.error is not None:
            return self.exit_code
        return 1 if self.unsaved else 0


def check_writable(folder: Path) -> None:
    """Create the profile folder, or stop with one line: before the run, not after it."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise NsysError(f"cannot create profile folder {folder}: {e.strerror}; pass --profile-dir") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise NsysError(f"profile folder {folder} is not writable; pass --profile-dir to write elsewhere")


def run_baseline(config: RunConfig) -> tuple[RunResult, machine.MachineLoad | None]:
    """`config` in a fresh process without a profiler, with how busy the machine was meanwhile."""
    from harness.execution.ranks.multirank import run_any

    start = machine.snapshot()
    result = run_any(config)
    load = machine.load_since(start)
    if load:
        result.extra["machine"] = load.to_dict()
    return result, load
