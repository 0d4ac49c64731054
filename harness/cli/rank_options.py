"""The options of runs across ranks (`--nproc` …), declared once (`Ranks`, `rank_options`) for `run`,
`sweep` and `overhead`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Annotated

import typer

from harness.cli.option_group import F, option_group
from harness.core.errors import UsageError
from harness.core.records import RunConfig

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

DelayRankOpt = Annotated[
    str | None,
    typer.Option(
        "--delay-rank", metavar="R:MS", rich_help_panel=PANEL,
        help="Rank R sleeps MS ms inside every forward: a straggler of known cost, for tests and demos.",
    ),
]  # fmt: skip


@dataclass(frozen=True)
class Ranks:
    """Where a run's ranks go: how many on this machine, on how many machines, this machine's place,
    node 0's address, and how long a rank may start no phase before the run is stopped."""

    nproc: NprocOpt = 1
    nnodes: NnodesOpt = 1
    node_rank: NodeRankOpt = 0
    rdzv_endpoint: RdzvOpt = None
    rank_timeout: RankTimeoutOpt = 300.0
    delay_rank: DelayRankOpt = None  # R:MS


ONE_RANK = Ranks()


def rank_options() -> Callable[[F], F]:
    """The rank options on a command, in place of its parameter `ranks: Ranks`."""
    return option_group("ranks", Ranks)


def asked_ranks(ranks: Ranks) -> dict[str, object]:
    """The rank options the user gave (a value other than its default), by configuration field."""
    return {k: v for k, v in asdict(ranks).items() if v != getattr(ONE_RANK, k)}


def delay(text: str | None, world_size: int) -> tuple[int | None, int]:
    """`--delay-rank R:MS` as (rank, ms); (None, 0) without it. UsageError for a malformed one, a rank
    outside the run, or a run of one rank."""
    if text is None:
        return None, 0
    rank, sep, ms = text.partition(":")
    if not sep or not rank.strip().isdigit() or not ms.strip().isdigit():
        raise UsageError(f"--delay-rank takes RANK:MS (e.g. 1:200), got {text!r}")
    if world_size < 2:
        raise UsageError("--delay-rank delays one rank of several: give --nproc 2 or more")
    if int(rank) >= world_size:
        raise UsageError(f"--delay-rank {text}: rank {int(rank)} is not one of the {world_size} ranks")
    return int(rank), int(ms)


def with_ranks(config: RunConfig, ranks: Ranks) -> RunConfig:
    """`config` with its rank layout (harness.execution.checks refuses one torchrun would refuse)."""
    delay_rank, delay_ms = delay(ranks.delay_rank, ranks.nproc * ranks.nnodes)
    return replace(
        config,
        nproc=ranks.nproc,
        nnodes=ranks.nnodes,
        node_rank=ranks.node_rank,
        rdzv_endpoint=ranks.rdzv_endpoint,
        rank_timeout=ranks.rank_timeout,
        delay_rank=delay_rank,
        delay_ms=delay_ms,
    )
