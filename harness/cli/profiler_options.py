"""The profiler options of `run`, `overhead` and `profile`, declared once (`ProfilerArgs`,
`profiler_options`), and what `run` and `overhead` do before the work (`prepare`): the configuration, the
store, the profiler from the registry, its options built by the profiler itself from the command line's
values, and the warnings it has before it runs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from enum import Enum, StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from harness.cli.common import warn
from harness.cli.option_group import F, option_group
from harness.cli.options import Workload, asked, make_config
from harness.cli.rank_options import Ranks, asked_ranks, with_ranks
from harness.core.records import RunConfig
from harness.profilers import registry

if TYPE_CHECKING:
    from harness.profilers import base
    from harness.store.results import ResultsStore

from harness.execution.checks import check_effect, check_profiler_effect, checked
from harness.store import results as results_db


class Capture(StrEnum):
    all = "all"
    measured = "measured"


# --profiler's choices: the registry's profilers (the run without one is no choice: it is the default)
Profiler = StrEnum("Profiler", [(name, name) for name in registry.NAMES if name != "none"])  # type: ignore[misc]


class NsysMode(StrEnum):
    light = "light"
    full = "full"


NsysPathOpt = Annotated[
    str | None,
    typer.Option("--nsys-path", metavar="<path>", help="The nsys binary to use (or HARNESS_NSYS)."),
]
CaptureOpt = Annotated[
    Capture, typer.Option("--nsys-capture", help="measured: only the measured steps are recorded.")
]
NsysModeOpt = Annotated[
    NsysMode, typer.Option("--nsys-mode", help="light: --sample=none --cpuctxsw=none; full: nsys defaults.")
]
NsysArgOpt = Annotated[
    list[str] | None,
    typer.Option("--nsys-arg", metavar="<arg>", help="Passed to `nsys profile` as is (repeatable)."),
]
NsysForceOpt = Annotated[
    bool,
    typer.Option(
        "--nsys-force",
        help="Capture even where this nsys is known to record nothing of the program's CUDA (an nsys made "
        "for CUDA two major versions older: see `harness doctor`).",
    ),
]
ProfileDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--profile-dir",
        metavar="<dir>",
        help="Where the profiler's files go [default: nsys_profiles, torch_profiles; --memory: "
        "memory_profiles].",
    ),
]

RecordShapesOpt = Annotated[
    bool, typer.Option("--record-shapes", help="With --profiler torch: record operator input shapes.")
]
WithStackOpt = Annotated[
    bool, typer.Option("--with-stack", help="With --profiler torch: record Python stacks of operators.")
]
ProfileMemoryOpt = Annotated[
    bool, typer.Option("--profile-memory", help="With --profiler torch: record tensor allocations.")
]
BaselineOpt = Annotated[
    bool,
    typer.Option(
        "--nsys-baseline/--no-nsys-baseline",
        help="With --nsys: also run without nsys first (fresh process) and report nsys's overhead.",
    ),
]


@dataclass(frozen=True)
class ProfilerArgs:
    """The profiler options as given on the command line, each named as the parameter a profiler's options
    read it from (harness.profilers.base.ProfilerOptions.from_cli), with its command-line form."""

    nsys_path: NsysPathOpt = None
    nsys_capture: CaptureOpt = Capture.all
    nsys_mode: NsysModeOpt = NsysMode.light
    nsys_arg: NsysArgOpt = None
    profile_dir: ProfileDirOpt = None
    nsys_baseline: BaselineOpt = True
    nsys_force: NsysForceOpt = False
    record_shapes: RecordShapesOpt = False
    with_stack: WithStackOpt = False
    profile_memory: ProfileMemoryOpt = False

    def values(self) -> dict[str, Any]:
        """By parameter name, choices as their plain values."""
        return {k: v.value if isinstance(v, Enum) else v for k, v in asdict(self).items()}


NO_PROFILER_ARGS = ProfilerArgs()


def profiler_options(omit: tuple[str, ...] = ()) -> Callable[[F], F]:
    """The profiler options on a command (but `omit`), in place of its parameter `profiling: ProfilerArgs`."""
    return option_group("profiling", ProfilerArgs, omit)


@dataclass
class Prepared:
    config: RunConfig
    store: ResultsStore
    profiler: base.Profiler
    options: base.ProfilerOptions


def prepare(
    model: str,
    workload: Workload,
    ranks: Ranks,
    db: str | None,
    profiler: str | None,
    args: base.CliArgs,
    *,
    memory: bool = False,
) -> Prepared:
    """Before any run, once: the configuration checked whole (harness.execution.checks; the layers after
    trust it), an option given that changes nothing here refused or warned of (`check_effect`,
    `check_profiler_effect`: an option the profiler's options do not read), the store (a bad --db fails
    now, not after the work), the profiler's own check and options (built by it from `args`, the command
    line's values by parameter name), and its warnings said (or the run refused)."""
    ready = checked(replace(with_ranks(make_config(model, workload), ranks), memory=memory))
    device = ready.device.type
    plugin = registry.get(profiler)
    options = plugin.options_from(args)
    reads = {f.metadata.get("cli", f.name) for f in fields(options)}  # what its options are built from
    given = {k for k, v in NO_PROFILER_ARGS.values().items() if args.get(k, v) != v}
    check_profiler_effect(profiler, reads, given, memory)
    for line in check_effect(ready.config, {**asked(workload), **asked_ranks(ranks)}, device):
        warn(line)  # an option given that changes nothing here
    store = results_db.ResultsStore(db)
    plugin.check(ready.config, device)
    # nsys: the profile folder, and what it may lose of the program's CUDA
    for line in [*ready.warnings, *plugin.preflight(options, device)]:
        warn(line)
    return Prepared(ready.config, store, plugin, options)
