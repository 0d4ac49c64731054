"""The options of runs across ranks (`--nproc` …), shared by `run`, `sweep` and `overhead`."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated

import typer

from harness.core.records import RunConfig
from harness.execution.ranks.multirank import check

PANEL = "Across ranks (torchrun)"
NprocOpt = Annotated[
    int,
    typer.Option(
        "--nproc", help="Ranks on this machine (torchrun --nproc-per-node): DDP, gloo on CPU, NCCL on CUDA.",
        rich_help_panel=PANEL,
    ),
]  # fmt: skip
NnodesOpt = Annotated[int, typer.Option("--nnodes", help="Machines taking part.", rich_help_panel=PANEL)]
NodeRankOpt = Annotated[
    int, typer.Option("--node-rank", help="This machine's place, 0 … nnodes-1.", rich_help_panel=PANEL)
]
RdzvOpt = Annotated[
    str | None,
    typer.Option(
        "--rdzv-endpoint", metavar="HOST:PORT", help="Node 0's address, with --nnodes > 1.",
        rich_help_panel=PANEL,
    ),
]  # fmt: skip
RankTimeoutOpt = Annotated[
    float,
    typer.Option(
        "--rank-timeout", metavar="SECONDS", rich_help_panel=PANEL,
        help="Stop the run when a rank starts no phase for this long (a hung rank).",
    ),
]  # fmt: skip


def with_ranks(
    config: RunConfig, nproc: int, nnodes: int, node_rank: int, rdzv_endpoint: str | None, rank_timeout: float
) -> RunConfig:
    """`config` with its rank layout, checked (UsageError for one torchrun would refuse)."""

    config = replace(
        config,
        nproc=nproc,
        nnodes=nnodes,
        node_rank=node_rank,
        rdzv_endpoint=rdzv_endpoint,
        rank_timeout=rank_timeout,
    )
    check(config)
    return config
