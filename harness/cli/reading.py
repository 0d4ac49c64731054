"""What every command that reads exports shares: the exports it names and how it prints their tables,
declared once (`Reading`, `reading_options`); `export_report`, the harness's way to turn an nsys report into
an export, which the front door for reading (analysis.front.reading) is given; `render`, the tables it gives
back printed as the options say."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from harness.cli.common import FormatOpt, LimitOpt, WideOpt, warn
from harness.cli.option_group import F, option_group
from harness.cli.output import Format, emit, emit_many

if TYPE_CHECKING:
    from analysis.tables.table import Tables

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


def export_report(report: Path, *, cache: bool) -> Path:
    """The SQLite export of an nsys report (harness.experiments.opening: nsys exports it, once, into the
    cache folder), for the front door for reading."""
    from harness.experiments import opening  # numpy: a table served from the cache needs none

    return opening.sqlite_for(report, cache=cache)


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
