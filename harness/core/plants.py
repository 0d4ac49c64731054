"""The catalogue of planted causes: each a small change to the train step with one known cause, as data.

`harness run MODEL --plant CAUSE` runs the train step with it (the code that plants each is
workloads/plants/, plain PyTorch, applied through the runner's train step); `python -m workloads.plants CAUSE`
is the same step as a program of its own, for `harness profile -- CMD`. What each cause carries here, without
torch, so `--help` lists them and a configuration is checked before any work:

- `does`: one short line of what it changes (the `--help` of `--plant` lists them; workloads/plants/ says
  each in full).
- `rule`: the advice rule that must be the first finding of a capture of it (None for the clean control).
- `cpu`: what a CPU run under nsys (`--trace cuda,osrt,nvtx`, no sampling: its capture and its stored
  record) shows of it: SHOWS (the cause is there to see), HIDDEN (it runs, but only the phases' lengths
  change: nothing names it), REFUSED (a GPU cause: `--device cpu` is refused with one line). docs/plants.md
  has what each capture holds.
- `fixes`: what the harness can change itself to remove it, in order of preference (FIXES says each).
- `settings`: the configuration fields the cause sets (launch-bound: batch 1); a RunConfig with the plant
  takes them whatever it was given, so a stored run says what ran.

Where a cause's cost lands: inside the phase where a user's would (workloads/plants/__init__.py says where,
per cause). A batch the plant hands the step (slow-loader, pageable-h2d) is fetched at the start of the
forward phase inside an NVTX range `data` (workloads.names.DATA), so the step's time includes the wait
(tokens/s stay honest) and the capture tells the loader's time from the model's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.core.errors import UsageError

SHOWS, HIDDEN, REFUSED = "shows", "hidden", "refused"

FIXES: dict[str, str] = {
    "drop-item": "no loss read on the host every step (log it every N steps, or keep it on the device)",
    "loader-workers": "DataLoader(num_workers=N, pin_memory=True): load the next batches in other processes",
    "larger-batch": "a larger batch: fewer, larger kernels per token",
    "compile": "torch.compile: fuse the small ops into few kernels",
    "fused-adamw": "AdamW(fused=True), or foreach=True: a few kernels for all parameters",
    "bf16-autocast": "bf16 autocast (or TF32 matmuls) where fp32 is not needed",
    "sdpa": "scaled_dot_product_attention (a fused kernel) instead of the matmul, softmax and matmul",
    "pinned-copies": "pinned host memory and non_blocking copies, overlapped with the GPU's work",
    "dynamic-shapes": "torch.compile(dynamic=None or True): one graph for every shape instead of one each",
}


@dataclass(frozen=True)
class Cause:
    name: str
    does: str
    rule: str | None
    cpu: str
    fixes: tuple[str, ...] = ()
    settings: dict[str, Any] = field(default_factory=dict)


CAUSES: dict[str, Cause] = {
    c.name: c
    for c in (
        Cause("clean", "nothing planted (the control)", None, HIDDEN),
        Cause("host-sync", "loss.item() every step", "host-sync", HIDDEN, ("drop-item",)),
        Cause("slow-loader", "25 ms a sample, num_workers=0", "data-loader", SHOWS, ("loader-workers",)),
        Cause("launch-bound", "batch 1, tiny ops per parameter", "launch-bound", HIDDEN,
              ("larger-batch", "compile"), {"batch_size": 1}),
        Cause("optimizer-loop", "AdamW(foreach=False)", "optimizer-loop", HIDDEN, ("fused-adamw",)),
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


def check(name: str | None) -> None:
    """UsageError, one line naming the known causes, for a name that is none of them."""
    if name is not None and name not in CAUSES:
        raise UsageError(f"unknown plant {name!r}; known plants: {', '.join(NAMES)}")


def refusal(name: str | None, device_type: str) -> str | None:
    """Why `name` cannot be planted on `device_type` (one line), or None."""
    cause = CAUSES.get(name or "")
    if cause is None or cause.cpu != REFUSED or device_type == "cuda":
        return None
    return (
        f"--plant {name} is a GPU cause: on {device_type} there is no TF32 or cuBLAS to plant it in; "
        "use --device cuda"
    )


def settings(name: str | None) -> dict[str, Any]:
    """The configuration fields cause `name` sets (none for an unknown name: a stored run of a newer
    harness loads as it was stored)."""
    cause = CAUSES.get(name or "")
    return dict(cause.settings) if cause else {}


def help_text() -> str:
    """`--plant`'s help: every cause on a line of its own with what it does (`\\b`: click keeps the lines as
    they are; each fits 80 columns)."""
    lines = "\n".join(f"{c.name}: {c.does}" for c in CAUSES.values())
    return f"\b\nPlant a known cause in the train step:\n{lines}"
