"""Grids of configurations for `harness sweep`; each point runs in a fresh process
(harness.execution.worker)."""

from __future__ import annotations

import itertools
from dataclasses import replace

from harness.core.records import RunConfig


def grid(
    base: RunConfig,
    models: list[str],
    precisions: list[str],
    compiles: list[bool],
    batch_sizes: list[int] | None = None,
    context_lengths: list[int] | None = None,
) -> list[RunConfig]:
    """The cross product, models outermost, then precisions, compile settings, batch sizes and context
    lengths innermost (the base's batch size and context length when none are given), each value once
    (`tiny,tiny` or `off,false` is one point, not the same run twice); the command checks every point
    (harness.execution.checks) before anything runs."""
    axes = itertools.product(
        *(
            dict.fromkeys(axis)
            for axis in (
                models,
                precisions,
                compiles,
                batch_sizes or [base.batch_size],
                context_lengths or [base.context_length],
            )
        )
    )
    return [
        replace(base, model=m, precision=p, compile=c, batch_size=b, context_length=t)
        for m, p, c, b, t in axes
    ]
