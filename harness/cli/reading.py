"""What every command that reads exports shares: the exports it names and how it prints their tables,
declared once (`Reading`, `reading_options`); options declared as plain data (a table's:
analysis.tables.table.Option) as Typer options (`typer_form`, `spec_group`, for option_group);
`render`, the tables it gives back printed as the options say."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, make_dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from analysis.tables import operators as ops
from harness.cli.common import FormatOpt, LimitOpt, WideOpt, warn
from harness.cli.option_group import F, option_group
from harness.cli.terminal.output import Format, emit, emit_many

if TYPE_CHECKING:
    from analysis.tables.table import Option, Tables

REPORT_HELP = (
    "REPORT: an nsys export (.sqlite), a report (.nsys-rep, .qdrep; exported first) or a PyTorch "
    "profiler (Kineto) trace (.json, .json.gz). Several, a glob pattern or a folder: one table over all "
    "of them (ranks from rank<R> in the file names), read in parallel."
)
# hidden: Typer would print the argument's type as <list[Path]>; REPORT_HELP (the epilog) describes it
ReportArg = Annotated[list[Path], typer.Argument(show_default=False, metavar="REPORT", hidden=True)]
ByRankOpt = Annotated[
    bool,
    typer.Option(
        "--by-rank",
        help="Several exports: one block of rows per rank (or file). One export of several ranks (one "
        "nsys around torchrun): split by process, each process that launched kernels a rank.",
    ),
]
JobsOpt = Annotated[
    int | None,
    typer.Option("--jobs", "-j", min=1, metavar="<n>", help="Several exports: at most N local processes."),
]
DaskOpt = Annotated[
    str | None,
    typer.Option(
        "--dask",
        metavar="<address>",
        help="Several exports: read them on this Dask scheduler (tcp://host:8786) instead of local "
        "processes. Needs pip install 'harness[dask]'.",
    ),
]
NoCacheOpt = Annotated[
    bool,
    typer.Option("--no-cache", help="Read the export itself: neither read nor fill the Parquet cache."),
]


@dataclass(frozen=True)
class Reading:
    """The options every analysis command shares, declared once (`reading_options` puts them on a
    command): how the exports are read, and how the tables are printed."""

    by_rank: ByRankOpt = False
    jobs: JobsOpt = None
    dask: DaskOpt = None
    no_cache: NoCacheOpt = False
    format: FormatOpt = Format.table
    wide: WideOpt = False
    limit: LimitOpt = None


AS_GIVEN = Reading()  # the default a command's `reading` parameter names (reading_options fills it)


def reading_options(
    omit: tuple[str, ...] = (), after: dict[str, tuple[str, ...]] | None = None
) -> Callable[[F], F]:
    """The shared analysis options on a command, in place of its parameter `reading: Reading` (`after`: as
    option_group's)."""
    return option_group("reading", Reading, omit, after)


def typer_form(option: Option) -> tuple[Any, Any]:
    """The command-line form of a declared option, as a dataclass field of an option group takes it: its
    annotation (`Annotated[type, typer.Option(...)]`; choices as an enum, whose values the command gets)
    and its default."""
    kind: Any = option.kind
    default = option.default
    if option.choices:
        kind = StrEnum(option.name, {c: c for c in option.choices})  # type: ignore[misc]
        default = None if default is None else kind(default)
    form = typer.Option(option.flag, help=option.help, metavar=option.metavar, min=option.minimum,
                        show_default=option.show_default)  # fmt: skip
    return Annotated[kind if kind is bool or default is not None else kind | None, form], default


def spec_group(name: str, options: Sequence[Option]) -> type:
    """A frozen dataclass with a field per declared option, each with its command-line form: for
    `option_group`, so that a command made from declarations gets them as its options."""
    made = [(o.name, *_field(o)) for o in options]
    return make_dataclass(name, made, frozen=True)


def _field(option: Option) -> tuple[Any, Any]:
    annotation, default = typer_form(option)
    return annotation, field(default=default)


def values_of(group: Any) -> dict[str, Any]:
    """An option group's values by field name, an enum's as its value."""
    return {f.name: _plain(getattr(group, f.name)) for f in fields(group)}


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, StrEnum) else value


def render(result: Tables, reading: Reading) -> None:
    """One table alone, or a titled list; the tables with no data are named (a warning each reason, in the
    table format)."""
    tables = result.tables
    how = {"wide": reading.wide, "limit": reading.limit}
    if len(tables) == 1 and not result.titled:
        emit(tables[0][1], reading.format, title=tables[0][0], notes=result.notes, **how)  # type: ignore[arg-type]
        return
    emit_many(tables, reading.format, notes=result.notes, skipped=result.skipped, **how)  # type: ignore[arg-type]
    if reading.format is Format.table and result.skipped:
        by_reason: dict[str, list[str]] = {}
        for title, why in result.skipped.items():
            by_reason.setdefault(why, []).append(title.split(" (")[0])
        for why, titles in by_reason.items():
            warn(f"skipped {', '.join(titles)}: {why}")


# --- the operator table's order and length on `harness run --profiler torch` ------------------------------
# the --sort and --top that `harness operators` declares (analysis.tables.operators), the same options

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
