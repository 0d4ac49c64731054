"""Workload options shared by `run`, `sweep` and `overhead`: declared once (`Workload`,
`workload_options`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated

import typer

from harness.cli.option_group import F, option_group
from harness.core.bounds import check_storable
from harness.core.records import RunConfig


class Mode(StrEnum):
    train = "train"
    forward = "forward"
    generate = "generate"


class Device(StrEnum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"
    mps = "mps"


class Precision(StrEnum):
    fp32 = "fp32"
    bf16 = "bf16"
    fp16 = "fp16"


class Attention(StrEnum):
    math = "math"
    sdpa = "sdpa"


ModeOpt = Annotated[
    Mode, typer.Option(help="train: forward+backward+AdamW; forward: no_grad; generate: KV cache.")
]
DeviceOpt = Annotated[Device, typer.Option(help="auto picks cuda, then mps, then cpu.")]
PrecisionOpt = Annotated[Precision, typer.Option(help="Autocast mixed precision (fp32 master weights).")]
CompileOpt = Annotated[bool, typer.Option("--compile/--no-compile", help="torch.compile the model.")]
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


@dataclass(frozen=True)
class Workload:
    """The workload options of `run`, `sweep` and `overhead`, declared once: `workload_options` puts them
    on a command (those it takes, in this order) and hands the command one Workload. A command that leaves
    one out gets its default here."""

    mode: Mode = Mode.train
    device: Device = Device.auto
    precision: Precision = Precision.fp32
    compile: bool = False
    batch_size: int = 4
    context_length: int | None = None
    vocab_size: int | None = None
    warmup: int = 5
    steps: int = 10
    seed: int = 0
    attention: Attention = Attention.sdpa
    new_tokens: int = 32
    nvtx_detail: bool = False
    power: bool = False
    power_period: int = 50


# each field's command-line form
WORKLOAD_OPTIONS = {
    "mode": ModeOpt,
    "device": DeviceOpt,
    "precision": PrecisionOpt,
    "compile": CompileOpt,
    "batch_size": BatchOpt,
    "context_length": ContextOpt,
    "vocab_size": VocabOpt,
    "warmup": WarmupOpt,
    "steps": StepsOpt,
    "seed": SeedOpt,
    "attention": AttentionOpt,
    "new_tokens": NewTokensOpt,
    "nvtx_detail": DetailOpt,
    "power": PowerOpt,
    "power_period": PowerPeriodOpt,
}


def workload_options(
    omit: tuple[str, ...] = (), after: dict[str, tuple[str, ...]] | None = None
) -> Callable[[F], F]:
    """The workload options on a command, in place of its parameter `workload: Workload`."""
    return option_group("workload", Workload, WORKLOAD_OPTIONS, omit, after)


DEFAULT = Workload()


def make_config(model: str, workload: Workload) -> RunConfig:
    w = workload
    config = RunConfig(
        model=model,
        mode=w.mode.value,
        device=w.device.value,
        precision=w.precision.value,
        compile=w.compile,
        batch_size=w.batch_size,
        context_length=w.context_length,
        vocab_size=w.vocab_size,
        warmup=w.warmup,
        steps=w.steps,
        seed=w.seed,
        attention=w.attention.value,
        new_tokens=w.new_tokens,
        nvtx_detail=w.nvtx_detail,
        power=w.power,
        power_period_ms=w.power_period,
    )
    check_storable(config)  # before anything runs: a count the database cannot store would lose the run
    return config
