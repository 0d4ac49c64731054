"""Grids of configurations for `harness sweep`; each point runs in a fresh process
(harness.execution.worker)."""

from __future__ import annotations

import itertools
from dataclasses import replace

from harness.core.records import RunConfig
from harness.execution.runner import validate


def grid(
    base: RunConfig,
    models: list[str],
    precisions: list[str],
    compiles: list[bool],
    batch_sizes: list[int] | None = None,
    context_lengths: list[int] | None = None,
) -> list[RunConfig]:
    """The cross product, models outermost, then precisions, compile settings, batch sizes and context
    lengths innermost (the base's batch size and context length when none are given); every point is
    validated before anything runs."""
    axes = itertools.product(
        models,
        precisions,
        compiles,
        batch_sizes or [base.batch_size],
        context_lengths or [base.context_length],
    )
    configs = [
        replace(base, model=m, precision=p, compile=c, batch_size=b, context_length=t)
        for m, p, c, b, t in axes
    ]
    for config in configs:
        validate(config)
    return configs
