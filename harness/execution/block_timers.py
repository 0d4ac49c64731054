"""Synchronised per-block timers: the per-block breakdown of an --nvtx-detail run that has no profiler.

Forward pre/post hooks on the same submodules as the --nvtx-detail NVTX ranges (workloads.DETAIL_RANGES,
workloads.OUTER_RANGES and the layers) synchronise the device and read perf_counter_ns around each one; in
train mode, autograd's full backward pre/post hooks do the same around each block's backward (from the
gradient of its output arriving to the gradient of its input computed). The embeddings get no backward
timer: their input is token ids, so autograd has no input gradient to wait for and would report ~0.

Records are summed per (measured step, layer, block, phase): `calls` says how many times the block ran
(once per step in train and forward mode, once per generated token in decode). A profiled run is timed by
its profiler instead (the torch trace, or the nsys export): these timers would add a device synchronisation
around every block to what the profiler records.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import workloads
from harness.core.devices import synchronize
from harness.core.nvtx_ranges import range_name
from harness.core.records import BlockRecord, RunConfig
from workloads.names import BACKWARD, BLOCK_TIMERS, DECODE, FORWARD, LAYER, PREFILL

SOURCE = BLOCK_TIMERS
NO_BACKWARD = frozenset({"embedding"})


def wanted(config: RunConfig, in_process_profiler: bool) -> bool:
    """Whether a run times its blocks with these timers: --nvtx-detail, no profiler (in this process or
    nsys around it: nsys sets NSYS_PROFILING_SESSION_ID in what it launches) and no torch.compile (hooks
    break its graphs)."""
    under_nsys = "NSYS_PROFILING_SESSION_ID" in os.environ
    return config.nvtx_detail and not in_process_profiler and not under_nsys and not config.compile


class BlockTimers:
    """Hooks on `model`'s blocks; `next_step()` after every step; `remove()` detaches them."""

    def __init__(self, model: Any, device: Any, config: RunConfig) -> None:
        self.device = device
        self.mode = config.mode
        self.warmup = config.warmup
        self.step = 0
        self._sums: dict[tuple[int, int | None, str, str], list[int]] = {}
        self._open: dict[tuple[int, str], int] = {}
        self._model_calls = 0
        self._handles: list[Any] = []
        if self.mode == "generate":
            self._handles.append(model.register_forward_pre_hook(self._count_call))
        for qualname, module in model.named_modules():
            name = range_name(qualname, workloads.DETAIL_RANGES, workloads.OUTER_RANGES)
            if name is None:
                continue
            parts = qualname.split(".")
            layer = int(parts[1]) if parts[0] == "blocks" else None
            block = LAYER if name.startswith("layer_") else name
            key = (id(module), "fwd")
            self._handles.append(module.register_forward_pre_hook(self._start(key)))
            self._handles.append(module.register_forward_hook(self._stop(key, layer, block, None)))
            if self.mode == "train" and block not in NO_BACKWARD:
                key = (id(module), "bwd")
                self._handles.append(module.register_full_backward_pre_hook(self._start(key)))
                self._handles.append(
                    module.register_full_backward_hook(self._stop(key, layer, block, BACKWARD))
                )

    def _count_call(self, module: Any, args: Any) -> None:
        self._model_calls += 1

    def _phase(self) -> str:
        if self.mode == "generate":
            return PREFILL if self._model_calls <= 1 else DECODE
        return FORWARD

    def _start(self, key: tuple[int, str]) -> Callable[..., None]:
        def hook(*_: Any) -> None:
            synchronize(self.device)
            self._open[key] = time.perf_counter_ns()

        return hook

    def _stop(
        self, key: tuple[int, str], layer: int | None, block: str, phase: str | None
    ) -> Callable[..., None]:
        def hook(*_: Any) -> None:
            synchronize(self.device)
            t1 = time.perf_counter_ns()
            t0 = self._open.pop(key, None)
            if t0 is None or self.step < self.warmup:
                return
            acc = self._sums.setdefault((self.step, layer, block, phase or self._phase()), [0, 0])
            acc[0] += t1 - t0
            acc[1] += 1

        return hook

    def next_step(self) -> None:
        self.step += 1
        self._model_calls = 0
        self._open.clear()

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def records(self) -> list[BlockRecord]:
        """Every finished measured step's blocks (a step cut short by Ctrl-C or OOM is left out)."""
        return [
            BlockRecord(step=step, layer=layer, block=block, phase=phase, duration_ns=ns, calls=calls)
            for (step, layer, block, phase), (ns, calls) in self._sums.items()
            if step < self.step
        ]
