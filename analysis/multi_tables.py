"""What each analysis command reads from one export in a worker, and how its tables combine over exports.

`run_task(path, kind, options, cache)` is the task a worker runs (a local process or a Dask worker): it opens
the trace (through the Parquet cache), builds the pieces of `kind` and returns a `Part`. `combine(kind, ...)`
turns the parts into the command's tables. See analysis.multi for the rules.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from analysis.errors import ExportError
from analysis.multi import Part, Piece, Sources, all_notes, gather_rows, read_part, stack_tables, stat_table
from analysis.trace import Trace

KERNEL_STATS = ["Time (%)", "Total Time (ns)", "Instances", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)",
                "StdDev (ns)"]  # fmt: skip
CALL_STATS = ["Time (%)", "Total Time (ns)", "Num Calls", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)",
              "StdDev (ns)"]  # fmt: skip
MEMOP_STATS = ["Time (%)", "Total Time (ns)", "Count", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)",
               "StdDev (ns)"]  # fmt: skip


def _cat(values: Any) -> pd.Categorical:
    return pd.Categorical(np.asarray(values, dtype=object))


# --- per export: rows to combine ------------------------------------------------------------------------


def kernel_rows_named(
    trace: Trace, *, names: str = "demangled", by: str = "shape", range_name: str | None = None
) -> pd.DataFrame:
    """One row per kernel: Name (and GridXYZ, BlockXYZ by shape) as categories, duration."""
    from analysis.kernels import block_text, grid_text
    from analysis.runtime import kernel_rows

    trace.require("kernels", "CUDA kernel data")
    if range_name is None:
        kern = kernel_rows(trace, ("name_id", "grid", "block", "duration"), names=names)
    else:
        from analysis.nvtx_gpu import kernels_in_ranges

        kern = kernels_in_ranges(trace, range_name, names=names, extra=("grid", "block"))
    codes, ids = pd.factorize(kern["name_id"], sort=False)
    strings = trace.strings(ids)
    labels = pd.Index([strings.get(int(i), "") for i in ids], dtype=object)
    name = pd.Categorical.from_codes(codes, categories=labels) if labels.is_unique else _cat(labels[codes])
    out: dict[str, Any] = {"Name": name}
    if by == "shape":
        for col, raw, text in (("GridXYZ", "grid", grid_text), ("BlockXYZ", "block", block_text)):
            c, uniq = pd.factorize(kern[raw], sort=False)
            out[col] = pd.Categorical.from_codes(c, categories=text(pd.Series(uniq)).to_numpy())
    out["duration"] = kern["duration"].to_numpy()
    return pd.DataFrame(out)


def _kernels(trace: Trace, names: str = "demangled", by: str = "shape", range_name: str | None = None,
             hta: bool = False) -> dict[str, Piece]:  # fmt: skip
    if hta:
        from analysis.hta_rules import hta_view

        trace = hta_view(trace)  # type: ignore[assignment]
    return {"kernels": Piece(rows=kernel_rows_named(trace, names=names, by=by, range_name=range_name))}


def nvtx_rows(trace: Trace, by: str = "op") -> pd.DataFrame:
    """One row per NVTX range: Range (DOMAIN:NAME, grouped as `by` says: analysis.nvtx_names), Style,
    duration. The line saying how names are grouped goes to the trace's notes."""
    from analysis.nvtx import all_ranges, grouped_tags

    trace.require("nvtx", "NVTX data")
    ranges = all_ranges(trace)
    if ranges.empty:
        raise ExportError(f"no NVTX ranges in {trace.path}: only marks or domain events")
    names, said = grouped_tags(ranges, by)
    for line in said:
        trace.note(line)
    return pd.DataFrame(
        {
            "Range": _cat(names.astype(object)),
            "Style": _cat(ranges["style"]),
            "duration": ranges["duration_ns"],
        }
    )


def _nvtx(trace: Trace, trace_rows: bool = False, by: str = "op") -> dict[str, Piece]:
    from analysis.nvtx import nvtx_trace

    if trace_rows:
        return {"nvtx": Piece(table=nvtx_trace(trace))}
    return {"nvtx": Piece(rows=nvtx_rows(trace, by))}


def api_rows(trace: Trace) -> pd.DataFrame:
    from analysis.runtime import runtime_calls

    trace.require("runtime", "CUDA API calls")
    calls = runtime_calls(trace)
    trace.notes += [n for n in calls.attrs["notes"] if n not in trace.notes]
    names = calls["name_id"].map(calls.attrs["names"]).fillna("?")
    return pd.DataFrame({"Name": _cat(names), "duration": (calls["end"] - calls["start"]).to_numpy()})


def osrt_rows(trace: Trace) -> pd.DataFrame:
    trace.require("osrt", "OS runtime calls")
    calls = trace.frame("osrt", ["name_id", "duration"])
    names = calls["name_id"].map(trace.strings(calls["name_id"].unique())).fillna("?")
    return pd.DataFrame({"Name": _cat(names), "duration": calls["duration"].to_numpy()})


def memop_rows(trace: Trace) -> pd.DataFrame:
    from analysis.memops import memory_ops

    ops = memory_ops(trace)
    return pd.DataFrame(
        {"Operation": _cat(ops["Operation"]), "duration": ops["duration"].to_numpy(), "bytes": ops["bytes"]}
    )


def _nvtx_gpu(trace: Trace, view: str = "summary", mode: str = "auto", phases: tuple[str, ...] = (),
              exclusive: bool = False, top: int | None = None,
              by: str = "op") -> dict[str, Piece]:  # fmt: skip
    from analysis import nvtx_gpu as g

    if view == "projection":
        return {"projection": Piece(table=g.nvtx_gpu_projection(trace))}
    if view == "kernels":
        df = g.nvtx_gpu_kernels(trace, mode=mode, phases=phases, top=top, exclusive=exclusive, by=by)  # type: ignore[arg-type]
        return {"kernels": Piece(table=df)}
    per_range = g.nvtx_gpu_summary(trace, mode=mode, phases=phases, exclusive=exclusive, by=by)  # type: ignore[arg-type]
    pieces = {"ranges": Piece(table=per_range)}
    if per_range.attrs["mode"] == "phase":
        pieces["check"] = Piece(table=g.phase_check(trace, phases))
    return pieces


def _table(build: Callable[[Trace], pd.DataFrame], name: str) -> Callable[[Trace], dict[str, Piece]]:
    return lambda trace: {name: Piece(table=build(trace))}


def _summary(trace: Trace, by: str = "op") -> dict[str, Piece]:
    """Every summary table's piece; those without data go to `skipped` (see run_task)."""
    from analysis.launch import launch_summary
    from analysis.summary import NEEDS

    trace.load(NEEDS)
    out: dict[str, Piece] = {}
    skipped: dict[str, str] = {}
    builds: list[tuple[str, Callable[[], Piece]]] = [
        ("kernels", lambda: Piece(rows=kernel_rows_named(trace))),
        ("nvtx", lambda: Piece(rows=nvtx_rows(trace, by))),
        ("api", lambda: Piece(rows=api_rows(trace))),
        ("memops", lambda: Piece(rows=memop_rows(trace))),
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


TASKS: dict[str, Callable[..., dict[str, Piece]]] = {
    "kernels": _kernels,
    "nvtx": _nvtx,
    "nvtx-gpu": _nvtx_gpu,
    "api": lambda trace: {"api": Piece(rows=api_rows(trace))},
    "osrt": lambda trace: {"osrt": Piece(rows=osrt_rows(trace))},
    "memops": lambda trace: {"memops": Piece(rows=memop_rows(trace))},
    "launch": lambda trace: {"launch": Piece(table=_launch(trace))},
    "summary": _summary,
}


def _launch(trace: Trace) -> pd.DataFrame:
    from analysis.launch import launch_summary

    return launch_summary(trace)


def run_task(path: str, kind: str, options: dict[str, Any], cache: bool = True) -> Part:
    """Read one export for `kind` (a key of TASKS): the Part a worker sends back."""
    return read_part(path, lambda trace: TASKS[kind](trace, **options), cache)


# --- combined tables ------------------------------------------------------------------------------------


@dataclass
class Combined:
    """Titled tables over several exports, with their notes and the tables no export had data for."""

    tables: list[tuple[str, pd.DataFrame]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    sources: Sources | None = None


def _size_table(rows: pd.DataFrame, sources: Sources, by_rank: bool) -> pd.DataFrame:
    from analysis.memops import SIZE_COLUMNS
    from analysis.stats import round_half_up

    keys = ["_src", "Operation"] if by_rank else ["Operation"]
    data = rows.assign(Operation=rows["Operation"].astype(object))
    stats = data.groupby(keys, sort=False)["bytes"].agg(
        ["sum", "size", "mean", "median", "min", "max", "std"]
    )
    stats = stats.reset_index()
    stats["std"] = stats["std"].fillna(0.0)
    out = stats[keys].copy()
    out["Count"] = stats["size"].astype(np.int64)
    out["bytes"] = stats["sum"]
    for col, key in (("Total", "sum"), ("Avg", "mean"), ("Med", "median"), ("Min", "min"), ("Max", "max"),
                     ("StdDev", "std")):  # fmt: skip
        out[f"{col} (MB)"] = round_half_up(stats[key] / 1e6, 3)
    out = out.sort_values("Operation", kind="stable").sort_values("bytes", ascending=False, kind="stable")
    if by_rank:
        out = out.sort_values("_src", kind="stable")
        out.insert(0, sources.column, np.asarray(sources.labels, dtype=object)[out["_src"].to_numpy()])
        return out[[sources.column, *SIZE_COLUMNS]].reset_index(drop=True)
    return out[SIZE_COLUMNS].reset_index(drop=True)


def _stats(
    name: str, parts: Sequence[Part], sources: Sources, by_rank: bool, **spec: Any
) -> pd.DataFrame | None:
    rows = gather_rows(parts, name, sources)
    if rows is None:
        return None
    return stat_table(rows, sources=sources, by_rank=by_rank, **spec)


def kernel_columns(by: str) -> list[str]:
    return [*KERNEL_STATS, *(["GridXYZ", "BlockXYZ"] if by == "shape" else []), "Name"]


def combine(kind: str, parts: Sequence[Part], sources: Sources, *, by_rank: bool = False,
            options: dict[str, Any] | None = None) -> Combined:  # fmt: skip
    """The command's tables over every export (or per export with `by_rank`)."""
    options = options or {}
    out = Combined(notes=all_notes(parts, sources), sources=sources)
    stats = {
        "kernels": lambda: _stats(
            "kernels", parts, sources, by_rank, **_kernel_spec(options.get("by", "shape"))
        ),
        "nvtx": lambda: _stats("nvtx", parts, sources, by_rank, keys=["Range", "Style"],
                               columns=[*KERNEL_STATS, "Style", "Range"]),
        "api": lambda: _stats("api", parts, sources, by_rank, keys=["Name"], columns=[*CALL_STATS, "Name"],
                              count_name="Num Calls"),
        "osrt": lambda: _stats("osrt", parts, sources, by_rank, keys=["Name"], columns=[*CALL_STATS, "Name"],
                               count_name="Num Calls"),
        "memops": lambda: _stats("memops", parts, sources, by_rank, keys=["Operation"],
                                 columns=[*MEMOP_STATS, "Operation"], count_name="Count"),
    }  # fmt: skip
    if kind in ("kernels", "api", "osrt"):
        out.tables.append((kind, stats[kind]()))  # type: ignore[arg-type]
    elif kind == "nvtx":
        if options.get("trace_rows"):
            out.tables.append(("nvtx", stack_tables(parts, "nvtx", sources)))  # type: ignore[arg-type]
        else:
            out.tables.append(("nvtx", stats["nvtx"]()))  # type: ignore[arg-type]
    elif kind == "memops":
        out.tables.append(("by time", stats["memops"]()))  # type: ignore[arg-type]
        rows = gather_rows(parts, "memops", sources)
        out.tables.append(("by size", _size_table(rows, sources, by_rank)))  # type: ignore[arg-type]
    elif kind in ("launch", "nvtx-gpu"):
        names = sorted({n for p in parts for n in p.pieces})
        for name in names:
            table = stack_tables(parts, name, sources)
            if table is not None:
                out.tables.append((name, table))
    elif kind == "summary":
        _combine_summary(out, parts, sources, by_rank, stats)
    return out


def _kernel_spec(by: str) -> dict[str, Any]:
    keys = ["Name", "GridXYZ", "BlockXYZ"] if by == "shape" else ["Name"]
    return {"keys": keys, "columns": kernel_columns(by)}


SUMMARY_TITLES = {
    "kernels": "CUDA kernels (gpukernsum)",
    "nvtx": "NVTX ranges (nvtxsum)",
    "api": "CUDA API (cudaapisum)",
    "memops": "GPU memory time (gpumemtimesum)",
    "memops_size": "GPU memory size (gpumemsizesum)",
    "launch": "Launch latency (kernexecsum)",
    "osrt": "OS runtime (osrtsum)",
}


def _combine_summary(out: Combined, parts: Sequence[Part], sources: Sources, by_rank: bool,
                     stats: dict[str, Callable[[], pd.DataFrame | None]]) -> None:  # fmt: skip
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
        out.tables.append((SUMMARY_TITLES[name], stats[name]()))  # type: ignore[arg-type]
        if name == "memops":
            rows = gather_rows(parts, "memops", sources)
            out.tables.append((SUMMARY_TITLES["memops_size"], _size_table(rows, sources, by_rank)))  # type: ignore[arg-type]
