"""The profilers `harness run` knows: adding one is a module with a `PROFILER` (a
harness.profilers.base.Profiler named as its module) and one line here. The CLI's --profiler choices, each
profiler's checks, defaults and renderer come from here; nothing else names a profiler."""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.core.errors import UsageError

if TYPE_CHECKING:
    from harness.profilers.base import Profiler

from harness.profilers import none, nsys, torch

MODULES = (none, nsys, torch)  # the run without a profiler first
NAMES = tuple(m.__name__.rpartition(".")[2] for m in MODULES)  # a profiler's name is its module's


def get(name: str | None) -> Profiler:
    """The profiler called `name` (None: the run without one)."""
    try:
        module = MODULES[NAMES.index(name or "none")]
    except ValueError:
        raise UsageError(f"unknown profiler {name!r}; known: {', '.join(NAMES)}") from None
    profiler: Profiler = module.PROFILER
    return profiler
