"""The catalogue of planted causes and of the fixes for them, as data, without torch.

`harness run MODEL --plant CAUSE` runs the train step with a cause (the code that plants each is
workloads/plants/steps.py, plain PyTorch, applied through the runner's train step); `python -m
workloads.plants CAUSE` is the same step as a program of its own, for `harness profile -- CMD`. What each
cause carries here, importable without torch, so `--help` lists them and a configuration is checked before
any work:

- `does`: one short line of what it changes (the `--help` of `--plant` lists them; steps.py says each in
  full).
- `rule`: the advice rule that must be the first finding of a capture of it (None for the clean control).
- `cpu`: what a CPU run under nsys (`--trace cuda,osrt,nvtx`, no sampling: its capture and its stored
  record) shows of it: SHOWS (the cause is there to see), HIDDEN (it runs, but only the phases' lengths
  change: nothing names it), REFUSED (a GPU cause: `--device cpu` is refused with one line). docs/plants.md
  has what each capture holds.
- `fixes`: what the harness can change itself to remove it, in order of preference (FIXES).
- `settings`: the configuration fields the cause sets (launch-bound: batch 1); a configuration with the
  plant takes them whatever it was given, unless a fix it names changes that field (`harness optimize`'s
  larger batch over launch-bound's batch 1), so a stored run says what ran.

A fix is a change of the step a user could make in their own code, carried by a knob of the run (`Knobs`,
and the run's options of the same names): the slow loader given workers, the copies pinned, the loss read
every N steps. A fix changes the step with the plant still in it; it never switches the plant off.

Where a cause's cost lands: inside the phase where a user's would (steps.py says where, per cause). A batch
the plant hands the step (slow-loader, pageable-h2d) is fetched at the start of the forward phase inside an
NVTX range `data` (workloads.names.DATA), so the step's time includes the wait (tokens/s stay honest) and
the capture tells the loader's time from the model's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SHOWS, HIDDEN, REFUSED = "shows", "hidden", "refused"

OPTIMIZERS = ("auto", "loop", "foreach", "fused")  # AdamW's implementation (Knobs.optimizer)


# the planted loader's DataLoader workers, each a process forked from the run: torch warns past the cores;
# more is a slip (`--loader-workers 1000000` forked until stopped), never a loader
MAX_LOADER_WORKERS = 256


@dataclass(frozen=True)
class Knobs:
    """How the train step is written where a user's could differ, each a run option of the same name:

    - optimizer: AdamW's implementation: auto (torch's choice), loop (foreach=False, a loop over the
      parameters), foreach, fused;
    - loader_workers: the planted loader's DataLoader workers (0: in the main process);
    - pin_memory: a planted host batch, and a copy to the host, in pinned memory with non_blocking copies;
    - loss_every: the planted host read of the loss every N steps (1: every step), summed on the device in
      between;
    - dynamic_shapes: the planted compiled loss compiled for dynamic shapes (one graph for every length).
    """

    optimizer: str = "auto"
    loader_workers: int = 0
    pin_memory: bool = False
    loss_every: int = 1
    dynamic_shapes: bool = False


KNOBS: tuple[str, ...] = tuple(Knobs.__dataclass_fields__)


@dataclass(frozen=True)
class Fix:
    name: str
    does: str
    fields: tuple[str, ...]  # the configuration fields (knobs) it changes


FIXES: dict[str, Fix] = {
    f.name: f
    for f in (
        Fix("drop-item", "no loss read on the host every step (summed on the device, read every N steps)",
            ("loss_every",)),
        Fix("loader-workers", "DataLoader(num_workers=N, pin_memory=True): load the next batches in other "
            "processes", ("loader_workers",)),
        Fix("larger-batch", "a larger batch: fewer, larger kernels per token", ("batch_size",)),
        Fix("compile", "torch.compile: fuse the small ops into few kernels", ("compile",)),
        Fix("fused-adamw", "AdamW(fused=True), or foreach=True: a few kernels for all parameters",
            ("optimizer",)),
        Fix("bf16-autocast", "bf16 autocast (or TF32 matmuls) where fp32 is not needed", ("precision",)),
        Fix("sdpa", "scaled_dot_product_attention (a fused kernel) instead of the matmul, softmax and matmul",
            ("attention",)),
        Fix("pinned-copies", "pinned host memory and non_blocking copies, overlapped with the GPU's work",
            ("pin_memory",)),
        Fix("dynamic-shapes", "torch.compile(dynamic=True): one graph for every shape instead of one each",
            ("dynamic_shapes",)),
        Fix("cuda-graphs", "generate: the decode step captured once as a CUDA graph and replayed per token",
            ("cuda_graphs",)),
    )
}  # fmt: skip


@dataclass(frozen=True)
class Cause:
    name: str
    does: str
    rule: str | None
    cpu: str
    fixes: tuple[str, ...] = ()
    settings: dict[str, Any] = field(default_factory=dict)


CONTROL = "clean"  # the cause that plants nothing: the step as the harness's train step has it

CAUSES: dict[str, Cause] = {
    c.name: c
    for c in (
        Cause(CONTROL, "nothing planted (the control)", None, HIDDEN),
        Cause("host-sync", "loss.item() every step", "host-sync", HIDDEN, ("drop-item",)),
        Cause("slow-loader", "25 ms a sample, num_workers=0", "data-loader", SHOWS, ("loader-workers",)),
        Cause("launch-bound", "batch 1, tiny ops per parameter", "launch-bound", HIDDEN,
              ("larger-batch", "compile"), {"batch_size": 1}),
        Cause("optimizer-loop", "AdamW(foreach=False)", "optimizer-loop", HIDDEN, ("fused-adamw",),
              {"optimizer": "loop"}),
        Cause("fp32-matmul", "fp32 GEMMs, no TF32 (GPU only)", "fp32-gemm", REFUSED, ("bf16-autocast",),
              {"precision": "fp32"}),
        Cause("math-attention", 'attention="math", not sdpa', "math-attention", HIDDEN, ("sdpa",),
              {"attention": "math"}),
        Cause("pageable-h2d", "blocking pageable copy per step", "pageable-copy", HIDDEN, ("pinned-copies",)),
        Cause("d2h-copy", "logits.cpu() every step", "d2h-copy", HIDDEN, ("pinned-copies",)),
        Cause("recompile", "torch.compile recompiles each step", "recompile", SHOWS, ("dynamic-shapes",)),
    )
}  # fmt: skip
NAMES: tuple[str, ...] = tuple(CAUSES)

# fixes for a rule that no planted cause brings: a launch-bound decode is what CUDA graphs are for
MORE_FIXES: dict[str, tuple[str, ...]] = {"launch-bound": ("cuda-graphs",)}


def unknown(name: str | None) -> str | None:
    """One line naming the known causes, for a name that is none of them (None for a known one)."""
    if name is not None and name not in CAUSES:
        return f"unknown plant {name!r}; known plants: {', '.join(NAMES)}"
    return None


def refusal(name: str | None, device_type: str) -> str | None:
    """Why `name` cannot be planted on `device_type` (one line), or None."""
    cause = CAUSES.get(name or "")
    if cause is None or cause.cpu != REFUSED or device_type == "cuda":
        return None
    return (
        f"--plant {name} is a GPU cause: on {device_type} there is no TF32 or cuBLAS to plant it in; "
        "use --device cuda"
    )


def unseen(
    name: str | None,
    device_type: str,
    rules: set[str],
    capture: str = "the baseline's capture",
    fixes: tuple[str, ...] | list[str] = (),
) -> str | None:
    """Why the finding of planted cause `name` is not among `rules` (those `capture` of it on `device_type`
    fired), in one line; None when it is there, nothing was planted, or one of `fixes` (those the run
    applied) is the cause's own (a fix for another cause leaves this one in the step)."""
    cause = CAUSES.get(name or "")
    if cause is None or cause.rule is None or cause.rule in rules or set(fixes) & set(cause.fixes):
        return None
    if cause.cpu == HIDDEN and device_type == "cpu":
        return (
            f"--plant {name} does not show in a cpu capture: it runs, but only the phases' lengths change "
            f"and no finding names it; on a GPU its finding ({cause.rule}) brings the fixes for it"
        )
    return (
        f"--plant {name}: its finding ({cause.rule}) did not fire in {capture} (a cost under "
        "the rule's threshold on this machine, or a capture it could not judge): `harness advise` of the "
        "capture says what it saw"
    )


def settings(name: str | None, fixes: tuple[str, ...] | list[str] = ()) -> dict[str, Any]:
    """The configuration fields cause `name` sets, less those a fix in `fixes` changes (none for an
    unknown name: a new run's checks refuse it; a stored run of a newer harness loads as it was stored)."""
    cause = CAUSES.get(name or "")
    lifted = {f for fix in fixes if fix in FIXES for f in FIXES[fix].fields}
    return {k: v for k, v in cause.settings.items() if k not in lifted} if cause else {}


def gpu_only(name: str | None) -> bool:
    cause = CAUSES.get(name or "")
    return cause is not None and cause.cpu == REFUSED


def fixes_for(rule: str) -> tuple[str, ...]:
    """The fixes the harness can try for a finding of `rule`: those of the causes it is the rule of, then
    MORE_FIXES', each once."""
    found = [f for c in CAUSES.values() if c.rule == rule for f in c.fixes]
    return tuple(dict.fromkeys([*found, *MORE_FIXES.get(rule, ())]))


def help_text() -> str:
    """`--plant`'s help: every cause on a line of its own with what it does (`\\b`: click keeps the lines as
    they are; each fits 80 columns)."""
    lines = "\n".join(f"{c.name}: {c.does}" for c in CAUSES.values())
    return f"\b\nPlant a known cause in the train step:\n{lines}"
