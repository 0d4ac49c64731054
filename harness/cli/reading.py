"""What every table command shares: the exports it reads and how it prints them, declared once (`Reading`,
`reading_options`), and `show_table`, which reads a declared table (analysis.tables.declared) from one export
or several and renders it, as its declaration says: served from the export's cache, computed without pandas,
or computed by the registry (analysis.tables.tables)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from analysis.errors import ExportError
from harness.cli.common import FormatOpt, LimitOpt, WideOpt, warn
from harness.cli.option_group import F, option_group
from harness.cli.output import Format, emit, emit_many

if TYPE_CHECKING:
    from analysis.tables.declared import Declared, Tables
    from analysis.tables.multi_tables import Combined

from analysis.tables import declared as declarations
from analysis.trace import results as kept_tables
from harness.execution.nsys import formats

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
TopOpt = Annotated[
    int | None, typer.Option("--top", min=1, metavar="<n>", help="Show only the first N rows.")
]


class StatsFormat(StrEnum):
    auto = "auto"
    v2022_4 = "2022.4"
    v2023_4 = "2023.4"


StatsFormatOpt = Annotated[
    StatsFormat,
    typer.Option(
        "--stats-format",
        help="Rows and names as `nsys stats` of this release prints them: 2022.4 (gpukernsum: a row per "
        "kernel and launch shape; [CUDA memcpy HtoD]) or 2023.4 (cuda_gpu_kern_sum: a row per kernel; [CUDA "
        "memcpy Host-to-Device]). auto: HARNESS_STATS_FORMAT, else the nsys in use, else the nsys that "
        "wrote the export.",
    ),
]


def stats_format(choice: StatsFormat) -> str:
    """The format the tables print (harness.execution.nsys.formats): auto resolved here, once."""
    return formats.stats_format(choice.value)


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


def show_table(kind: str, reports: list[Path], reading: Reading, top: int | None = None,
               **options: object) -> None:  # fmt: skip
    """The declared table `kind` over the exports named: from one export, or combined over several (or over
    one capture's processes with --by-rank), rendered in the chosen format. Its declaration says whether
    it takes --top, is kept in (and served from) the export's cache entry, and comes without pandas."""
    table = declarations.DECLARED[kind]
    if table.takes_top and top is not None:
        options["top"] = top
        top = None
    hta = bool(options.get("hta"))  # HTA's view of the trace: computed each time, with pandas
    kept = table.served_from_cache and not hta and not reading.no_cache
    one = len(reports) == 1 and reports[0].is_file() and not reading.by_rank
    if one and kept:
        served = kept_tables.cached(reports[0], kind, _key(options, reports[0]))  # no pandas, no pyarrow
        if served is not None:
            _render(served, reading, top)  # type: ignore[arg-type]  # Kept: Tables' fields, Rows for frames
            return
    # imported where they are needed: a table served from the cache, or computed without pandas, needs none
    from harness.experiments import opening

    skipped: list[str] = []  # what a folder held that looked like an export and was not taken
    if one:
        paths = [reports[0]]
    else:
        from analysis.trace import multi

        paths = multi.expand(reports, skipped)
    if len(paths) > 1 or reading.by_rank:
        from harness.experiments import reports as many

        try:
            result = many.analyse_many(kind, paths, options, by_rank=reading.by_rank, jobs=reading.jobs,
                                       dask=reading.dask, cache=not reading.no_cache)  # fmt: skip
        except ExportError as e:
            raise ExportError("; ".join([str(e), *skipped])) from None
        combined = _combined(table, result, paths, top)
        combined.notes = [*skipped, *combined.notes]
        _render(_decided(table, combined), reading, top=None)
        return
    trace = opening.open_report(paths[0], cache=not reading.no_cache)
    if table.one_without_pandas is not None and not hta:
        result = table.one_without_pandas(trace, paths[0].name, **_own(options))
    else:
        from analysis.tables import tables as registry  # pandas

        result = registry.TABLES[kind].one(trace, paths[0].name, **options)
    result = _decided(table, result)
    result.notes = [*skipped, *result.notes]
    if kept:
        key = _key(options, paths[0])
        kept_tables.keep(trace, kind, key, result.tables, result.notes, result.skipped, titled=result.titled)
    _render(result, reading, top)


def _own(options: dict[str, object]) -> dict[str, object]:
    """The options a table is computed with (`hta` chooses between the ways of computing it)."""
    return {k: v for k, v in options.items() if k != "hta"}


def _key(options: dict[str, object], report: Path) -> dict[str, object]:
    """What a kept table is kept under: the options that shape it, and the file's name (in its titles)."""
    return {**_own(options), "file": report.name}


def _decided(table: Declared, result: Tables) -> Tables:
    """Each table's deciding columns (the last a narrow terminal drops), then what the table itself says
    matters (e.g. the column it is sorted by), in its attrs: kept with it when it is served again."""
    for title, df in result.tables:
        _marked(df, table.deciding_of(title))
    return result


def _marked(df: Any, deciding: Sequence[str]) -> Any:
    """`df` (a DataFrame or Rows) with its deciding columns, then what the table says matters, in attrs."""
    df.attrs["deciding"] = list(deciding)
    df.attrs["priority"] = [*df.attrs["deciding"], *df.attrs.get("then", ())]
    return df


def _combined(table: Declared, result: Combined, paths: list[Path], top: int | None) -> Tables:
    """The tables over several exports, titled with what they cover; --top keeps N rows per rank."""

    sources = result.sources  # type: ignore[attr-defined]
    labels = sources.labels if sources is not None else []
    label = sources.column if sources is not None else "Source"
    first, last = (labels[0], labels[-1]) if labels else ("", "")
    what = f"{len(paths)} exports" if len(paths) > 1 else paths[0].name
    what += f" (ranks {first}-{last})" if label == "Rank" else ""
    parts = result.tables  # type: ignore[attr-defined]
    out = declarations.Tables(skipped=result.skipped or None)  # type: ignore[attr-defined]
    for name, df in parts:
        if top and label in df.columns:
            df = df.groupby(label, sort=False, group_keys=False).head(top)
        elif top:
            df = df.head(top)
        heading = table.headings.get(name, name if len(parts) > 1 else table.title)
        out.tables.append((f"{heading} in {what}", df))
    said = (n for _, df in out.tables for n in df.attrs.get("notes", []))
    out.notes = list(dict.fromkeys([*result.notes, *said]))  # type: ignore[attr-defined]
    out.titled = len(out.tables) != 1 or bool(out.skipped)
    return out


def _render(result: Tables, reading: Reading, top: int | None) -> None:
    """One table alone, or a titled list; the tables with no data are named (a warning each reason, in the
    table format)."""
    tables = [(title, df.head(top) if top else df) for title, df in result.tables]
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
