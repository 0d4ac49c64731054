"""Planted bottlenecks: small, honest changes to a training step, each with one known cause.

A Plant is asked at each point where a user's train step could differ from the clean one; the clean Plant
answers with the step as it is. The harness's runner (and `python -m workloads.plants`, the same step as a
program of its own) builds the step through these hooks:

- `optimizer(params)`: the optimizer (optimizer-loop: AdamW(foreach=False));
- `batches(x, y, device)`: None for the step's one fixed batch, or a function giving each step's batch
  (slow-loader: a DataLoader in the main process; pageable-h2d: a host batch copied every step). It is called
  inside the step, at the start of forward, inside an NVTX range `data` (the harness's runner) or just before
  forward (the program): the wait is inside the step's time, as a user's is, and the capture tells the
  loader's time from the model's by that range and by what the loader does there (its sleeps are OS-runtime
  calls);
- `loss(loss_fn, params)`: the step's loss from (logits, targets, step) (launch-bound: a parameter-by-
  parameter L2 penalty added; recompile: a compiled loss over a window that moves every step);
- `after_loss(logits, loss)`: what the step does with them in forward, after the loss (host-sync:
  loss.item(); d2h-copy: logits copied to the host);
- `context(device)`: held around the steps (fp32-matmul: TF32 off);
- `settings`: what the cause needs of the run (batch size 1, math attention, fp32).

Nothing here imports the harness or emits NVTX: the caller marks the ranges.
"""

from __future__ import annotations

import contextlib
import time
import zlib
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import torch
from torch.utils.data import DataLoader, Dataset

Batch = tuple[torch.Tensor, torch.Tensor]
LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
StepLoss = Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]

SAMPLE_WAIT_S = 0.025  # slow-loader: each sample's wait for storage (100 ms a batch of 4)
PENALTY = 1e-6  # launch-bound: the L2 penalty's weight
LR = 3e-4


class Plant:
    """The clean step: the hooks as the harness's train step has them without a plant."""

    name: ClassVar[str] = "clean"
    settings: ClassVar[dict[str, Any]] = {}
    gpu_only: ClassVar[bool] = False

    def optimizer(self, params: list[torch.Tensor]) -> torch.optim.Optimizer:
        return torch.optim.AdamW(params, lr=LR)

    def batches(self, x: torch.Tensor, y: torch.Tensor, device: torch.device) -> Callable[[], Batch] | None:
        return None

    def loss(self, loss_fn: LossFn, params: list[torch.Tensor]) -> StepLoss:
        return lambda logits, targets, step: loss_fn(logits, targets)

    def after_loss(self, logits: torch.Tensor, loss: torch.Tensor) -> None:
        return None

    def context(self, device: torch.device) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()


class HostSync(Plant):
    """The loss read on the host every step, as a user logging it does: on a GPU a device-to-host copy of
    4 bytes and a wait for every kernel queued before it, inside forward."""

    name = "host-sync"

    def __init__(self) -> None:
        self.losses: list[float] = []

    def after_loss(self, logits: torch.Tensor, loss: torch.Tensor) -> None:
        self.losses.append(loss.item())


class _Stored(Dataset):
    """The step's batch as samples kept compressed, as on disk: each read waits `wait_s` for storage and
    decodes (zlib). Indices past the batch wrap around, so every batch is the step's batch."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, wait_s: float) -> None:
        rows = torch.cat([x.cpu(), y.cpu()[:, -1:]], dim=1)  # a sample is its tokens and the next one
        self.blobs = [zlib.compress(row.numpy().tobytes()) for row in rows]
        self.wait_s = wait_s

    def __len__(self) -> int:
        return 2**62

    def __getitem__(self, index: int) -> Batch:
        time.sleep(self.wait_s)
        tokens = torch.frombuffer(
            bytearray(zlib.decompress(self.blobs[index % len(self.blobs)])), dtype=torch.int64
        )
        return tokens[:-1], tokens[1:]


class SlowLoader(Plant):
    """A DataLoader in the main process (num_workers=0) over samples that wait for storage and are decoded
    one by one: the step waits `SAMPLE_WAIT_S` × batch size for it. Its copies to a GPU are pinned and
    non_blocking, so the loader is the one cause."""

    name = "slow-loader"

    def __init__(self, wait_s: float = SAMPLE_WAIT_S) -> None:
        self.wait_s = wait_s

    def batches(self, x: torch.Tensor, y: torch.Tensor, device: torch.device) -> Callable[[], Batch]:
        pin = device.type == "cuda"
        loader = DataLoader(_Stored(x, y, self.wait_s), batch_size=x.size(0), num_workers=0, pin_memory=pin)
        it: Iterator[Batch] = iter(loader)

        def next_batch() -> Batch:
            xb, yb = next(it)
            return xb.to(device, non_blocking=pin), yb.to(device, non_blocking=pin)

        return next_batch


class LaunchBound(Plant):
    """Batch 1, and an L2 penalty added to the loss parameter by parameter in Python: three tiny ops per
    parameter in forward and as many in backward, each its own kernel on a GPU."""

    name = "launch-bound"
    settings: ClassVar[dict[str, Any]] = {"batch_size": 1}

    def loss(self, loss_fn: LossFn, params: list[torch.Tensor]) -> StepLoss:
        def step_loss(logits: torch.Tensor, targets: torch.Tensor, step: int) -> torch.Tensor:
            loss = loss_fn(logits, targets)
            for p in params:
                loss = loss + PENALTY * p.pow(2).sum()
            return loss

        return step_loss


class OptimizerLoop(Plant):
    """AdamW with foreach=False: its per-parameter loop, a dozen small ops for each parameter. (torch picks
    that loop itself for CPU tensors: on the CPU the clean step has it too.)"""

    name = "optimizer-loop"

    def optimizer(self, params: list[torch.Tensor]) -> torch.optim.Optimizer:
        return torch.optim.AdamW(params, lr=LR, foreach=False)


class Fp32Matmul(Plant):
    """fp32 matmuls where bf16 or TF32 serve: no autocast (settings) and TF32 off for cuBLAS and cuDNN while
    the steps run. A GPU cause: a CPU has no TF32 and its bf16 is emulated."""

    name = "fp32-matmul"
    settings: ClassVar[dict[str, Any]] = {"precision": "fp32"}
    gpu_only = True

    @contextlib.contextmanager
    def context(self, device: torch.device) -> Iterator[None]:
        before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        try:
            yield
        finally:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


class MathAttention(Plant):
    """The model's attention as QKᵀ, softmax and ·V (attention="math"): the scores materialised, no fused
    kernel."""

    name = "math-attention"
    settings: ClassVar[dict[str, Any]] = {"attention": "math"}


class PageableH2D(Plant):
    """The batch kept in pageable host memory and copied to the device every step with a blocking
    `.to(device)`: on a GPU a pageable host-to-device memcpy, which first waits for the stream. copy=True
    copies on the CPU too, so the bytes move on every device."""

    name = "pageable-h2d"

    def batches(self, x: torch.Tensor, y: torch.Tensor, device: torch.device) -> Callable[[], Batch]:
        host = x.cpu(), y.cpu()
        return lambda: (host[0].to(device, copy=True), host[1].to(device, copy=True))


class D2HCopy(Plant):
    """The logits copied to the host every step (as for a metric computed on the host): on a GPU a
    device-to-host memcpy that waits for the forward's kernels. copy=True copies on the CPU too."""

    name = "d2h-copy"

    def __init__(self) -> None:
        self.last: torch.Tensor | None = None

    def after_loss(self, logits: torch.Tensor, loss: torch.Tensor) -> None:
        self.last = logits.detach().to("cpu", copy=True)


class Recompile(Plant):
    """The loss compiled with torch.compile(dynamic=False) and taken over a window of the sequence that moves
    one position every step: a new shape each step, so Dynamo compiles it again each step, until its
    recompile limit (8 by default), after which that frame runs eagerly (a warning says so)."""

    name = "recompile"

    def __init__(self, backend: str = "inductor") -> None:
        self.backend = backend

    def loss(self, loss_fn: LossFn, params: list[torch.Tensor]) -> StepLoss:
        compiled = torch.compile(loss_fn, dynamic=False, backend=self.backend)

        def step_loss(logits: torch.Tensor, targets: torch.Tensor, step: int) -> torch.Tensor:
            start = step % max(1, logits.size(1) // 2)
            return compiled(logits[:, start:], targets[:, start:])

        return step_loss


PLANTS: dict[str, type[Plant]] = {
    cls.name: cls
    for cls in (
        Plant, HostSync, SlowLoader, LaunchBound, OptimizerLoop, Fp32Matmul, MathAttention, PageableH2D,
        D2HCopy, Recompile,
    )
}  # fmt: skip


def make(name: str | None) -> Plant:
    """A fresh plant of cause `name` (None: the clean step); ValueError naming the known ones."""
    try:
        return PLANTS[name or "clean"]()
    except KeyError:
        raise ValueError(f"unknown plant {name!r}; known plants: {', '.join(PLANTS)}") from None
