"""The options of the commands that run work (`run`, `sweep`, `overhead`, `profile`, `optimize`,
`roofline`, `attention`), declared once: the workload (`Workload`, `workload_options`), its ranks across
torchrun (`Ranks`, `rank_options`), its profiler (`ProfilerArgs`, `profiler_options`); and what `run` and
`overhead` do before the work (`prepare`): the configuration, the store, the profiler from the registry, its
options built by the profiler itself from the command line's values, and the warnings it has before it
runs."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Collection, Sequence
from dataclasses import asdict, dataclass, fields, replace
from enum import Enum, StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from harness.cli.common import on_command_line, text_option, warn
from harness.cli.option_group import F, option_group
from harness.core.bounds import digits
from harness.core.devices import DEVICES
from harness.core.errors import UsageError
from harness.core.records import NSYS_MODES, RunConfig
from harness.execution.checks import check_effect, check_profiler_effect, checked, flag
from harness.profilers import registry
from harness.store import results as results_db
from workloads.names import ATTENTIONS, MODES, PRECISIONS
from workloads.plants import catalogue

if TYPE_CHECKING:
    from harness.profilers import base
    from harness.store.results import ResultsStore


def choices(name: str, values: Sequence[str]) -> type[StrEnum]:
    """An option's choices as an enum (each member named as its value), from the values declared where the
    harness checks them: the command line offers exactly what a run accepts."""
    return StrEnum(name, [(v, v) for v in values])  # type: ignore[return-value]


Mode = choices("Mode", MODES)
Device = choices("Device", DEVICES)
Precision = choices("Precision", PRECISIONS)
Attention = choices("Attention", ATTENTIONS)


ModeOpt = Annotated[
    Mode, typer.Option(help="train: forward+backward+AdamW; forward: no_grad; generate: KV cache.")
]
DeviceOpt = Annotated[Device, typer.Option(help="auto picks cuda, then mps, then cpu.")]
PrecisionOpt = Annotated[Precision, typer.Option(help="Autocast mixed precision (fp32 master weights).")]
CompileOpt = Annotated[
    bool,
    typer.Option(
        "--compile/--no-compile",
        help="torch.compile the model (generate: its static-cache decode step, mode reduce-overhead on "
        "CUDA).",
    ),
]
CudaGraphsOpt = Annotated[
    bool,
    typer.Option(
        "--cuda-graphs",
        help="generate on CUDA: a static KV cache and one decode step captured as a CUDA graph, replayed "
        "per token.",
    ),
]
BatchOpt = Annotated[int, typer.Option("--batch-size", "-b")]
ContextOpt = Annotated[
    int | None,
    typer.Option(
        "--context-length",
        "-t",
        help="Default: the model's (generate: a prompt of 64, at most half the model's).",
    ),
]
VocabOpt = Annotated[int | None, typer.Option(help="Default: the model's.")]
WarmupOpt = Annotated[int, typer.Option(help="Steps run before timing starts (not in the statistics).")]
StepsOpt = Annotated[int, typer.Option(help="Measured steps.")]
SeedOpt = Annotated[int, typer.Option()]
AttentionOpt = Annotated[Attention, typer.Option(help="math: QKᵀ, softmax, ·V as separate ops; sdpa: fused.")]
NewTokensOpt = Annotated[int, typer.Option(help="generate: tokens decoded after the prompt.")]
DetailOpt = Annotated[
    bool, typer.Option("--nvtx-detail", help="NVTX ranges per layer and inside attention and MLP.")
]
PowerOpt = Annotated[
    bool, typer.Option("--power", help="Sample GPU (NVML) and CPU (RAPL) power over the measured steps.")
]
PowerPeriodOpt = Annotated[int, typer.Option("--power-period", metavar="<ms>", help="Power sampling period.")]
# a plain string, checked by the harness: an unknown cause is one line naming the known ones
PlantOpt = Annotated[str | None, typer.Option("--plant", metavar="<cause>", help=catalogue.help_text())]
Optimizer = choices("Optimizer", catalogue.OPTIMIZERS)
OptimizerOpt = Annotated[
    Optimizer,
    typer.Option(help="train: AdamW's implementation: auto (torch's choice), loop (foreach=False), foreach, "
                 "fused."),
]  # fmt: skip
LoaderWorkersOpt = Annotated[
    int,
    typer.Option(
        "--loader-workers",
        metavar="<n>",
        help=f"--plant slow-loader: its DataLoader's workers (at most {catalogue.MAX_LOADER_WORKERS}).",
    ),
]
PinMemoryOpt = Annotated[
    bool,
    typer.Option("--pin-memory", help="--plant pageable-h2d, d2h-copy (CUDA): pinned host memory, "
                 "non_blocking copies."),
]  # fmt: skip
LossEveryOpt = Annotated[
    int, typer.Option("--loss-every", metavar="<n>", help="--plant host-sync: read the loss every N steps.")
]
DynamicOpt = Annotated[
    bool, typer.Option("--dynamic-shapes", help="--plant recompile: its loss compiled for dynamic shapes.")
]
FixOpt = Annotated[
    list[str] | None,
    typer.Option("--fix", metavar="<fix>", show_default=False,
                 help="With --plant: a fix of the catalogue applied (`harness optimize` names them; repeat "
                 "for several): the options it changes keep their values over the plant's."),
]  # fmt: skip


@dataclass(frozen=True)
class Workload:
    """The workload options of `run`, `sweep` and `overhead`, declared once, each field with its
    command-line form: `workload_options` puts them on a command (those it takes, in this order) and hands
    the command one Workload. A command that leaves one out gets its default here."""

    mode: ModeOpt = Mode.train
    device: DeviceOpt = Device.auto
    precision: PrecisionOpt = Precision.fp32
    compile: CompileOpt = False
    batch_size: BatchOpt = 4
    context_length: ContextOpt = None
    vocab_size: VocabOpt = None
    warmup: WarmupOpt = 5
    steps: StepsOpt = 10
    seed: SeedOpt = 0
    attention: AttentionOpt = Attention.sdpa
    new_tokens: NewTokensOpt = 32
    cuda_graphs: CudaGraphsOpt = False
    nvtx_detail: DetailOpt = False
    power: PowerOpt = False
    power_period: PowerPeriodOpt = 50
    plant: PlantOpt = None
    optimizer: OptimizerOpt = Optimizer.auto
    loader_workers: LoaderWorkersOpt = 0
    pin_memory: PinMemoryOpt = False
    loss_every: LossEveryOpt = 1
    dynamic_shapes: DynamicOpt = False
    fix: FixOpt = None


def workload_options(
    omit: tuple[str, ...] = (), after: dict[str, tuple[str, ...]] | None = None
) -> Callable[[F], F]:
    """The workload options on a command, in place of its parameter `workload: Workload`."""
    return option_group("workload", Workload, omit, after)


DEFAULT = Workload()
# a Workload field whose RunConfig field is named otherwise
RENAMED = {"power_period": "power_period_ms", "fix": "fixes"}


def asked(
    workload: Workload, default: Workload = DEFAULT, ctx: typer.Context | None = None
) -> dict[str, Any]:
    """The options the user gave (a value other than its default, or, with the command's `ctx`, any given
    on the command line: `--new-tokens 32` with train is as much a generate option as 8), by configuration
    field, as given."""
    typed = {f.name for f in fields(workload) if ctx is not None and on_command_line(ctx, f.name)}
    values = {f.name: getattr(workload, f.name) for f in fields(workload)}
    return {
        RENAMED.get(k, k): v.value if isinstance(v, Enum) else v
        for k, v in values.items()
        if k in typed or v != getattr(default, k)
    }


def make_config(model: str, workload: Workload) -> RunConfig:
    """The workload options as a RunConfig, field by field (choices as their values), unchecked
    (harness.execution.checks checks it whole)."""
    values = {f.name: getattr(workload, f.name) for f in fields(workload)}
    given = {RENAMED.get(k, k): v.value if isinstance(v, Enum) else v for k, v in values.items()}
    given["fixes"] = list(dict.fromkeys(given["fixes"] or ()))  # a fix given twice is applied once
    return RunConfig(model=model, **given)


def run_command(
    config: RunConfig,
    device: str | None = None,
    *,
    command: str = "run",
    defaults: Workload = DEFAULT,
    leave: Collection[str] = (),
) -> str:
    """`harness run` (or `command`, whose option group's defaults are `defaults`) with the options that
    make `config`, for a user to paste: those other than the defaults and than what its plant sets, each fix
    as `--fix` (with a plant; with none, what it changes alone) and what it changes, none of the Workload
    fields in `leave` (the command's own choice); `device`: the one it resolved to, in place of auto."""
    planted = catalogue.settings(config.plant, config.fixes)
    fixed = {name for fix in config.fixes if fix in catalogue.FIXES for name in catalogue.FIXES[fix].fields}
    words = ["harness", command, config.model]
    for f in fields(Workload):
        if f.name in leave:
            continue
        name = RENAMED.get(f.name, f.name)
        value, default = getattr(config, name), getattr(defaults, f.name)
        if name == "device" and value == "auto" and device is not None:
            value = device
        default = default.value if isinstance(default, Enum) else default
        if name == "fixes":  # with no plant a fix's values are options of their own: `run` takes no --fix
            words += [w for fix in value for w in ("--fix", fix)] if config.plant is not None else []
        elif name not in fixed and (value == default or (name in planted and planted[name] == value)):
            continue
        elif isinstance(value, bool):
            words.append(flag(name) if value else f"--no-{name}")
        else:
            words += [flag(name), str(value)]
    return shlex.join(words)


PANEL = "Across ranks (torchrun)"
NprocOpt = Annotated[
    int,
    typer.Option(
        "--nproc", help="Ranks on this machine (torchrun --nproc-per-node): DDP, gloo on CPU, NCCL on CUDA.",
        rich_help_panel=PANEL,
    ),
]  # fmt: skip
NnodesOpt = Annotated[int, typer.Option("--nnodes", help="Machines taking part.", rich_help_panel=PANEL)]
NodeRankOpt = Annotated[
    int, typer.Option("--node-rank", help="This machine's place, 0 … nnodes-1.", rich_help_panel=PANEL)
]
RdzvOpt = Annotated[
    str | None,
    text_option("--rdzv-endpoint", "HOST:PORT", "node 0's HOST:PORT", "Node 0's address, with --nnodes > 1.",
                rich_help_panel=PANEL),
]  # fmt: skip
RankTimeoutOpt = Annotated[
    float,
    typer.Option(
        "--rank-timeout", metavar="SECONDS", rich_help_panel=PANEL,
        help="Stop the run when a rank starts no phase for this long (a hung rank).",
    ),
]  # fmt: skip

DelayRankOpt = Annotated[
    str | None,
    typer.Option(
        "--delay-rank", metavar="R:MS", rich_help_panel=PANEL,
        help="Rank R sleeps MS ms inside every forward: a straggler of known cost, for tests and demos.",
    ),
]  # fmt: skip


@dataclass(frozen=True)
class Ranks:
    """Where a run's ranks go: how many on this machine, on how many machines, this machine's place,
    node 0's address, and how long a rank may start no phase before the run is stopped."""

    nproc: NprocOpt = 1
    nnodes: NnodesOpt = 1
    node_rank: NodeRankOpt = 0
    rdzv_endpoint: RdzvOpt = None
    rank_timeout: RankTimeoutOpt = 300.0
    delay_rank: DelayRankOpt = None  # R:MS


ONE_RANK = Ranks()


def rank_options() -> Callable[[F], F]:
    """The rank options on a command, in place of its parameter `ranks: Ranks`."""
    return option_group("ranks", Ranks)


def asked_ranks(ranks: Ranks) -> dict[str, object]:
    """The rank options the user gave (a value other than its default), by configuration field."""
    return {k: v for k, v in asdict(ranks).items() if v != getattr(ONE_RANK, k)}


def delay(text: str | None, world_size: int) -> tuple[int | None, int]:
    """`--delay-rank R:MS` as (rank, ms); (None, 0) without it. UsageError for a malformed one, a rank
    outside the run, or a run of one rank."""
    if text is None:
        return None, 0
    rank_text, sep, ms_text = text.partition(":")
    rank, ms = digits(rank_text.strip()), digits(ms_text.strip())
    if not sep or rank is None or ms is None:
        raise UsageError(f"--delay-rank takes RANK:MS (e.g. 1:200), got {text!r}")
    if world_size < 2:
        raise UsageError("--delay-rank delays one rank of several: give --nproc 2 or more")
    if rank >= world_size:
        raise UsageError(f"--delay-rank {text}: rank {rank} is not one of the {world_size} ranks")
    return rank, ms


def with_ranks(config: RunConfig, ranks: Ranks) -> RunConfig:
    """`config` with its rank layout (harness.execution.checks refuses one torchrun would refuse)."""
    delay_rank, delay_ms = delay(ranks.delay_rank, ranks.nproc * ranks.nnodes)
    return replace(
        config,
        nproc=ranks.nproc,
        nnodes=ranks.nnodes,
        node_rank=ranks.node_rank,
        rdzv_endpoint=ranks.rdzv_endpoint,
        rank_timeout=ranks.rank_timeout,
        delay_rank=delay_rank,
        delay_ms=delay_ms,
    )


class Capture(StrEnum):
    all = "all"
    measured = "measured"


# --profiler's choices: the registry's profilers (the run without one is no choice: it is the default)
Profiler = StrEnum("Profiler", [(name, name) for name in registry.NAMES if name != "none"])  # type: ignore[misc]


NsysMode = StrEnum("NsysMode", [(mode, mode) for mode in NSYS_MODES])  # type: ignore[misc]


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
    # nsys took an empty word for the program to profile
    text_option(
        "--nsys-arg",
        "<arg>",
        "an nsys flag (--trace=cuda, …)",
        "Passed to `nsys profile` as is (repeatable).",
    ),
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
    ctx: typer.Context | None = None,
) -> Prepared:
    """Before any run, once: the configuration checked whole (harness.execution.checks; the layers after
    trust it), an option given that changes nothing here refused or warned of (`check_effect`,
    `check_profiler_effect`: an option the profiler's options do not read), the store (a bad --db fails
    now, not after the work; after the profiler's checks, so that a profiler refused creates no database),
    the profiler's own check and options (built by it from `args`, the command line's values by parameter
    name), and its warnings said (or the run refused)."""
    ready = checked(replace(with_ranks(make_config(model, workload), ranks), memory=memory))
    device = ready.device.type
    plugin = registry.get(profiler)
    options = plugin.options_from(args)
    reads = {f.metadata.get("cli", f.name) for f in fields(options)}  # what its options are built from
    given = {k for k, v in NO_PROFILER_ARGS.values().items() if args.get(k, v) != v}
    if ready.config.nvtx_detail and ready.config.compile and profiler is None:
        raise UsageError(
            "--nvtx-detail with --compile times no block (hooks would break the compiled graph), and "
            "without a profiler nothing records its ranges: give --nsys or --profiler torch, or leave it out"
        )
    auto = ready.config.device == "auto"
    for line in check_profiler_effect(profiler, reads, given, memory, device, auto):
        warn(line)
    for line in check_effect(ready.config, {**asked(workload, ctx=ctx), **asked_ranks(ranks)}, device):
        warn(line)  # an option given that changes nothing here
    plugin.check(ready.config, device)
    # nsys: what it may lose of the program's CUDA, and the profile folder; before the store, so that a
    # profiler refused leaves no database behind
    preflight = plugin.preflight(options, device)
    store = results_db.ResultsStore(db)
    for line in [*ready.warnings, *preflight]:
        warn(line)
    return Prepared(ready.config, store, plugin, options)
