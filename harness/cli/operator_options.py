"""How an operator table (torch.profiler's key_averages()) is ordered and cut for `harness run --profiler
torch` (`OperatorView`, `operator_options`): the --sort and --top that `harness operators` declares
(analysis.tables.operators), the same options."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from analysis.tables import operators as ops
from harness.cli.option_group import F, option_group
from harness.cli.reading import typer_form

SortOpt, _ = typer_form(ops.SORT_OPTION)
TopOpt, _ = typer_form(ops.TOP_OPTION)


@dataclass(frozen=True)
class OperatorView:
    """The order of an operator table and how many rows it keeps (None: every row for `harness operators`;
    `run --profiler torch` keeps its top 15)."""

    sort: SortOpt = ops.SORT_OPTION.default
    top: TopOpt = ops.TOP_OPTION.default


AS_TORCH_SORTS = OperatorView()


def operator_options() -> Callable[[F], F]:
    """--sort and --top on a command, in place of its parameter `view: OperatorView`."""
    return option_group("view", OperatorView)


def check_sort(sort: str) -> str:
    """The column --sort names, among every column an operator table can have (a UsageError-like
    AnalysisError names the choices): checked before a run, not after it."""
    return ops.sort_column(sort, [ops.NAME, ops.SHAPES, *ops.CPU_COLUMNS, *ops.CUDA_COLUMNS, ops.CALLS])
