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
) -> list[RunConfig]:
    """The cross product, models outermost, batch sizes innermost (the base's batch size when none are
    given); every point is validated before anything runs."""
    configs = [
        replace(base, model=m, precision=p, compile=c, batch_size=b)
        for m, p, c, b in itertools.product(models, precisions, compiles, batch_sizes or [base.batch_size])
    ]
    for config in configs:
        validate(config)
    return configs
