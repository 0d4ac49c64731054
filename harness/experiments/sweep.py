"""Grids of configurations for `harness sweep`; each point runs in a fresh process
(harness.execution.worker)."""

from __future__ import annotations

import itertools
from dataclasses import replace

from harness.core.records import RunConfig, RunResult


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


def shared_settings(results: list[RunResult], contexts: list[object]) -> str | None:
    """The settings every run of a sweep shares, as one line (`all runs: train, fp32, batch 1, context 16,
    eager`): its table leaves out the columns that do not vary, so this says what the runs were.
    `contexts`: each run's context length as its table shows it (the model's own where none was given)."""
    import pandas as pd

    if not results:
        return None
    configs = [r.config for r in results]

    def alike(values: list[object]) -> object | None:
        return values[0] if len(set(values)) == 1 and values[0] is not None else None

    mode = alike([c.mode for c in configs])
    precision = alike([c.precision for c in configs])
    batch = alike([c.batch_size for c in configs])
    context = alike([None if pd.isna(c) else c for c in contexts])  # NA: a run without a model
    compiled = {c.compile for c in configs}
    said = [
        *([str(mode)] if mode is not None else []),
        *([str(precision)] if precision is not None else []),
        *([f"batch {batch}"] if batch is not None else []),
        *([f"context {context}"] if context is not None else []),
        *(["compiled" if compiled.pop() else "eager"] if len(compiled) == 1 else []),
    ]
    if mode == "generate" and (tokens := alike([c.new_tokens for c in configs])) is not None:
        said.append(f"new tokens {tokens}")
    return f"all runs: {', '.join(said)}" if said else None
