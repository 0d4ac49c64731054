"""Workload options shared by `run`, `sweep` and `overhead`."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from harness.records import RunConfig


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


def make_config(
    model: str,
    mode: Mode,
    device: Device,
    precision: Precision,
    compile: bool,
    batch_size: int,
    context_length: int | None,
    vocab_size: int | None,
    warmup: int,
    steps: int,
    seed: int,
    attention: Attention,
    new_tokens: int,
    nvtx_detail: bool,
    power: bool = False,
    power_period_ms: int = 50,
) -> RunConfig:
    from harness.bounds import check_storable

    config = RunConfig(
        model=model,
        mode=mode.value,
        device=device.value,
        precision=precision.value,
        compile=compile,
        batch_size=batch_size,
        context_length=context_length,
        vocab_size=vocab_size,
        warmup=warmup,
        steps=steps,
        seed=seed,
        attention=attention.value,
        new_tokens=new_tokens,
        nvtx_detail=nvtx_detail,
        power=power,
        power_period_ms=power_period_ms,
    )
    check_storable(config)  # before anything runs: a count the database cannot store would lose the run
    return config
