"""The changes `harness optimize` can make to a configuration of its own workloads: each of the catalogue's
fixes (workloads.plants.catalogue.FIXES) as a new RunConfig, or the reason it does not apply.

A change is what a user would change in their step (a knob of the run: docs/plants.md), applied over what
the configuration has, the plant left in; its name is added to the configuration's `fixes`, so a field it
changes keeps its value over a plant's setting and the stored run says what was changed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from harness.core.records import RunConfig
from workloads.plants import catalogue

BATCH_FACTOR = 2  # a larger batch: twice the batch (launch-bound's batch 1: the default 4)
LOSS_EVERY = 10  # drop-item: the loss read every 10 steps
LOADER_WORKERS = 2  # loader-workers: two processes load ahead

Change = Callable[[RunConfig, str], RunConfig | str]


def _with(config: RunConfig, fix: str, **fields: object) -> RunConfig:
    return replace(config, **fields, fixes=[*config.fixes, fix])  # type: ignore[arg-type]


def _undoing(
    c: RunConfig, plant: str, absent: str, done: str | None, fix: str, **fields: object
) -> RunConfig | str:
    """The change that undoes what `plant` does to the step: only where the step has it (else `absent`), and
    not where the knob is turned already (`done`: saying so; None: it is not)."""
    if c.plant != plant:
        return absent
    return done if done is not None else _with(c, fix, **fields)


def _drop_item(c: RunConfig, device: str) -> RunConfig | str:
    absent = "the step reads no loss on the host"
    done = "the loss is read every few steps already" if c.loss_every > 1 else None
    return _undoing(c, "host-sync", absent, done, "drop-item", loss_every=LOSS_EVERY)


def _loader_workers(c: RunConfig, device: str) -> RunConfig | str:
    absent = "the step has no data loader: its batch is made once, on the device"
    done = "its loader has workers already" if c.loader_workers > 0 else None
    return _undoing(c, "slow-loader", absent, done, "loader-workers", loader_workers=LOADER_WORKERS)


def _larger_batch(c: RunConfig, device: str) -> RunConfig | str:
    batch = 4 if c.batch_size == 1 else c.batch_size * BATCH_FACTOR
    return _with(c, "larger-batch", batch_size=batch)


# generate's --compile and --cuda-graphs take its decode step only
NO_DECODE = "--new-tokens 1 decodes no token: no decode step to compile or replay"


def _compile(c: RunConfig, device: str) -> RunConfig | str:
    if c.compile:
        return "compiled already"
    if device != "cuda":
        return "not tried on the CPU: compiling the step takes longer than the runs it is measured by"
    if c.cuda_graphs:
        return "--cuda-graphs and --compile both replay a static decode step: one of them"
    if c.mode == "generate" and c.new_tokens == 1:
        return NO_DECODE
    return _with(c, "compile", compile=True)


def _fused_adamw(c: RunConfig, device: str) -> RunConfig | str:
    if c.mode != "train":
        return f"--mode {c.mode} has no optimizer step"
    if c.optimizer in ("fused", "foreach"):
        return f"AdamW is {c.optimizer} already"
    return _with(c, "fused-adamw", optimizer="fused")


def _bf16(c: RunConfig, device: str) -> RunConfig | str:
    if device != "cuda":
        return "a CPU's bf16 is emulated on most: tried on a GPU only"
    return (
        "the matmuls are not fp32" if c.precision != "fp32" else _with(c, "bf16-autocast", precision="bf16")
    )


def _sdpa(c: RunConfig, device: str) -> RunConfig | str:
    return "attention is sdpa already" if c.attention == "sdpa" else _with(c, "sdpa", attention="sdpa")


def _pinned(c: RunConfig, device: str) -> RunConfig | str:
    if c.plant not in ("pageable-h2d", "d2h-copy"):
        return "the step copies nothing between host and device"
    if device != "cuda":
        return "pinned memory is a GPU's: a CPU run has no host-device copy"
    return "its copies are pinned already" if c.pin_memory else _with(c, "pinned-copies", pin_memory=True)


def _dynamic(c: RunConfig, device: str) -> RunConfig | str:
    done = "compiled for dynamic shapes already" if c.dynamic_shapes else None
    absent = "the step compiles nothing shape by shape"
    return _undoing(c, "recompile", absent, done, "dynamic-shapes", dynamic_shapes=True)


def _cuda_graphs(c: RunConfig, device: str) -> RunConfig | str:
    if c.mode != "generate":
        return "CUDA graphs replay generate's decode step: --mode generate"
    if device != "cuda":
        return "CUDA graphs need a CUDA device"
    if c.cuda_graphs or c.compile:
        return "the decode step is replayed already" if c.cuda_graphs else "--compile replays it already"
    if c.nvtx_detail:
        return "--nvtx-detail's hooks do not run in a replayed graph"
    if c.new_tokens == 1:
        return NO_DECODE
    return _with(c, "cuda-graphs", cuda_graphs=True)


CHANGES: dict[str, Change] = {
    "drop-item": _drop_item,
    "loader-workers": _loader_workers,
    "larger-batch": _larger_batch,
    "compile": _compile,
    "fused-adamw": _fused_adamw,
    "bf16-autocast": _bf16,
    "sdpa": _sdpa,
    "pinned-copies": _pinned,
    "dynamic-shapes": _dynamic,
    "cuda-graphs": _cuda_graphs,
}


def applied(fix: str, config: RunConfig, device: str) -> RunConfig | str:
    """`config` with `fix` applied on `device` (a device type), or one line saying why it does not apply."""
    return CHANGES[fix](config, device)


def in_words(fix: str) -> str:
    return catalogue.FIXES[fix].does
