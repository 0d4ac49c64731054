"""In-process phase timers: synchronise, read perf_counter_ns, and mark the same span with NVTX."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from harness.core import nvtx_ranges
from harness.core.devices import synchronize


class PhaseClock:
    """Times the phases of one step.

    The device is synchronised before the phase starts (so earlier work is not charged to it) and before
    the clock is read at its end (so its asynchronous GPU work is). The NVTX range spans exactly the timed
    interval, which is what makes the NVTX-vs-timer agreement check meaningful.
    """

    def __init__(self, device: Any) -> None:
        self.device = device
        self.durations: dict[str, int] = {}
        self.starts: dict[str, int] = {}  # perf_counter_ns at each phase's start: power samples use it too

    def reset(self) -> None:
        self.durations = {}
        self.starts = {}

    @contextlib.contextmanager
    def phase(self, name: str, step: int) -> Iterator[None]:
        synchronize(self.device)
        nvtx_ranges.push(name, step)
        t0 = time.perf_counter_ns()
        try:
            yield
            synchronize(self.device)
        finally:
            t1 = time.perf_counter_ns()
            nvtx_ranges.pop()
        self.starts[name] = t0
        self.durations[name] = t1 - t0
