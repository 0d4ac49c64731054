"""In-process phase timers: synchronise, read perf_counter_ns, and mark the same span with NVTX; and the
per-token clock of generate's decode phase (TokenClock)."""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Iterator
from typing import Any

from harness.core import nvtx_ranges
from harness.core.devices import synchronize
from workloads.names import TOKEN


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
        self.tokens: list[int] = []  # generate: each decoded token's ns (TokenClock.durations)

    def reset(self) -> None:
        self.durations = {}
        self.starts = {}
        self.tokens = []

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


class TokenClock:
    """Times each decoded token of one decode phase, inside it, without making the host wait per token.

    Every token runs inside an NVTX range `token` (payload: its index, 1 … new_tokens - 1; token 0 is
    prefill's), so a capture credits each token its kernels. The time of a token is the span between the
    boundary before it and the boundary after it, taken where it does not change what decode does:

    - CUDA: an event recorded on the stream at each boundary (`torch.cuda.Event(enable_timing=True)`). The
      host records and goes on launching, as an untimed decode does; the GPU stamps each boundary when it
      gets there. A token's time is therefore its span on the GPU's timeline, idle gaps included (a token
      whose launches the host could not issue fast enough shows the wait). The events are read once, after
      the decode phase's closing synchronise (`durations`). A synchronise per token would instead drain
      the queue at every token and time launch latency that the real decode hides.
    - CPU: every op has finished when the next Python line runs, so the host clock at each boundary is the
      token's end; nothing is added but the clock reads.
    - MPS (no timing events used here): the device is synchronised at each boundary, which does change
      decode there (the queue drains at every token): its TPOT and decode phase are a synchronised
      decode's.

    The tokens' times add up to the decode phase less the NVTX calls and the phase's closing synchronise.
    """

    def __init__(self, device: Any, tokens: int) -> None:
        import torch

        self.device = device
        self.events = (
            [torch.cuda.Event(enable_timing=True) for _ in range(tokens + 1)] if device.type == "cuda" else []
        )
        self.stamps: list[int] = []
        self.index = 0

    def start(self) -> None:
        """The boundary before the first token."""
        self.index = 0
        self.stamps = []
        self._mark()

    def _mark(self) -> None:
        if self.events:
            self.events[self.index].record()
        else:
            synchronize(self.device)
            self.stamps.append(time.perf_counter_ns())
        self.index += 1

    @contextlib.contextmanager
    def token(self, index: int) -> Iterator[None]:
        """One decoded token, `index` its position in the output (1-based after prefill's token 0)."""
        nvtx_ranges.push(TOKEN, index)
        try:
            yield
            self._mark()
        finally:
            nvtx_ranges.pop()

    def durations(self) -> list[int]:
        """Each token's time in ns; on CUDA the events are read (call after the device is synchronised)."""
        if self.events:
            marks = self.events[: self.index]
            return [round(a.elapsed_time(b) * 1e6) for a, b in itertools.pairwise(marks)]
        return [b - a for a, b in itertools.pairwise(self.stamps)]
