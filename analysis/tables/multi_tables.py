"""The rows one export contributes to a table read over several exports, and the summaries of those rows
(the registry, analysis.tables.tables, says which table uses which). See analysis.trace.multi for the rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from analysis.errors import ExportError
from analysis.joins.runtime import kernel_rows, runtime_calls
from analysis.stats import figures, round_half_up
from analysis.tables.kernels import block_text, grid_text, kernel_grouping
from analysis.tables.memops import SIZE_COLUMNS, memory_ops
from analysis.tables.nvtx import all_ranges, grouped_tags
from analysis.tables.nvtx_gpu import kernels_in_ranges
from analysis.tables.stats_format import DEFAULT as DEFAULT_FORMAT
from analysis.trace.multi import Part, Sources
from analysis.trace.multi_combine import gather_rows, stat_table
from analysis.trace.trace import Trace

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
    trace: Trace,
    *,
    names: str = "demangled",
    by: str | None = None,
    range_name: str | None = None,
    stats_format: str = DEFAULT_FORMAT,
) -> pd.DataFrame:
    """One row per kernel: Name (and GridXYZ, BlockXYZ by shape; by default as `stats_format` groups
    kernels) as categories, duration."""
    trace.require("kernels", "CUDA kernel data")
    by = by or kernel_grouping(trace, stats_format)
    if range_name is None:
        kern = kernel_rows(trace, ("name_id", "grid", "block", "duration"), names=names)
    else:
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


def nvtx_rows(trace: Trace, by: str = "op") -> pd.DataFrame:
    """One row per NVTX range: Range (DOMAIN:NAME, grouped as `by` says: analysis.nvtx_names), Style,
    duration. The line saying how names are grouped goes to the trace's notes."""
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


def api_rows(trace: Trace) -> pd.DataFrame:
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


def memop_rows(trace: Trace, stats_format: str = DEFAULT_FORMAT) -> pd.DataFrame:
    ops = memory_ops(trace, stats_format=stats_format)
    return pd.DataFrame(
        {"Operation": _cat(ops["Operation"]), "duration": ops["duration"].to_numpy(), "bytes": ops["bytes"]}
    )


# --- combined tables ------------------------------------------------------------------------------------


@dataclass
class Combined:
    """Titled tables over several exports, with their notes and the tables no export had data for."""

    tables: list[tuple[str, pd.DataFrame]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    sources: Sources | None = None


def size_table(parts: Sequence[Part], sources: Sources, by_rank: bool) -> pd.DataFrame | None:
    """gpumemsizesum over several exports (per export with `by_rank`)."""
    rows = gather_rows(parts, "memops", sources, ["Operation"], by_rank)
    if rows is None:
        return None
    table = []
    for key in list(rows.sources):
        total, count, mean, median, low, high, std = figures(rows.joined("bytes", key))
        table.append([*key, count, total, total, mean, median, low, high, std])
    keys = ["_src", "Operation"] if by_rank else ["Operation"]
    out = pd.DataFrame(
        table, columns=[*keys, "Count", "bytes", "Total", "Avg", "Med", "Min", "Max", "StdDev"]
    )
    out["Count"] = out["Count"].astype(np.int64)
    for col in ("Total", "Avg", "Med", "Min", "Max", "StdDev"):
        out[f"{col} (MB)"] = round_half_up(out[col].astype(np.float64) / 1e6, 3)
    out = out.sort_values("Operation", kind="stable").sort_values("bytes", ascending=False, kind="stable")
    if by_rank:
        out = out.sort_values("_src", kind="stable")
        out.insert(0, sources.column, np.asarray(sources.labels, dtype=object)[out["_src"].to_numpy()])
        return out[[sources.column, *SIZE_COLUMNS]].reset_index(drop=True)
    return out[SIZE_COLUMNS].reset_index(drop=True)


def summarised(
    name: str, parts: Sequence[Part], sources: Sources, by_rank: bool, **spec: Any
) -> pd.DataFrame | None:
    """The rows of piece `name` from every part summarised as nsys stats summarises one export's
    (analysis.trace.multi_combine.stat_table): `spec` names the key columns, the output columns and the
    count's name."""
    rows = gather_rows(parts, name, sources, spec["keys"], by_rank)
    if rows is None:
        return None
    return stat_table(rows, sources=sources, by_rank=by_rank, **spec)


def kernel_columns(by: str) -> list[str]:
    return [*KERNEL_STATS, *(["GridXYZ", "BlockXYZ"] if by == "shape" else []), "Name"]
