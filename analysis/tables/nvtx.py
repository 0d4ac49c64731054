"""NVTX range tables: the summary like `nsys stats -r nvtxsum`, and range instances like `nvtxpptrace`."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pandas as pd

from analysis.errors import ExportError
from analysis.intervals import levels, parents, sort_ranges
from analysis.joins.runtime import pid_of, tid_of
from analysis.nvtx_names import grouped_categories, grouping_notes
from analysis.stats import durations_by_group, figures, figures_table, order_like_nsys, time_percent
from analysis.trace.frames import BLOCK_ROWS
from analysis.trace.trace import Trace

NVTXSUM_COLUMNS = [
    "Time (%)", "Total Time (ns)", "Instances", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)",
    "StdDev (ns)", "Style", "Range",
]  # fmt: skip
PPTRACE_COLUMNS = [
    "Start (ns)", "End (ns)", "Duration (ns)", "DurChild (ns)", "DurNonChild (ns)", "Name", "PID", "TID",
    "Lvl", "NumChild", "RangeId", "ParentId", "RangeStack", "NameTree",
]  # fmt: skip
RANGE_COLUMNS = [
    "start_ns", "end_ns", "duration_ns", "name", "domain", "payload", "tid", "pid", "level", "parent",
    "style", "range_id", "global_tid",
]  # fmt: skip


def all_ranges(trace: Trace, *, keep: bool = True, columns: Sequence[str] | None = None) -> pd.DataFrame:
    """Every NVTX range instance (RANGE_COLUMNS, or only `columns`), in start order; push/pop ranges
    nested per thread. keep=False: the trace does not hold on to the NVTX frame for this (unless it held
    it before).

    `parent` is the parent's range_id (the export's NVTX_EVENTS rowid, what nsys calls RangeId); start/end
    ranges have level 0 and no parent. Asking for fewer columns builds fewer: attribution over 1.8M
    ranges reads six of them.
    """
    wanted = list(RANGE_COLUMNS if columns is None else columns)
    if unknown := [c for c in wanted if c not in RANGE_COLUMNS]:
        raise KeyError(f"no range column {unknown[0]!r}: {', '.join(RANGE_COLUMNS)}")
    raw_cols = ["start", "end", "global_tid", "pushpop"]
    raw_cols += [c for c in ("name", "domain", "payload") if c in wanted]
    if {"range_id", "parent"} & set(wanted):
        raw_cols.append("range_id")
    raw = trace.frame("nvtx", raw_cols, keep=keep)
    src = {c: raw[c] for c in raw.columns}  # each let go once the last column built from it is built
    del raw
    start, end = src.pop("start").to_numpy(), src.pop("end").to_numpy()
    gtid = src.pop("global_tid").to_numpy()
    pushpop = src.pop("pushpop").to_numpy(dtype=bool)
    n = len(start)
    # start/end ranges get a group of their own each, so none nests
    group = gtid.copy()
    alone = np.flatnonzero(~pushpop)
    group[alone] = -1 - alone
    del alone
    order = sort_ranges(group, start, end)
    parent_sorted = parents(group, start, end, order)
    del group
    small = np.int32 if n < 2**31 else np.int64  # positions: 1.8M ranges are 7 MB a column, not 14
    parent = np.full(n, -1, dtype=small)
    has = parent_sorted >= 0
    parent[order[has]] = order[parent_sorted[has]]
    level = np.empty(n, dtype=np.int32)
    level[order] = levels(parent_sorted)
    del order, parent_sorted, has
    final = np.lexsort((level, start))
    out: dict[str, object] = {}
    if "level" in wanted:
        out["level"] = level[final].astype(np.int64)
    del level
    if "parent" in wanted:
        ids = src["range_id"].to_numpy()
        parent_id = pd.array(ids[np.maximum(parent, 0)], dtype="Int64")
        parent_id[parent < 0] = pd.NA
        out["parent"] = parent_id.take(final)
        del parent_id
    del parent
    if "range_id" in wanted:
        out["range_id"] = src["range_id"].to_numpy()[final]
    src.pop("range_id", None)
    if "duration_ns" in wanted:
        out["duration_ns"] = (end - start)[final]
    for col, values in (("start_ns", start), ("end_ns", end)):
        if col in wanted:
            out[col] = values[final]
    del start, end
    for col in ("name", "domain", "payload"):
        if col in wanted:
            out[col] = src.pop(col).array.take(final)
    if "tid" in wanted:
        out["tid"] = tid_of(gtid[final])
    if "pid" in wanted:
        out["pid"] = pid_of(gtid[final])
    if "global_tid" in wanted:
        out["global_tid"] = gtid[final]
    del gtid
    if "style" in wanted:
        out["style"] = pd.Categorical.from_codes(pushpop[final].astype(np.int8) ^ 1, ["PushPop", "StartEnd"])
    return pd.DataFrame({c: out[c] for c in wanted}, copy=False)


def any_named(trace: Trace, names: Sequence[str]) -> bool:
    """Whether any NVTX range (right or not) has one of `names`: the name column alone, not the ranges."""
    raw = pd.Series(trace._columns("nvtx", ["name"], keep=False)["name"], copy=False)
    return bool(raw.isin(list(names)).any())


def nvtx_ranges(trace: Trace, names: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per range instance (RANGE_COLUMNS), optionally only those named in `names`."""
    trace.require("nvtx", "NVTX data")
    out = all_ranges(trace)
    if names is not None:
        out = out[out["name"].isin(list(names))].reset_index(drop=True)
    # plain columns for callers: categories are an internal economy for big exports
    return out.astype({"name": object, "domain": object, "style": object})


def tagged(ranges: pd.DataFrame) -> pd.Series:
    """The name nsys prints: DOMAIN:NAME for ranges in a named domain."""
    name = ranges["name"].astype(object)
    domain = ranges["domain"].astype(object)
    named = domain.notna()
    if not named.any():
        return name
    out = name.copy()
    out[named] = domain[named] + ":" + name[named]
    return out


def grouped_tags(ranges: pd.DataFrame, by: str = "op") -> tuple[pd.Series, list[str]]:
    """The printed name of each range (`tagged`) grouped as `by` says (analysis.nvtx_names: "op" by
    operator, "shape" by operator and input sizes, "raw" as recorded), and the note saying so where
    PyTorch's per-call fields are in the names."""
    cat, fields = grouped_categories(tagged(ranges), by)
    return pd.Series(cat, index=ranges.index, copy=False), grouping_notes(fields, by)


def nvtx_summary(trace: Trace, by: str = "op", *, block_rows: int | None = None) -> pd.DataFrame:
    """Time per range name and style, like nvtxsum (NVTXSUM_COLUMNS), largest first. PyTorch's ranges
    (`aten::to, seq = 46176, op_id = 993781`) count under their operator by default; `by="raw"` keeps
    every name as recorded, which is what nsys stats prints (the parity form).

    Only the five columns it needs are read (not the ranges' nesting), a block of `block_rows` ranges at
    a time (`Trace.blocks`; 7.1M ranges: five whole columns were ~200 MB), grouped by (name, domain,
    style) as integers, so that what stays is each group's durations: the names are made once per group,
    not once per range (1.8M ranges: ~470 MB at the peak when every range's printed name was a Python
    string)."""
    trace.require("nvtx", "NVTX data")
    names, domains = _Codes(), _Codes()
    read = [0]

    def blocks() -> Iterator[dict[str, np.ndarray]]:
        for block in trace.blocks(
            "nvtx", ["start", "end", "pushpop", "name", "domain"], block_rows or BLOCK_ROWS
        ):
            read[0] += len(block["start"])
            yield {
                "name": names.of(block["name"]),
                "domain": domains.of(block["domain"]),
                "style": (~np.asarray(block["pushpop"], dtype=bool)).astype(np.int8),  # 1: StartEnd
                "duration": block["end"] - block["start"],
            }

    per_key = dict(durations_by_group(blocks(), ["name", "domain", "style"]))
    if not read[0]:
        raise ExportError(f"no NVTX ranges in {trace.path}: only marks or domain events")
    labels = []
    for n, d, _ in per_key:  # the name nsys prints (`tagged`): DOMAIN:NAME in a named domain
        text = None if n < 0 else names.texts[n]
        if text is not None and d >= 0:
            text = f"{domains.texts[d]}:{text}"
        labels.append(text)
    grouped, fields = grouped_categories(pd.Categorical(labels), by)
    per_group: dict[tuple[object, str], list[np.ndarray]] = {}
    for key, label in zip(list(per_key), grouped.astype(object), strict=True):
        per_group.setdefault((label, ("PushPop", "StartEnd")[int(key[2])]), []).append(per_key.pop(key))
    table = []
    for (label, sty), pieces in per_group.items():
        values = pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
        pieces.clear()
        table.append([*figures(values), sty, label])
        del values
    out = order_like_nsys(figures_table(table, ["Style", "Range"]), "Total Time (ns)", ["Range", "Style"])
    out["Time (%)"] = time_percent(out["Total Time (ns)"])
    out = out[NVTXSUM_COLUMNS]
    out.attrs["notes"] = [*grouping_notes(fields, by), *trace.notes]
    return out


class _Codes:
    """Names (or domains) as one integer each across blocks, in order of first appearance; -1: none."""

    def __init__(self) -> None:
        self.code: dict[str, int] = {}
        self.texts: list[str] = []

    def of(self, values: object) -> np.ndarray:
        """The code of each value of a block (a Categorical from the cache, else an object array)."""
        local, uniques = pd.factorize(
            values if isinstance(values, pd.Categorical) else np.asarray(values, dtype=object)
        )
        table = np.empty(len(uniques) + 1, dtype=np.int64)
        table[-1] = -1  # local code -1 (a missing value) reads the last entry
        for i, text in enumerate(str(u) for u in uniques):
            if text not in self.code:
                self.code[text] = len(self.texts)
                self.texts.append(text)
            table[i] = self.code[text]
        return table[local]


def nvtx_pushpop_summary(trace: Trace, by: str = "op") -> pd.DataFrame:
    """Like nvtxppsum: push/pop ranges only, no Style column (`by` as in nvtx_summary)."""
    out = nvtx_summary(trace, by)
    out = out[out["Style"] == "PushPop"].drop(columns="Style").reset_index(drop=True)
    out["Time (%)"] = time_percent(out["Total Time (ns)"])
    return out


def nvtx_trace(trace: Trace) -> pd.DataFrame:
    """Push/pop range instances with nesting, like nvtxpptrace (PPTRACE_COLUMNS), in start order."""
    trace.require("nvtx", "NVTX data")
    r = all_ranges(trace)
    r = r[r["style"] == "PushPop"].reset_index(drop=True)
    r["tag"] = tagged(r)
    parent = r["parent"].fillna(-1).astype(np.int64)
    child_time = r.loc[parent >= 0].groupby(parent[parent >= 0])["duration_ns"].sum()
    child_count = parent[parent >= 0].value_counts()
    stack: dict[int, str] = {}
    tree: dict[int, str] = {}
    for rid, par, tag in sorted(zip(r["range_id"], parent, r["tag"], strict=True), key=_by_level(r)):
        stack[rid] = f"{stack.get(par, '')}:{rid}"
        tree[rid] = "--" * stack[rid].count(":", 1) + str(tag)
    dur_child = r["range_id"].map(child_time).fillna(0).astype(np.int64)
    return pd.DataFrame(
        {
            "Start (ns)": r["start_ns"],
            "End (ns)": r["end_ns"],
            "Duration (ns)": r["duration_ns"],
            "DurChild (ns)": dur_child,
            "DurNonChild (ns)": r["duration_ns"] - dur_child,
            "Name": r["tag"],
            "PID": r["pid"],
            "TID": r["tid"],
            "Lvl": r["level"],
            "NumChild": r["range_id"].map(child_count).fillna(0).astype(np.int64),
            "RangeId": r["range_id"],
            "ParentId": r["parent"],
            "RangeStack": r["range_id"].map(stack),
            "NameTree": r["range_id"].map(tree),
        }
    )


def _by_level(r: pd.DataFrame):
    level = dict(zip(r["range_id"], r["level"], strict=True))
    return lambda item: level[item[0]]
