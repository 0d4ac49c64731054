"""What one mode does in a step (Body), apart from the runner so that each mode's module can build one."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.core.records import RunConfig
    from harness.execution.timing import PhaseClock

BodyFactory = Callable[["RunConfig", Any, Any, Any], "Body"]  # (config, spec, model, device) -> Body


@dataclass
class Body:
    """What one mode does in a step. `prepare` runs before the step's NVTX range opens (untimed) and its
    value is handed to `step`, which times its phases on the clock. `context` is held around the loop.
    `figures`: what the mode knows of itself beside the timings (generate: its decode path, its KV cache's
    bytes), put into the run's result after the loop."""

    step: Callable[[int, PhaseClock, Any], None]
    prepare: Callable[[], Any] = lambda: None
    context: contextlib.AbstractContextManager[Any] = field(default_factory=contextlib.nullcontext)
    figures: dict[str, Any] = field(default_factory=dict)


def autocast(device: Any, precision: str) -> contextlib.AbstractContextManager[Any]:
    import torch

    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)
