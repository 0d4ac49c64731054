"""What the profilers share (harness.profilers.nsys, harness.profilers.torch, harness.profilers.none,
harness profile -- CMD, and `harness overhead`): the `Profiler` contract, the options every profiler takes
(each declares its own beside it, in its module), how a profiled run ended (`Outcome`), the profile-folder
check, and the baseline run without a profiler."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, Self

from harness.core import machine
from harness.core.errors import NsysError, os_reason
from harness.core.records import RunConfig, RunResult
from harness.execution.ranks import multirank

if TYPE_CHECKING:
    from harness.store.results import ResultsStore


# the command line's values by parameter name (`profile_dir`, `nsys_arg`, `record_shapes`, …: run's and
# overhead's options), from which each profiler builds its own options
CliArgs = Mapping[str, Any]


@dataclass(frozen=True)
class ProfilerOptions:
    """What every profiler takes; a profiler with options of its own subclasses it in its module (nsys.py's
    NsysOptions, torch.py's TorchOptions). A field is read from the command-line parameter of its name, or
    of the name in its metadata's "cli" (`field(default=…, metadata={"cli": "nsys_arg"})`)."""

    profile_dir: Path | None = None  # None: the profiler's default_dir

    @classmethod
    def from_cli(cls, args: CliArgs, default_dir: Path | None = None) -> Self:
        """The options `args` gives (a parameter left out or None keeps the field's default)."""
        given = {
            f.name: args[key]
            for f in fields(cls)
            if args.get(key := f.metadata.get("cli", f.name)) is not None
        }
        given.setdefault("profile_dir", default_dir)
        return cls(**given)


# one profiled run of an overhead experiment: its result, what it is stored with, notes; it raises
# NothingRecorded where the profiler failed before the run began (an option it refused): nothing to store
ProfiledFn = Callable[[], tuple[RunResult, dict[str, Any], list[str]]]


class NothingRecorded(NsysError):
    """The profiler failed before it recorded anything and no step was measured: no run to store."""


class Reporter(Protocol):
    """Progress as a run goes (harness.cli.terminal.progress.Progress): a stage's name, or steps done."""

    def stage(self, text: str) -> None: ...

    def advance(self, done: int, total: int | None = None) -> None: ...


class Profiler(Protocol):
    """What `harness run` asks of a profiler. One object per profiler, listed in harness.profilers.registry.

    - name: recorded as the run's `profiler` ("none" for a run without one);
    - wraps: what it puts itself around, in words; keeps: the kinds of file it leaves (the keys of the run's
      `artifacts`), in `default_dir` unless --profile-dir says otherwise;
    - check: refuse a configuration it cannot profile, before anything runs (UsageError; by default none);
    - preflight: what to warn of before the run (or an error refusing it), said by the command (by
      default nothing);
    - options_from: its options (`options_type`: ProfilerOptions, or its own subclass) from the command
      line's values;
    - progress: the progress line's label, and the number of steps it counts (None: stages only);
    - overhead_runs: (label, one profiled run) per kind that `harness overhead` compares with the run
      without it (nsys: one per mode);
    - run: profile one configuration and store it. A capture cut short (Ctrl-C, SIGTERM, a failed child)
      is still stored, as "interrupted" or with the steps it finished, and the files written so far are
      kept; the Outcome says so (`error`, `exit_status`) and names them.
    """

    name: str
    wraps: str
    keeps: tuple[str, ...]
    default_dir: Path | None
    options_type: type[ProfilerOptions] = ProfilerOptions

    def check(self, config: RunConfig, device_type: str) -> None:
        return None

    def options_from(self, args: CliArgs) -> ProfilerOptions:
        return self.options_type.from_cli(args, self.default_dir)

    def preflight(self, options: ProfilerOptions, device_type: str) -> list[str]:
        return []

    def progress(self, config: RunConfig) -> tuple[str, int | None]: ...

    def overhead_runs(
        self, config: RunConfig, options: ProfilerOptions, modes: list[str]
    ) -> list[tuple[str, ProfiledFn]]: ...

    def run(
        self, config: RunConfig, options: ProfilerOptions, *, store: ResultsStore, progress: Reporter
    ) -> Outcome: ...


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


def label_for(mode: str, profiler: str = "nsys") -> str:
    """The label of a profiled run in an overhead table: `nsys light|full`, or `torch` (the baseline's is
    analysis.compare.overhead.baseline_label's)."""
    return f"nsys {mode}" if profiler == "nsys" else profiler


def check_writable(folder: Path) -> None:
    """Create the profile folder, or stop with one line: before the run, not after it."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise NsysError(
            f"cannot create profile folder {folder}: {os_reason(folder, e)}; pass --profile-dir"
        ) from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise NsysError(f"profile folder {folder} is not writable; pass --profile-dir to write elsewhere")


def run_baseline(config: RunConfig) -> tuple[RunResult, machine.MachineLoad | None]:
    """`config` in a fresh process without a profiler, with how busy the machine was meanwhile."""
    start = machine.snapshot()
    result = multirank.run_any(config)
    return result, machine.keep_load(result.extra, start)
