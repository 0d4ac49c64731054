"""How each analysis table is computed, one `Table` per declaration (`TABLES`; analysis.tables.declared
says what each is and how a command serves it, without pandas).

A `Table` names how its tables come from one trace (`one`), what one export contributes when several are
read together (`pieces`, run in a worker) and how those contributions combine (`combine`). The analysis
commands (harness/cli/analysis.py) are made from it; `harness` itself runs `run_task` and `combine` through
harness.experiments.reports.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from analysis.errors import ExportError
from analysis.hta.hta_rules import hta_view
from analysis.tables import declared
from analysis.tables import nvtx_gpu as gpu
from analysis.tables.cuda_api import cuda_api_summary
from analysis.tables.declared import SUMMARY_TITLES, Declared, Tables
from analysis.tables.kernels import kernel_summary
from analysis.tables.kernels import title as kernel_title
from analysis.tables.launch import launch_summary
from analysis.tables.memops import memops_size, memops_time
from analysis.tables.multi_tables import (
    CALL_STATS,
    KERNEL_STATS,
    MEMOP_STATS,
    Combined,
    api_rows,
    kernel_columns,
    kernel_rows_named,
    memop_rows,
    nvtx_rows,
    osrt_rows,
    size_table,
    summarised,
)
from analysis.tables.nvtx import nvtx_summary, nvtx_trace
from analysis.tables.operators import operator_table
from analysis.tables.osrt import osrt_summary
from analysis.tables.stats_format import DEFAULT as DEFAULT_FORMAT
from analysis.tables.summary import NEEDS, summary
from analysis.trace.multi import Grouped, Part, Piece, Sources
from analysis.trace.multi_combine import all_notes, stack_tables
from analysis.trace.multi_run import read_part
from analysis.trace.trace import Trace

Combine = Callable[[Combined, Sequence[Part], Sources, bool, dict[str, Any]], None]


@dataclass(frozen=True)
class Table:
    """How one declared table is computed."""

    declared: Declared  # what it is and how a command serves it
    one: Callable[..., Tables]  # (trace, source's name, **options) -> the tables of one export
    pieces: Callable[..., dict[str, Piece]]  # (trace, **options) -> one export's share, for `combine`
    combine: Combine  # the parts of every export -> the tables over all of them (into a Combined)


def _single(title: str, df: pd.DataFrame) -> Tables:
    return Tables([(title, df)], notes=list(df.attrs.get("notes", [])))


# --- one export -----------------------------------------------------------------------------------------


def _kernels_one(trace: Trace, source: str, names: str = "demangled", by: str | None = None,
                 range_name: str | None = None, hta: bool = False,
                 stats_format: str = DEFAULT_FORMAT) -> Tables:  # fmt: skip
    trace = hta_view(trace) if hta else trace  # type: ignore[assignment]
    df = kernel_summary(trace, names=names, by=by, range_name=range_name, stats_format=stats_format)  # type: ignore[arg-type]
    return _single(kernel_title(source), df)


def _nvtx_one(trace: Trace, source: str, trace_rows: bool = False, by: str = "op") -> Tables:
    df = nvtx_trace(trace) if trace_rows else nvtx_summary(trace, by=by)
    return _single(f"NVTX ranges in {source}", df)


def _nvtx_gpu_one(trace: Trace, source: str, view: str = "summary", mode: str = "auto",
                  phases: tuple[str, ...] = (), exclusive: bool = False, top: int | None = None,
                  by: str = "op") -> Tables:  # fmt: skip
    if view == "projection":
        df = gpu.nvtx_gpu_projection(trace)
        return _single(f"NVTX ranges projected onto the GPU in {source}", df.head(top) if top else df)
    if view == "kernels":
        df = gpu.nvtx_gpu_kernels(trace, mode=mode, phases=phases, top=top, exclusive=exclusive, by=by)  # type: ignore[arg-type]
        return _single(f"kernels per NVTX range ({df.attrs['mode']} mode) in {source}", df)
    per_range = gpu.nvtx_gpu_summary(trace, mode=mode, phases=phases, exclusive=exclusive, by=by)  # type: ignore[arg-type]
    chosen = per_range.attrs["mode"]
    out = Tables([(f"GPU time per NVTX range ({chosen} mode) in {source}", per_range)], titled=True)
    out.notes = list(per_range.attrs.get("notes", []))
    if chosen == "phase":
        out.tables.append(("Do the phases add up? (measured steps)", gpu.phase_check(trace, phases)))
    return out


def _memops_one(trace: Trace, source: str, stats_format: str = DEFAULT_FORMAT) -> Tables:
    by_time = memops_time(trace, stats_format)
    tables = [("GPU memory operations by time", by_time), ("by size (MB)", memops_size(trace, stats_format))]
    return Tables(tables, notes=list(by_time.attrs.get("notes", [])), titled=True)


def _summary_one(trace: Trace, source: str, by: str = "op", stats_format: str = DEFAULT_FORMAT) -> Tables:
    report = summary(trace, by=by, stats_format=stats_format)
    if not report.tables:
        reasons = "; ".join(dict.fromkeys(report.skipped.values()))
        raise ExportError(f"nothing to report in {trace.path}: {reasons}")
    return Tables(report.tables, report.notes, report.skipped, titled=True)


# --- several exports: what each contributes ---------------------------------------------------------------


def _kernels_pieces(trace: Trace, names: str = "demangled", by: str | None = None,
                    range_name: str | None = None, hta: bool = False,
                    stats_format: str = DEFAULT_FORMAT) -> dict[str, Piece]:  # fmt: skip
    trace = hta_view(trace) if hta else trace  # type: ignore[assignment]
    rows = kernel_rows_named(trace, names=names, by=by, range_name=range_name, stats_format=stats_format)
    return {"kernels": Piece(rows=rows)}


def _memops_pieces(trace: Trace, stats_format: str = DEFAULT_FORMAT) -> dict[str, Piece]:
    return {"memops": Piece(rows=memop_rows(trace, stats_format))}


def _nvtx_pieces(trace: Trace, trace_rows: bool = False, by: str = "op") -> dict[str, Piece]:
    if trace_rows:
        return {"nvtx": Piece(table=nvtx_trace(trace))}
    return {"nvtx": Piece(rows=nvtx_rows(trace, by))}


def _nvtx_gpu_pieces(trace: Trace, view: str = "summary", mode: str = "auto", phases: tuple[str, ...] = (),
                     exclusive: bool = False, top: int | None = None,
                     by: str = "op") -> dict[str, Piece]:  # fmt: skip
    """The finished tables of one export (their rows are per process already), named by view."""
    tables = _nvtx_gpu_one(trace, "", view, mode, phases, exclusive, top, by).tables
    names = {"projection": ["projection"], "kernels": ["kernels"]}.get(view, ["ranges", "check"])
    return {name: Piece(table=df) for name, (_, df) in zip(names, tables, strict=False)}


def _summary_pieces(trace: Trace, by: str = "op", stats_format: str = DEFAULT_FORMAT) -> dict[str, Piece]:
    """Every summary table's piece; those without data go to `_skipped` (see
    analysis.trace.multi_run.read_part)."""
    trace.load(NEEDS)
    out: dict[str, Piece] = {}
    skipped: dict[str, str] = {}
    builds: list[tuple[str, Callable[[], Piece]]] = [
        ("kernels", lambda: Piece(rows=kernel_rows_named(trace, by="name"))),  # combined by name
        ("nvtx", lambda: Piece(rows=nvtx_rows(trace, by))),
        ("api", lambda: Piece(rows=api_rows(trace))),
        ("memops", lambda: Piece(rows=memop_rows(trace, stats_format))),
        ("launch", lambda: Piece(table=launch_summary(trace))),
        ("osrt", lambda: Piece(rows=osrt_rows(trace))),
    ]
    for name, build in builds:
        try:
            out[name] = build()
        except ExportError as e:
            skipped[name] = str(e)
    out["_skipped"] = Piece(table=pd.DataFrame({"table": list(skipped), "why": list(skipped.values())}))
    return out


# --- several exports: how they combine ---------------------------------------------------------------------


def _stats_of(piece: str, **spec: Any) -> Combine:
    """Rows summarised together (per rank with --by-rank), as nsys stats summarises one export's."""

    def combine(out: Combined, parts: Sequence[Part], sources: Sources, by_rank: bool,
                options: dict[str, Any]) -> None:  # fmt: skip
        out.tables.append((piece, summarised(piece, parts, sources, by_rank, **spec)))  # type: ignore[arg-type]

    return combine


def _stacked(out: Combined, parts: Sequence[Part], sources: Sources, by_rank: bool,
             options: dict[str, Any]) -> None:  # fmt: skip
    """Finished tables per export, stacked with a rank column (their rows are per process already)."""
    for name in sorted({n for p in parts for n in p.pieces}):
        table = stack_tables(parts, name, sources)
        if table is not None:
            out.tables.append((name, table))


def _kernels_combine(out: Combined, parts: Sequence[Part], sources: Sources, by_rank: bool,
                     options: dict[str, Any]) -> None:  # fmt: skip
    # by default each export's rows are grouped as its stats format says: by shape only where all are
    by = options.get("by") or ("shape" if all(_has_shape(p) for p in parts) else "name")
    spec = kernel_spec(by)
    out.tables.append(("kernels", summarised("kernels", parts, sources, by_rank, **spec)))  # type: ignore[arg-type]


def _has_shape(part: Part) -> bool:
    piece = part.pieces.get("kernels")
    if piece is None or piece.rows is None:
        return True
    rows = piece.rows  # a frame, or a worker's rows grouped by their keys (analysis.trace.multi.Grouped)
    return "GridXYZ" in (rows.keys if isinstance(rows, Grouped) else rows.columns)


def kernel_spec(by: str) -> dict[str, Any]:
    """How kernels summarise: by name and launch shape, or (`by` "name") by name alone."""
    keys = ["Name", "GridXYZ", "BlockXYZ"] if by == "shape" else ["Name"]
    return {"keys": keys, "columns": kernel_columns(by)}


NVTX_SPEC: dict[str, Any] = {"keys": ["Range", "Style"], "columns": [*KERNEL_STATS, "Style", "Range"]}
API_SPEC: dict[str, Any] = {"keys": ["Name"], "columns": [*CALL_STATS, "Name"], "count_name": "Num Calls"}
MEMOP_SPEC: dict[str, Any] = {
    "keys": ["Operation"],
    "columns": [*MEMOP_STATS, "Operation"],
    "count_name": "Count",
}


# a summary over several exports merges launch shapes: its kernels by name alone
SUMMARY_SPECS = {"kernels": kernel_spec("name"), "nvtx": NVTX_SPEC, "api": API_SPEC, "memops": MEMOP_SPEC,
                 "osrt": API_SPEC}  # fmt: skip


def _nvtx_combine(out: Combined, parts: Sequence[Part], sources: Sources, by_rank: bool,
                  options: dict[str, Any]) -> None:  # fmt: skip
    if options.get("trace_rows"):
        out.tables.append(("nvtx", stack_tables(parts, "nvtx", sources)))  # type: ignore[arg-type]
    else:
        _stats_of("nvtx", **NVTX_SPEC)(out, parts, sources, by_rank, options)


def _memops_combine(out: Combined, parts: Sequence[Part], sources: Sources, by_rank: bool,
                    options: dict[str, Any]) -> None:  # fmt: skip
    out.tables.append(("by time", summarised("memops", parts, sources, by_rank, **MEMOP_SPEC)))  # type: ignore[arg-type]
    out.tables.append(("by size", size_table(parts, sources, by_rank)))  # type: ignore[arg-type]


def _summary_combine(out: Combined, parts: Sequence[Part], sources: Sources, by_rank: bool,
                     options: dict[str, Any]) -> None:  # fmt: skip
    """Each table of the summary combines as its own command's; one no export has data for is skipped."""
    for name in ("kernels", "nvtx", "api", "memops", "launch", "osrt"):
        have = [p for p in parts if name in p.pieces]
        if not have:
            why = next((p.skipped[name] for p in parts if name in p.skipped), "no rows")
            out.skipped[SUMMARY_TITLES[name]] = why
            if name == "memops":
                out.skipped[SUMMARY_TITLES["memops_size"]] = why
            continue
        if len(have) < len(parts):
            label = {str(s.path): s.label for s in sources.items}
            lacking = [label[p.path] for p in parts if name not in p.pieces]
            out.notes.append(f"{SUMMARY_TITLES[name]}: no data in {', '.join(lacking)}")
        if name == "launch":
            out.tables.append((SUMMARY_TITLES[name], stack_tables(parts, name, sources)))  # type: ignore[arg-type]
            continue
        spec = SUMMARY_SPECS[name]
        out.tables.append((SUMMARY_TITLES[name], summarised(name, parts, sources, by_rank, **spec)))  # type: ignore[arg-type]
        if name == "memops":
            out.tables.append((SUMMARY_TITLES["memops_size"], size_table(parts, sources, by_rank)))  # type: ignore[arg-type]


# --- the registry ---------------------------------------------------------------------------------------


def _one_table(title: str, build: Callable[[Trace], pd.DataFrame]) -> Callable[..., Tables]:
    return lambda trace, source: _single(f"{title} in {source}", build(trace))


def _operators_one(trace: Trace, source: str, **options: Any) -> Tables:
    return _single(f"operators in {source}", operator_table(trace, **options))


def _operators_pieces(trace: Trace, **options: Any) -> dict[str, Piece]:
    return {"operators": Piece(table=operator_table(trace, **options))}


def _launch_pieces(trace: Trace) -> dict[str, Piece]:
    return {"launch": Piece(table=launch_summary(trace))}


def _rows_of(piece: str, build: Callable[[Trace], pd.DataFrame]) -> Callable[..., dict[str, Piece]]:
    return lambda trace: {piece: Piece(rows=build(trace))}


TABLES: dict[str, Table] = {
    t.declared.name: t
    for t in (
        Table(declared.KERNELS, one=_kernels_one, pieces=_kernels_pieces, combine=_kernels_combine),
        Table(declared.NVTX, one=_nvtx_one, pieces=_nvtx_pieces, combine=_nvtx_combine),
        Table(declared.NVTX_GPU, one=_nvtx_gpu_one, pieces=_nvtx_gpu_pieces, combine=_stacked),
        Table(
            declared.API, one=_one_table("CUDA API calls", cuda_api_summary),
            pieces=_rows_of("api", api_rows), combine=_stats_of("api", **API_SPEC),
        ),
        Table(declared.MEMOPS, one=_memops_one, pieces=_memops_pieces, combine=_memops_combine),
        Table(
            declared.LAUNCH, one=_one_table("kernel launch latency", launch_summary), pieces=_launch_pieces,
            combine=_stacked,
        ),
        Table(
            declared.OSRT, one=_one_table("OS runtime calls", osrt_summary),
            pieces=_rows_of("osrt", osrt_rows), combine=_stats_of("osrt", **API_SPEC),
        ),
        Table(declared.OPERATORS, one=_operators_one, pieces=_operators_pieces, combine=_stacked),
        Table(declared.SUMMARY, one=_summary_one, pieces=_summary_pieces, combine=_summary_combine),
    )
}  # fmt: skip


def run_task(path: str, kind: str, options: dict[str, Any], cache: bool = True) -> Part:
    """Read one export for the table `kind`: the Part a worker (a local process or a Dask worker) sends
    back."""
    return read_part(path, lambda trace: TABLES[kind].pieces(trace, **options), cache)


def combine(kind: str, parts: Sequence[Part], sources: Sources, *, by_rank: bool = False,
            options: dict[str, Any] | None = None) -> Combined:  # fmt: skip
    """The table `kind` over every export (or per export with `by_rank`)."""
    out = Combined(notes=all_notes(parts, sources), sources=sources)
    TABLES[kind].combine(out, parts, sources, by_rank, options or {})
    return out
