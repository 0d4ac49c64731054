"""Every table an export has data for, in one report (`harness summary`): the tables whose declaration has a
part in it (`Table.in_summary`), in their declared order.

Each source table is scanned once. With a cache, the columns every table reads go there first (a chunk at
a time where the reader reads in chunks) and the tables are built one after another from it, each one's
frames let go before the next: the peak is the largest table's, not the sum of all (1M kernels: ~950 MB
when every column was held for all nine tables). Without a cache, every column is held from the start.

Over several exports each table's rows combine as its own command's do; a table whose part leaves out
several exports (GPU time per NVTX range) is left to its own command there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from analysis import tables as registry
from analysis.errors import ExportError
from analysis.tables import nvtx
from analysis.tables.stats_format import DEFAULT as DEFAULT_FORMAT
from analysis.tables.stats_format import STATS_FORMAT, producer, producer_of, report_name
from analysis.tables.table import TOP, InSummary, Table, Tables
from analysis.trace.multi import Combined, Part, Piece, Sources

if TYPE_CHECKING:
    import pandas as pd

    from analysis.trace.trace import Trace


def needs() -> dict[str, tuple[str, ...]]:
    """The columns the tables below read, loaded together so that each source table is scanned once."""
    from analysis.trace.frames import FRAMES

    return {
        "kernels": ("start", "end", "duration", "name_id", "grid", "block", "correlation_id", "global_pid",
                    "device_id"),
        "runtime": ("start", "end", "correlation_id", "global_tid", "name_id"),
        "memcpy": ("start", "end", "copy_kind", "bytes", "stream_id", "correlation_id", "global_pid"),
        "memset": ("start", "end", "bytes", "stream_id", "correlation_id", "global_pid"),
        "osrt": ("duration", "name_id"),
        "nvtx": FRAMES["nvtx"],
        "strings": (),
    }  # fmt: skip


@dataclass
class Report:
    """Titled tables, the notes their functions left, and why each missing table is missing."""

    tables: list[tuple[str, pd.DataFrame]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)


def titles(part: InSummary, stats_format: str, producers: Sequence[str | None] = (None,)) -> tuple[str, ...]:
    """Each of a table's titles in the summary: "WHAT (REPORT)", the report named as `nsys stats` of the
    format printed names it (gpukernsum in 2022.4, cuda_gpu_kern_sum in 2023.4), for exports written by
    `producers`; several names where the format is each export's own and they differ."""
    out = []
    for each in part.parts:
        what, report = (each, None) if isinstance(each, str) else each
        names = dict.fromkeys(report_name(report, stats_format, p) for p in producers) if report else {}
        out.append(f"{what} ({' / '.join(names)})" if names else what)
    return tuple(out)


def _builders(
    by: str, stats_format: str, made_by: str | None
) -> list[tuple[str, Callable[[Trace], pd.DataFrame]]]:
    """(title, build) of every table of the summary of one export (written by the nsys `made_by`), in the
    tables' order."""
    out: list[tuple[str, Callable[[Trace], pd.DataFrame]]] = []
    for table in registry.all():
        if table.in_summary is not None:
            builds = table.in_summary.build(by, stats_format)
            out += zip(titles(table.in_summary, stats_format, [made_by]), builds, strict=True)
    return out


def summary(trace: Trace, by: str = "op", stats_format: str = DEFAULT_FORMAT) -> Report:
    """Build every table; a table without data is skipped and the reason kept in `skipped`. NVTX names
    are grouped as `by` says (analysis.nvtx_names; "raw": as nsys stats prints them); kernels and memory
    operations as `nsys stats` of `stats_format` prints them (analysis.tables.stats_format)."""
    report = Report()
    wanted = needs()
    staged = trace.stage(wanted)  # into the cache, scanned once; else held, scanned once
    if not staged:
        trace.load(wanted)
    for title, build in _builders(by, stats_format, producer(trace)):
        try:
            table = build(trace)
        except ExportError as e:
            report.skipped[title] = str(e)
            continue
        finally:
            if staged:  # the next table reads its columns from the cache: one table's frames at a time
                trace.release()
        if table.empty:
            report.skipped[title] = "no rows"
            continue
        report.tables.append((title, table))
        for note in table.attrs.get("notes", []):
            if note not in report.notes:
                report.notes.append(note)
    return report


# --- several exports: each table's share, combined as its own command combines it --------------------------


def _over_several() -> list[Table]:
    """The tables of the summary that combine over several exports, in their order."""
    return [t for t in registry.all() if t.in_summary is not None and t.in_summary.options is not None]


def _pieces(trace: Trace, by: str = "op", stats_format: str = DEFAULT_FORMAT) -> dict[str, Piece]:
    """Every table's piece, the one named after it (what each of these tables' `pieces` gives); the
    tables without data go to `_skipped` (see analysis.trace.multi_run.read_part)."""
    import pandas as pd

    from analysis.trace.opening import require_events  # numpy: not at import, as --help reads this module

    require_events(trace)  # a memory timeline among the exports: refused, as every table refuses it
    trace.load(needs())
    out: dict[str, Piece] = {}
    skipped: dict[str, str] = {}
    for table in _over_several():
        options = table.in_summary.options(by, stats_format)  # type: ignore[union-attr,misc]
        try:
            pieces = table.pieces(trace, **options)
        except ExportError as e:
            skipped[table.name] = str(e)
            continue
        out[table.name] = pieces[table.name]
    out["_skipped"] = Piece(table=pd.DataFrame({"table": list(skipped), "why": list(skipped.values())}))
    return out


def _share(part: Part, table: Table) -> Part:
    """The part with only `table`'s piece."""
    return replace(part, pieces={k: v for k, v in part.pieces.items() if k == table.name})


def _combine(out: Combined, parts: Sequence[Part], sources: Sources, by_rank: bool,
             options: dict[str, Any]) -> None:  # fmt: skip
    """Each table of the summary combines as its own command's; one no export has data for is skipped."""
    by, stats_format = options.get("by", "op"), options.get("stats_format", DEFAULT_FORMAT)
    made_by = [producer_of(p.info) for p in parts]  # the nsys that wrote each export
    for table in _over_several():
        mine = [_share(p, table) for p in parts]
        named = titles(table.in_summary, stats_format, made_by)  # type: ignore[arg-type]
        if not any(p.pieces for p in mine):
            why = next((p.skipped[table.name] for p in parts if table.name in p.skipped), "no rows")
            out.skipped.update(dict.fromkeys(named, why))
            continue
        if not all(p.pieces for p in mine):
            label = {str(s.path): s.label for s in sources.items}
            lacking = [label[p.path] for p in mine if not p.pieces]
            out.notes.append(f"{named[0]}: no data in {', '.join(lacking)}")
        into = Combined(sources=sources)
        table.combine(into, mine, sources, by_rank, table.in_summary.options(by, stats_format))  # type: ignore[union-attr,misc]
        out.tables += [(title, df) for title, (_, df) in zip(named, into.tables, strict=True)]


# --- the table -------------------------------------------------------------------------------------------


def _one(trace: Trace, source: str, by: str = "op", stats_format: str = DEFAULT_FORMAT) -> Tables:
    from analysis.trace.opening import require_events

    require_events(trace)  # a memory timeline: said once, not by each table it lacks
    report = summary(trace, by=by, stats_format=stats_format)
    if not report.tables:
        reasons = "; ".join(dict.fromkeys(report.skipped.values()))
        raise ExportError(f"nothing to report in {trace.path}: {reasons}")
    made_by = [producer(trace)]
    deciding = {
        title: t.deciding
        for t in registry.all()
        if t.in_summary
        for title in titles(t.in_summary, stats_format, made_by)
    }
    for title, df in report.tables:  # each part keeps the deciding columns of its own table
        df.attrs["deciding"] = list(deciding[title])
    return Tables(report.tables, report.notes, report.skipped, titled=True)  # type: ignore[arg-type]


TABLE = Table(
    "summary",
    summary="Every table the export has data for, in one report.",
    help="Every table the export has data for, in one report. Several exports: the summaries combine like "
    "the single commands' (GPU time per NVTX range is left to its own command).",
    mirrors="the nsys stats reports above, in one run",
    one=_one,
    pieces=_pieces,
    combine=_combine,
    options=(nvtx.BY, nvtx.RAW_NAMES, TOP, STATS_FORMAT),
    prepare=lambda by, raw_names, stats_format: {
        "by": nvtx.grouping(by, raw_names),
        "stats_format": stats_format,
    },
    order=90,
    served_from_cache=True,
    example="harness summary report.nsys-rep",
)
