"""Planted bottlenecks: small, honest changes to a training step, each with one known cause (the catalogue,
workloads/plants/catalogue.py, says what each is, as data).

A Plant is asked at each point where a user's train step could differ from the clean one; the clean Plant
answers with the step as it is. The harness's runner (and `python -m workloads.plants`, the same step as a
program of its own) builds the step through these hooks:

- `optimizer(params)`: the optimizer, AdamW as the knob `optimizer` asks (optimizer-loop sets it to loop:
  AdamW(foreach=False));
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
- `settings`: what the cause needs of the run (batch size 1, math attention, fp32), from the catalogue.

Each plant is made with the run's `Knobs` (catalogue.Knobs): the fixes a user would make to such a step
(the loader given workers, the copies pinned, the loss read every N steps, the loss compiled for dynamic
shapes). A knob changes the planted code; it never takes the plant out.

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

from workloads.plants.catalogue import CAUSES, CONTROL, KNOBS, Knobs, gpu_only

Batch = tuple[torch.Tensor, torch.Tensor]
LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
StepLoss = Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]

SAMPLE_WAIT_S = 0.025  # slow-loader: each sample's wait for storage (100 ms a batch of 4)
PREFETCH = 4  # slow-loader with workers: batches each worker keeps ready
PENALTY = 1e-6  # launch-bound: the L2 penalty's weight
LR = 3e-4


class Plant:
    """The clean step: the hooks as the harness's train step has them without a plant."""

    name: ClassVar[str] = CONTROL

    def __init__(self, knobs: Knobs | None = None) -> None:
        self.knobs = knobs or Knobs()

    @property
    def settings(self) -> dict[str, Any]:
        return dict(CAUSES[self.name].settings)

    @property
    def gpu_only(self) -> bool:
        return gpu_only(self.name)

    def optimizer(self, params: list[torch.Tensor]) -> torch.optim.Optimizer:
        """AdamW as the knob asks: torch's choice, its loop over the parameters, foreach, or fused."""
        choice = self.knobs.optimizer
        how = {"loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}
        return torch.optim.AdamW(params, lr=LR, **how.get(choice, {}))

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
    4 bytes and a wait for every kernel queued before it, inside forward. With the knob `loss_every` N the
    losses are summed on the device and read every N steps (the fix: one wait in N)."""

    name = "host-sync"

    def __init__(self, knobs: Knobs | None = None) -> None:
        super().__init__(knobs)
        self.losses: list[float] = []
        self.pending: torch.Tensor | None = None
        self.seen = 0

    def after_loss(self, logits: torch.Tensor, loss: torch.Tensor) -> None:
        every = max(1, self.knobs.loss_every)
        if every == 1:
            self.losses.append(loss.item())
            return
        part = loss.detach()
        self.pending = part if self.pending is None else self.pending + part
        self.seen += 1
        if self.seen % every == 0:
            self.losses.append(self.pending.item() / every)
            self.pending = None


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
    non_blocking, so the loader is the one cause. With the knob `loader_workers` N the same loader reads in
    N worker processes, each keeping PREFETCH batches ready (the fix: the waits overlap the steps)."""

    name = "slow-loader"

    def __init__(self, knobs: Knobs | None = None, wait_s: float = SAMPLE_WAIT_S) -> None:
        super().__init__(knobs)
        self.wait_s = wait_s

    def batches(self, x: torch.Tensor, y: torch.Tensor, device: torch.device) -> Callable[[], Batch]:
        pin = device.type == "cuda"
        workers = max(0, self.knobs.loader_workers)
        more: dict[str, Any] = {"persistent_workers": True, "prefetch_factor": PREFETCH} if workers else {}
        loader = DataLoader(
            _Stored(x, y, self.wait_s), batch_size=x.size(0), num_workers=workers, pin_memory=pin, **more
        )
        it: Iterator[Batch] = iter(loader)

        def next_batch() -> Batch:
            xb, yb = next(it)
            return xb.to(device, non_blocking=pin), yb.to(device, non_blocking=pin)

        return next_batch


class LaunchBound(Plant):
    """Batch 1, and an L2 penalty added to the loss parameter by parameter in Python: three tiny ops per
    parameter in forward and as many in backward, each its own kernel on a GPU."""

    name = "launch-bound"

    def loss(self, loss_fn: LossFn, params: list[torch.Tensor]) -> StepLoss:
        def step_loss(logits: torch.Tensor, targets: torch.Tensor, step: int) -> torch.Tensor:
            loss = loss_fn(logits, targets)
            for p in params:
                loss = loss + PENALTY * p.pow(2).sum()
            return loss

        return step_loss


class OptimizerLoop(Plant):
    """AdamW with foreach=False: its per-parameter loop, a dozen small ops for each parameter (its setting,
    the knob `optimizer` at loop; the fix asks for fused or foreach). (torch picks that loop itself for CPU
    tensors: on the CPU the clean step has it too.)"""

    name = "optimizer-loop"


class Fp32Matmul(Plant):
    """fp32 matmuls where bf16 or TF32 serve: no autocast (settings) and TF32 off for cuBLAS and cuDNN while
    the steps run. A GPU cause: a CPU has no TF32 and its bf16 is emulated."""

    name = "fp32-matmul"

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


class PageableH2D(Plant):
    """The batch kept in pageable host memory and copied to the device every step with a blocking
    `.to(device)`: on a GPU a pageable host-to-device memcpy, which first waits for the stream. copy=True
    copies on the CPU too, so the bytes move on every device. With the knob `pin_memory` (a GPU's) the host
    batch is pinned and the copies non_blocking: the copy is still made every step."""

    name = "pageable-h2d"

    def batches(self, x: torch.Tensor, y: torch.Tensor, device: torch.device) -> Callable[[], Batch]:
        pin = self.knobs.pin_memory and device.type == "cuda"
        host = (x.cpu().pin_memory(), y.cpu().pin_memory()) if pin else (x.cpu(), y.cpu())
        return lambda: (
            host[0].to(device, copy=True, non_blocking=pin),
            host[1].to(device, copy=True, non_blocking=pin),
        )


class D2HCopy(Plant):
    """The logits copied to the host every step (as for a metric computed on the host): on a GPU a
    device-to-host memcpy that waits for the forward's kernels. copy=True copies on the CPU too. With the
    knob `pin_memory` (a GPU's) the copy goes non_blocking into a pinned buffer kept from step to step: still
    a copy every step, no longer a wait."""

    name = "d2h-copy"

    def __init__(self, knobs: Knobs | None = None) -> None:
        super().__init__(knobs)
        self.last: torch.Tensor | None = None

    def after_loss(self, logits: torch.Tensor, loss: torch.Tensor) -> None:
        src = logits.detach()
        if self.knobs.pin_memory and src.is_cuda:
            if self.last is None or self.last.shape != src.shape or self.last.dtype != src.dtype:
                self.last = torch.empty(src.shape, dtype=src.dtype, pin_memory=True)
            self.last.copy_(src, non_blocking=True)
            return
        self.last = src.to("cpu", copy=True)


class Recompile(Plant):
    """The loss compiled with torch.compile(dynamic=False) and taken over a window of the sequence that moves
    one position every step: a new shape each step, so Dynamo compiles it again each step, until its
    recompile limit (8 by default), after which that frame runs eagerly (a warning says so). With the knob
    `dynamic_shapes` the loss is compiled with dynamic=True: one graph for every window."""

    name = "recompile"

    def __init__(self, knobs: Knobs | None = None, backend: str = "inductor") -> None:
        super().__init__(knobs)
        self.backend = backend

    def loss(self, loss_fn: LossFn, params: list[torch.Tensor]) -> StepLoss:
        compiled = torch.compile(loss_fn, dynamic=bool(self.knobs.dynamic_shapes), backend=self.backend)

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


def make(name: str | None, knobs: Knobs | None = None) -> Plant:
    """A fresh plant of cause `name` (None: the clean step) with `knobs` (None: the knobs the cause sets,
    the others at their defaults); ValueError naming the known ones."""
    try:
        cls = PLANTS[name or CONTROL]
    except KeyError:
        raise ValueError(f"unknown plant {name!r}; known plants: {', '.join(PLANTS)}") from None
    if knobs is None:
        knobs = Knobs(**{k: v for k, v in CAUSES[cls.name].settings.items() if k in KNOBS})
    return cls(knobs)
