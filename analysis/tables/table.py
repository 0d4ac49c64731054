"""What a table is, declared as plain data: `Table` (its command, the `nsys stats` report it mirrors, its
options, how a command serves it, how it is computed from one export and over several, its part of the
summary), `Option` (one command-line option, with no command-line library: harness.cli makes it one) and
`Tables` (what a command's computation gives back).

Light: no pandas, no numpy. `harness --help` and `harness kernels` on a cached export read the
declarations and nothing heavier; the functions a declaration names import what they compute with.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from analysis.trace.multi import Combined, Part, Piece, Sources

if TYPE_CHECKING:
    import pandas as pd

    from analysis.trace.results import Rows
    from analysis.trace.trace import Trace

    # (the Combined to fill, every export's Part, their labels, by rank, the options)
    Combine = Callable[[Combined, Sequence[Part], Sources, bool, dict[str, Any]], None]


@dataclass
class Tables:
    """One command's titled tables from one trace (DataFrames, or Rows where no pandas was needed), the
    notes to print with them, the tables it has no data for (title -> why), whether they print as a
    titled list even when there is one, and the warnings to print with them (a capture that failed its
    health checks: analysis.advice.verdict)."""

    tables: list[tuple[str, pd.DataFrame | Rows]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: dict[str, str] | None = None
    titled: bool = False
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Option:
    """One option of a table's command: the parameter it fills (what `Table.prepare` is given), its flag,
    its help, its type (bool: a flag; int or str; str with `choices`), default and metavar, for an int its
    least value, and for a text option left out by default what it names (`names`: an empty value is
    refused, saying to give that)."""

    name: str
    flag: str
    help: str
    kind: type = bool
    default: Any = False
    choices: tuple[str, ...] = ()
    metavar: str | None = None
    minimum: int | None = None
    show_default: bool = True
    names: str = "a value"


# options several commands share: --top (read_tables keeps the first N rows, or gives N to a table that
# takes it; a table says what its first N are with `replace(TOP, help=...)`), --hta (the kernels table,
# `harness breakdown`)
TOP = Option("top", "--top", "Show only the first N rows.", int, None, metavar="<n>", minimum=1)
HTA = Option(
    "hta", "--hta",
    "Apply Holistic Trace Analysis's load rules first (drop the last ProfilerStep, round float µs timestamps "
    "inward), so the numbers equal HTA's.",
)  # fmt: skip


# the statistics columns of a table summarised over several exports (`summarising`), as nsys stats names them
KERNEL_STATS = ["Time (%)", "Total Time (ns)", "Instances", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)",
                "StdDev (ns)"]  # fmt: skip
CALL_STATS = ["Time (%)", "Total Time (ns)", "Num Calls", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)",
              "StdDev (ns)"]  # fmt: skip
MEMOP_STATS = ["Time (%)", "Total Time (ns)", "Count", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)",
               "StdDev (ns)"]  # fmt: skip


def stacked(out: Combined, parts: Sequence[Part], sources: Sources, by_rank: bool,
            options: dict[str, Any]) -> None:  # fmt: skip
    """`combine` for a table whose rows are per process already: each export's finished tables stacked
    with a rank column, one block per rank."""
    from analysis.trace.multi_combine import stack_tables  # pandas: only where several exports are read

    for name in dict.fromkeys(n for p in parts for n in p.pieces):  # in the order one export's are
        table = stack_tables(parts, name, sources)
        if table is not None:
            out.tables.append((name, table))


def summarising(piece: str, **spec: Any) -> Combine:
    """`combine` for a table whose rows of piece `piece` summarise together (per rank with --by-rank), as
    nsys stats summarises one export's: `spec` names the key columns, the output columns and the count's
    name (analysis.trace.multi_combine.summarised)."""

    def combine(out: Combined, parts: Sequence[Part], sources: Sources, by_rank: bool,
                options: dict[str, Any]) -> None:  # fmt: skip
        from analysis.trace.multi_combine import summarised  # pandas, as `stacked`

        out.tables.append((piece, summarised(piece, parts, sources, by_rank, **spec)))  # type: ignore[arg-type]

    return combine


def one_frame(what: str, compute: Callable[..., pd.DataFrame]) -> Callable[..., Tables]:
    """`one` for a table that is one frame, `compute(trace, **options)`: titled "WHAT in SOURCE", with the
    notes the frame carries."""

    def one(trace: Trace, source: str, **options: Any) -> Tables:
        df = compute(trace, **options)
        return Tables([(f"{what} in {source}", df)], notes=list(df.attrs.get("notes", [])))

    return one


def one_piece(
    name: str,
    *,
    rows: Callable[..., pd.DataFrame] | None = None,
    table: Callable[..., pd.DataFrame] | None = None,
) -> Callable[..., dict[str, Piece]]:
    """`pieces` for a table with one piece, `name`: its rows to summarise together (`rows(trace,
    **options)`, with `summarising`), or its finished table to stack (`table(trace, **options)`, with
    `stacked`)."""

    def pieces(trace: Trace, **options: Any) -> dict[str, Piece]:
        if rows is not None:
            return {name: Piece(rows=rows(trace, **options))}
        return {name: Piece(table=table(trace, **options) if table is not None else None)}

    return pieces


def as_given(**values: Any) -> dict[str, Any]:
    """The options a table is computed with, when they are its command's values as they are."""
    return values


@dataclass(frozen=True)
class InSummary:
    """A table's part of `harness summary`: its tables there, each its title, or (what it shows, the `nsys
    stats` report it mirrors as 2022.4 names it) titled "WHAT (REPORT)" with the report named as the format
    printed names it (analysis.tables.summary); `build(by, stats_format)`, one function of the trace
    per table, for one export (`by`: how NVTX names are grouped, analysis.nvtx_names); and `options(by,
    stats_format)`, what its `pieces` and `combine` take in a summary of several exports, where its share is
    its piece named after it (None: left out there)."""

    parts: tuple[str | tuple[str, str | None], ...]
    build: Callable[[str, str], Sequence[Callable[[Trace], pd.DataFrame]]]
    options: Callable[[str, str], dict[str, Any]] | None = None


@dataclass(frozen=True)
class Table:
    """One table, declared once: `harness NAME` and everything that serves it are made from this."""

    name: str  # the command: `harness NAME`
    summary: str  # its line in `harness --help`
    help: str  # its command's help
    mirrors: str  # the nsys stats report or HTA call whose rows it equals
    one: Callable[..., Tables]  # (trace, source's name, **options) -> the tables of one export
    pieces: Callable[..., dict[str, Piece]]  # (trace, **options) -> one export's share, for `combine`
    combine: Combine  # the shares of every export -> the tables over all of them (into a Combined)
    options: tuple[Option, ...] = ()  # its command's own options, in the order its help lists them
    prepare: Callable[..., dict[str, Any]] = as_given  # its command's values -> the options it takes
    order: int = 100  # its place among the tables: in `harness --help` and in `harness summary`
    title: str = ""  # its heading over several exports
    deciding: tuple[str, ...] = ()  # columns never dropped to fit the terminal (its `priority`)
    headings: Mapping[str, str] = field(default_factory=dict)  # piece -> heading, over several exports
    served_from_cache: bool = False  # kept in the export's cache entry, served from it without pandas
    not_kept_with: tuple[str, ...] = ()  # options that, when set, have it computed each time, with pandas
    takes_top: bool = False  # the table takes `top` itself (else --top keeps the first N rows of each)
    without_pandas: Callable[..., Tables] | None = None  # (trace, source, **options): `one`, no pandas
    in_summary: InSummary | None = None  # its part of `harness summary`, if it has one
    example: str = ""  # a command line, the last line of its help


def frame_table(name: str, what: str, frame: Callable[..., pd.DataFrame], **fields: Any) -> Table:
    """A table that is one frame, `frame(trace, **options)`, whose rows are per process already: titled
    "WHAT in SOURCE" for one export; over several, each export's frame stacked (`stacked`) under the heading
    WHAT unless `title` says otherwise. `fields`: the rest of its Table."""
    fields.setdefault("title", what)
    return Table(
        name, one=one_frame(what, frame), pieces=one_piece(name, table=frame), combine=stacked, **fields
    )
