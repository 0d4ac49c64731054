"""A phase's GPU-busy share from a capture: the union of the GPU's work (kernels, copies, sets) inside the
measured steps' ranges of that phase, over the time of those ranges.

The in-process timers see the phase's wall time only; how much of it the GPU was working is in a capture
that traced the GPU. Generate's decode is where it matters: a decode the host cannot launch fast enough
leaves the GPU idle between small kernels (what CUDA-graph replay removes). The phase ranges close after
their closing synchronise, so all of a phase's GPU work lies inside them.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

import numpy as np

from analysis.hta.gpu_events import gpu_events, merge
from analysis.tables import nvtx as nvtx_table
from workloads.names import DECODE

if TYPE_CHECKING:
    from analysis.trace.trace import Trace
    from harness.core.records import RunResult


def busy_share(trace: Trace, phase: str, steps: Collection[int] | None = None) -> float | None:
    """The GPU-busy share of the `phase` ranges whose payload (the step) is in `steps` (None: all); None
    when the capture holds no GPU work or no such range."""
    if not any(trace.has(f) for f in ("kernels", "memcpy", "memset")) or not trace.has("nvtx"):
        return None
    ranges = nvtx_table.nvtx_ranges(trace, names=[phase])
    if steps is not None and ranges["payload"].notna().all():
        ranges = ranges[ranges["payload"].astype("int64").isin(list(steps))]
    if ranges.empty:
        return None
    events = gpu_events(trace)
    events = events[events["kind"] != "sync"]
    us, ue = merge(events["start"].to_numpy(), events["end"].to_numpy())
    busy = wall = 0
    for start, end in zip(ranges["start_ns"].to_numpy(), ranges["end_ns"].to_numpy(), strict=True):
        busy += int((np.clip(ue, start, end) - np.clip(us, start, end)).sum())
        wall += int(end - start)
    return busy / wall if wall else None


def record_decode_busy(result: RunResult, trace: Trace) -> None:
    """A generate run's serving figures get decode's GPU-busy share over its measured steps (None where the
    capture cannot tell: no GPU work traced)."""
    serving = result.extra.get("serving")
    if serving is None:
        return
    measured = {s.step for s in result.steps if not s.warmup}
    serving["decode_gpu_busy"] = busy_share(trace, DECODE, measured)
