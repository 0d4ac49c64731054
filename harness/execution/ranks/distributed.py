"""Inside one rank of a run across ranks (`harness run --nproc N`, started by torchrun): the process group
and the DistributedDataParallel train step.

The gradient all-reduce is timed as a phase of its own: forward and backward run under DDP's `no_sync()`
(so DDP's reducer does not overlap communication with backward), then the gradients are flattened into
buckets of BUCKET_BYTES, all-reduced, averaged and copied back, inside the `allreduce` phase (same
PhaseClock and NVTX range as forward, backward and optimizer). gloo on CPU, NCCL on CUDA.

Each rank also writes a heartbeat line as each phase starts (`beat_path`), which the launching harness
reads to find a hung rank (harness/execution/ranks/multirank.py).
HARNESS_TEST_RANK_FAULT="RANK:STEP:kill|exit|raise|hang"
makes that rank die of SIGKILL, exit 3, raise RuntimeError (as a collective call does when a peer is gone)
or hang at the start of that step: a real failure, for the tests.
`--delay-rank R:MS` (config.delay_rank, delay_ms) makes rank R sleep MS ms at the start of every forward,
inside its timed forward phase: it reaches the all-reduce MS ms late, a straggler of known cost.
"""

from __future__ import annotations

import functools
import os
import signal
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, TextIO

from harness.core.devices import resolve_device
from harness.core.errors import UsageError
from harness.core.records import RunConfig
from harness.execution import runner
from harness.execution.runner import Body, BodyFactory
from workloads.names import FORWARD

BUCKET_BYTES = 25 * 2**20  # DDP's default bucket size
FAULT_ENV = "HARNESS_TEST_RANK_FAULT"


def rank_from_env() -> int | None:
    """This process's global rank when torchrun started it, else None."""
    return int(os.environ["RANK"]) if "RANK" in os.environ and "WORLD_SIZE" in os.environ else None


def rank_path(result_path: Path, rank: int) -> Path:
    """Where rank `rank` writes its RunResult (its steps log and heartbeat go beside it)."""
    return result_path.with_name(f"{result_path.stem}.rank{rank}{result_path.suffix}")


def beat_path(result_path: Path) -> Path:
    return result_path.with_name(result_path.name + ".beat")


def init(config: RunConfig) -> None:
    """Join the process group torchrun set up (env://): NCCL on CUDA, gloo elsewhere."""
    import torch
    import torch.distributed as dist

    device = resolve_device(config.device)
    if device.type == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, timeout=timedelta(seconds=max(config.rank_timeout, 30.0)))


def join(config: RunConfig, result_path: Path) -> BodyFactory:
    """Join the process group and open the heartbeat: the train step for runner.run_workload."""
    if config.mode != "train":
        raise UsageError(f"runs across ranks time train mode only, not {config.mode}")
    init(config)
    beat = Heartbeat(beat_path(result_path))
    return functools.partial(train_body, beat=beat)


def finish() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


class Heartbeat:
    """One line per phase start ("step phase"), flushed, so its mtime says when the rank last moved. The
    file appears with the first phase: until then the rank is starting up
    (harness.execution.ranks.multirank.STARTUP_S)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.file: TextIO | None = None

    def __call__(self, step: int, phase: str) -> None:
        if self.file is None:
            self.file = self.path.open("w")
        self.file.write(f"{step} {phase}\n")
        self.file.flush()


def _fault(step: int) -> None:
    """The failure HARNESS_TEST_RANK_FAULT asks of this rank at this step, if any."""
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return
    rank, at, how = spec.split(":")
    if int(rank) != int(os.environ.get("RANK", "-1")) or int(at) != step:
        return
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if how == "exit":
        os._exit(3)
    if how == "raise":
        raise RuntimeError(f"injected fault at step {step}")
    while how == "hang":
        time.sleep(1)


def _buckets(grads: list[Any], limit: int = BUCKET_BYTES) -> Iterator[list[Any]]:
    """Gradients in consecutive groups of at most `limit` bytes (one larger tensor makes a group alone),
    same dtype and device within a group."""
    group: list[Any] = []
    size = 0
    for g in grads:
        nbytes = g.numel() * g.element_size()
        if group and (size + nbytes > limit or g.dtype != group[0].dtype or g.device != group[0].device):
            yield group
            group, size = [], 0
        group.append(g)
        size += nbytes
    if group:
        yield group


def allreduce_gradients(params: list[Any], world_size: int) -> None:
    """Average the gradients over the ranks: flatten each bucket, all-reduce (sum), divide, copy back."""
    import torch.distributed as dist
    from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

    grads = [p.grad for p in params if p.grad is not None]
    for group in _buckets(grads):
        flat = _flatten_dense_tensors(group)
        dist.all_reduce(flat)
        flat.div_(world_size)
        for g, synced in zip(group, _unflatten_dense_tensors(flat, group), strict=True):
            g.copy_(synced)


def train_body(config: RunConfig, spec: Any, model: Any, device: Any, beat: Heartbeat | None = None) -> Body:
    """runner's train step across ranks: DDP, a batch per rank (seed + rank), the all-reduce a phase."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    rank, world = dist.get_rank(), dist.get_world_size()
    ids = [torch.cuda.current_device()] if device.type == "cuda" else None
    if config.delay_rank == rank and config.delay_ms > 0:
        seconds = config.delay_ms / 1000
        model.register_forward_pre_hook(lambda *_: time.sleep(seconds))

    def mark(i: int, phase: str) -> None:
        if beat is not None:
            beat(i, phase)
        if phase == FORWARD:
            _fault(i)

    return runner.train_body(
        config,
        spec,
        model,
        device,
        rank=rank,
        wrap=lambda m: DistributedDataParallel(m, device_ids=ids),
        allreduce=lambda params: allreduce_gradients(params, world),
        mark=mark,
    )
