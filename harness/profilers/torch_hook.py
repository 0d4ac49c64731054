"""The part of `--profiler torch` that runs inside the worker: torch.profiler around the measured steps.

The profiler's schedule skips the warmup steps (the last one warms the profiler up) and records the
measured ones; every NVTX range the harness opens (step, the phases, --nvtx-detail's layers) is also a
`record_function` range of the same name. harness.profilers.torch runs the worker with this module as its
entry (`python -m harness.profilers.torch_hook CONFIG RESULT`: harness.execution.worker's `main` with this
hook) and reads the trace; the worker itself knows no profiler.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

from harness.core import nvtx_ranges
from harness.core.records import RunConfig
from harness.execution import worker

NAME = "torch"
TRACE_SUFFIX = ".pt.trace.json.gz"


class TorchHook:
    """torch.profiler over the step loop of harness.execution.runner (the runner's StepHook)."""

    def __init__(
        self,
        config: RunConfig,
        trace: str,
        record_shapes: bool = False,
        with_stack: bool = False,
        profile_memory: bool = False,
        **_: Any,
    ) -> None:
        self.config = config
        self.trace = trace
        self.options = {"record_shapes": record_shapes, "with_stack": with_stack,
                        "profile_memory": profile_memory}  # fmt: skip
        self.prof: Any = None
        self.written = False

    def _ready(self, prof: Any) -> None:
        prof.export_chrome_trace(self.trace)
        self.written = True

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        import torch
        from torch.autograd.profiler import record_function
        from torch.profiler import ProfilerActivity, profile, schedule

        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        warm = self.config.warmup
        plan = schedule(skip_first=max(warm - 1, 0), wait=0, warmup=min(warm, 1), active=self.config.steps,
                        repeat=1)  # fmt: skip

        def enter(name: str) -> Any:
            rf = record_function(name)
            rf.__enter__()
            return rf

        def leave(rf: Any) -> None:
            rf.__exit__(None, None, None)

        nvtx_ranges.set_mirror((enter, leave))
        try:
            with profile(activities=activities, schedule=plan, on_trace_ready=self._ready,
                         **self.options) as prof:  # fmt: skip
                self.prof = prof
                yield
        finally:
            self.prof = None
            nvtx_ranges.set_mirror(None)

    def step(self) -> None:
        if self.prof is not None:
            self.prof.step()


def hook_for(config: RunConfig, spec: dict[str, Any] | None) -> TorchHook | None:
    """The worker's hook for the profiler spec in its config file (None: no in-process profiler)."""
    if not spec or spec.get("name") != NAME:
        return None
    return TorchHook(config, **spec)


if __name__ == "__main__":
    sys.exit(worker.main(sys.argv[1:], make_hook=hook_for))
