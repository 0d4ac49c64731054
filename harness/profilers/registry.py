"""The profilers `harness run` knows, by name: adding one is a module with a `Profiler`
(harness.profilers.base)
and one line here."""

from __future__ import annotations

from harness.core.errors import UsageError
from harness.profilers import none, nsys, torch
from harness.profilers.base import Profiler

PROFILERS: dict[str, Profiler] = {p.name: p for p in (none.PROFILER, nsys.PROFILER, torch.PROFILER)}


def get(name: str | None) -> Profiler:
    """The profiler called `name` (None: the run without one)."""
    try:
        return PROFILERS[name or "none"]
    except KeyError:
        raise UsageError(f"unknown profiler {name!r}; known: {', '.join(PROFILERS)}") from None
