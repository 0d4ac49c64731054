"""Workload options shared by `run`, `sweep` and `overhead`: declared once (`Workload`,
`workload_options`)."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from enum import Enum, StrEnum
from typing import Annotated, Any

import typer

from harness.cli.option_group import F, option_group
from harness.core.devices import DEVICES
from harness.core.records import RunConfig
from harness.execution.checks import flag
from workloads.names import ATTENTIONS, MODES, PRECISIONS
from workloads.plants import catalogue


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
    int | None, typer.Option("--context-length", "-t", help="Default: the model's (generate: prompt of 64).")
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
    typer.Option("--loader-workers", metavar="<n>", help="--plant slow-loader: its DataLoader's workers."),
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


def asked(workload: Workload, default: Workload = DEFAULT) -> dict[str, Any]:
    """The options the user gave (a value other than its default), by configuration field, as given."""
    values = {RENAMED.get(f.name, f.name): getattr(workload, f.name) for f in fields(workload)}
    defaults = {RENAMED.get(f.name, f.name): getattr(default, f.name) for f in fields(default)}
    return {k: v.value if isinstance(v, Enum) else v for k, v in values.items() if v != defaults[k]}


def make_config(model: str, workload: Workload) -> RunConfig:
    """The workload options as a RunConfig, field by field (choices as their values), unchecked
    (harness.execution.checks checks it whole)."""
    values = {f.name: getattr(workload, f.name) for f in fields(workload)}
    given = {RENAMED.get(k, k): v.value if isinstance(v, Enum) else v for k, v in values.items()}
    given["fixes"] = list(given["fixes"] or ())
    return RunConfig(model=model, **given)


def run_command(config: RunConfig, device: str | None = None) -> str:
    """`harness run` with the options that make `config`, for a user to paste: those other than run's
    defaults and than what its plant sets, each fix as `--fix` and what it changes; `device`: the one it
    resolved to, in place of auto."""
    planted = catalogue.settings(config.plant, config.fixes)
    fixed = {name for fix in config.fixes if fix in catalogue.FIXES for name in catalogue.FIXES[fix].fields}
    words = ["harness", "run", config.model]
    for f in fields(Workload):
        name = RENAMED.get(f.name, f.name)
        value, default = getattr(config, name), getattr(DEFAULT, f.name)
        if name == "device" and value == "auto" and device is not None:
            value = device
        default = default.value if isinstance(default, Enum) else default
        if name == "fixes":
            words += [w for fix in value for w in ("--fix", fix)]
        elif name not in fixed and (value == default or (name in planted and planted[name] == value)):
            continue
        elif isinstance(value, bool):
            words.append(flag(name) if value else f"--no-{name}")
        else:
            words += [flag(name), str(value)]
    return shlex.join(words)
