"""What every command that reads exports shares, declared once: the exports it names and how it prints
their tables (`Reading`, `reading_options`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from harness.cli.common import FormatOpt, LimitOpt, WideOpt, count_option, text_option
from harness.cli.option_group import F, option_group
from harness.cli.terminal.output import Format

REPORT_HELP = (
    "REPORT: an nsys export (.sqlite), a report (.nsys-rep, .qdrep; exported first) or a PyTorch "
    "profiler (Kineto) trace (.json, .json.gz). Several, a glob pattern or a folder: one table over all "
    "of them (ranks from rank<R> in the file names), read in parallel."
)
# hidden: Typer would print the argument's type as <list[Path]>; REPORT_HELP (the epilog) describes it
ReportArg = Annotated[
    list[Path], typer.Argument(show_default=False, metavar="REPORT", hidden=True, readable=False)
]
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
    count_option("--jobs", 1, "Several exports: at most N local processes.", "-j"),
]
DaskOpt = Annotated[
    str | None,
    text_option(
        "--dask",
        "<address>",
        "the scheduler's address (tcp://host:8786)",
        "Several exports: read them on this Dask scheduler (tcp://host:8786) instead of local "
        "processes. Needs pip install 'harness[dask]'.",
    ),
]
NoCacheOpt = Annotated[
    bool,
    typer.Option("--no-cache", help="Read the export itself: neither read nor fill the Parquet cache."),
]


def _window_edge(flag: str, edge: str, events: str) -> typer.models.OptionInfo:
    """A timeline's window edge (`timeline`, `dashboard EXPORT`), in seconds from the session's start."""
    return typer.Option(
        flag,
        metavar="<s>",
        help=f"The timeline's window {edge} this second ({events}), counted from the session's start as "
        "Nsight Systems' timeline and `harness health` count (a PyTorch trace: from its first event).",
    )


StartOpt = Annotated[float | None, _window_edge("--start", "from", "events that end there or later")]
EndOpt = Annotated[float | None, _window_edge("--end", "up to", "events that start there or before")]


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
