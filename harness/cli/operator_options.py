"""How an operator table (torch.profiler's key_averages()) is ordered and cut, declared once (`OperatorView`,
`operator_options`) for `harness operators TRACE` and `harness run --profiler torch`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated

import typer

from harness.cli.option_group import F, option_group

SortOpt = Annotated[
    str,
    typer.Option(
        "--sort",
        metavar="<column>",
        help="Sort the operators by this column (descending), e.g. 'Self CUDA', 'CPU Total', Calls, or a "
        "torch sort_by key (self_cpu_time_total, cuda_time_total, count).",
    ),
]

TopOpt = Annotated[
    int | None,
    typer.Option(
        "--top",
        min=1,
        metavar="<n>",
        help="Keep the first N operators (default: every one; run --profiler torch: 15).",
    ),
]


@dataclass(frozen=True)
class OperatorView:
    """The order of an operator table and how many rows it keeps (None: every row for `harness operators`;
    `run --profiler torch` keeps its top 15)."""

    sort: SortOpt = "Self CPU"
    top: TopOpt = None


AS_TORCH_SORTS = OperatorView()


def operator_options() -> Callable[[F], F]:
    """--sort and --top on a command, in place of its parameter `view: OperatorView`."""
    return option_group("view", OperatorView)


def check_sort(sort: str) -> str:
    """The column --sort names, among every column an operator table can have (a UsageError-like
    AnalysisError names the choices): checked before a run, not after it."""
    from analysis.tables import operators as ops  # here: it loads pandas, which a cached table never needs

    return ops.sort_column(sort, [ops.NAME, ops.SHAPES, *ops.CPU_COLUMNS, *ops.CUDA_COLUMNS, ops.CALLS])
