"""NVTX ranges: `harness nvtx`, the summary like `nsys stats -r nvtxsum`, and range instances like
`nvtxpptrace` (--trace). The ranges themselves (nesting, printed names) are analysis.joins.nvtx_ranges'.

Light at import, as every table module (the registry reads `TABLE`): the computing functions import numpy,
pandas and what they compute with.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from analysis.errors import ExportError, OptionsError
from analysis.tables.table import KERNEL_STATS, TOP, InSummary, Option, Table, Tables, summarising
from analysis.trace.multi import Combined, Part, Piece, Sources, categories
from workloads.names import counted

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from analysis.trace.trace import Trace

NVTXSUM_COLUMNS = [
    "Time (%)", "Total Time (ns)", "Instances", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)",
    "StdDev (ns)", "Style", "Range",
]  # fmt: skip
PPTRACE_COLUMNS = [
    "Start (ns)", "End (ns)", "Duration (ns)", "DurChild (ns)", "DurNonChild (ns)", "Name", "PID", "TID",
    "Lvl", "NumChild", "RangeId", "ParentId", "RangeStack", "NameTree",
]  # fmt: skip


def nvtx_ranges(trace: Trace, names: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per range instance (analysis.joins.nvtx_ranges.RANGE_COLUMNS), optionally only those named
    in `names`."""
    from analysis.joins.nvtx_ranges import all_ranges

    trace.require("nvtx", "NVTX data")
    out = all_ranges(trace)
    if names is not None:
        out = out[out["name"].isin(list(names))].reset_index(drop=True)
    # plain columns for callers: categories are an internal economy for big exports
    return out.astype({"name": object, "domain": object, "style": object})


def nvtx_summary(trace: Trace, by: str = "op", *, block_rows: int | None = None) -> pd.DataFrame:
    """Time per range name and style, like nvtxsum (NVTXSUM_COLUMNS), largest first. PyTorch's ranges
    (`aten::to, seq = 46176, op_id = 993781`) count under their operator by default; `by="raw"` keeps
    every name as recorded, which is what nsys stats prints (the parity form).

    Only the five columns it needs are read (not the ranges' nesting), a block of `block_rows` ranges at
    a time (`Trace.blocks`; 7.1M ranges: five whole columns were ~200 MB), grouped by (name, domain,
    style) as integers, so that what stays is each group's durations: the names are made once per group,
    not once per range (1.8M ranges: ~470 MB at the peak when every range's printed name was a Python
    string)."""
    import numpy as np
    import pandas as pd

    from analysis.joins.nvtx_ranges import note_open_ranges
    from analysis.nvtx_names import grouped_categories, grouping_notes
    from analysis.stats import durations_by_group, figures, figures_table, order_like_nsys, time_percent
    from analysis.trace.frames import BLOCK_ROWS

    trace.require("nvtx", "NVTX data")
    note_open_ranges(trace)
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
    labels, unnamed = [], 0
    for key in per_key:  # the name nsys prints (`tagged`): DOMAIN:NAME in a named domain
        n, d, _ = key
        text = None if n < 0 else names.texts[n]
        if text is not None and d >= 0:
            text = f"{domains.texts[d]}:{text}"
        labels.append(text)
        unnamed += 0 if text else len(per_key[key])
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
    out.attrs["notes"] = [*grouping_notes(fields, by), *_unnamed_note(unnamed), *trace.notes]
    return out


def _unnamed_note(unnamed: int) -> list[str]:
    """The line that says why a row has no Range: ranges recorded with neither a text nor a registered
    string (nsys stats prints them so too)."""
    if not unnamed:
        return []
    return [f"{counted(unnamed, 'range')} recorded without a name (no text, no registered string): the row "
            "whose Range is empty"]  # fmt: skip


class _Codes:
    """Names (or domains) as one integer each across blocks, in order of first appearance; -1: none."""

    def __init__(self) -> None:
        self.code: dict[str, int] = {}
        self.texts: list[str] = []

    def of(self, values: object) -> np.ndarray:
        """The code of each value of a block (a Categorical from the cache, else an object array)."""
        import numpy as np
        import pandas as pd

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
    from analysis.stats import time_percent

    out = nvtx_summary(trace, by)
    out = out[out["Style"] == "PushPop"].drop(columns="Style").reset_index(drop=True)
    out["Time (%)"] = time_percent(out["Total Time (ns)"])
    return out


def nvtx_trace(trace: Trace) -> pd.DataFrame:
    """Push/pop range instances with nesting, like nvtxpptrace (PPTRACE_COLUMNS), in start order."""
    import numpy as np
    import pandas as pd

    from analysis.joins.nvtx_ranges import all_ranges, note_open_ranges, tagged

    trace.require("nvtx", "NVTX data")
    note_open_ranges(trace)
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
    out = pd.DataFrame(
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
    out.attrs["notes"] = list(trace.notes)
    return out


def _by_level(r: pd.DataFrame) -> Callable[[tuple[Any, ...]], Any]:
    level = dict(zip(r["range_id"], r["level"], strict=True))
    return lambda item: level[item[0]]


def nvtx_rows(trace: Trace, by: str = "op") -> pd.DataFrame:
    """One row per NVTX range, for a table over several exports: Range (DOMAIN:NAME, grouped as `by`
    says: analysis.nvtx_names), Style, duration. The line saying how names are grouped goes to the trace's
    notes."""
    import pandas as pd

    from analysis.joins.nvtx_ranges import all_ranges, grouped_tags, note_open_ranges

    trace.require("nvtx", "NVTX data")
    note_open_ranges(trace)
    ranges = all_ranges(trace)
    if ranges.empty:
        raise ExportError(f"no NVTX ranges in {trace.path}: only marks or domain events")
    names, said = grouped_tags(ranges, by)
    for line in said:
        trace.note(line)
    return pd.DataFrame(
        {
            "Range": categories(names.astype(object)),
            "Style": categories(ranges["style"]),
            "duration": ranges["duration_ns"],
        }
    )


# --- the table -------------------------------------------------------------------------------------------

# over several exports: each range name and style summarised over all of them
SPEC: dict[str, Any] = {"keys": ["Range", "Style"], "columns": [*KERNEL_STATS, "Style", "Range"]}


def _one(trace: Trace, source: str, trace_rows: bool = False, by: str = "op") -> Tables:
    df = nvtx_trace(trace) if trace_rows else nvtx_summary(trace, by=by)
    return Tables([(f"NVTX ranges in {source}", df)], notes=list(df.attrs.get("notes", [])))


def _pieces(trace: Trace, trace_rows: bool = False, by: str = "op") -> dict[str, Piece]:
    if trace_rows:
        return {"nvtx": Piece(table=nvtx_trace(trace))}
    return {"nvtx": Piece(rows=nvtx_rows(trace, by))}


def _combine(out: Combined, parts: Sequence[Part], sources: Sources, by_rank: bool,
             options: dict[str, Any]) -> None:  # fmt: skip
    if options.get("trace_rows"):
        from analysis.trace.multi_combine import stack_tables

        out.tables.append(("nvtx", stack_tables(parts, "nvtx", sources)))  # type: ignore[arg-type]
    else:
        summarising("nvtx", **SPEC)(out, parts, sources, by_rank, options)


def grouping(by: str = "op", raw_names: bool = False) -> str:
    """How NVTX names are grouped (analysis.nvtx_names), as --by and --raw-names say; both (--by shape
    with --raw-names) is refused, not one of them passed over."""
    if raw_names and by == "shape":
        raise OptionsError("--by shape and --raw-names exclude each other: pick one")
    return "raw" if raw_names else by


def _prepare(trace: bool = False, by: str = "op", raw_names: bool = False) -> dict[str, Any]:
    """`harness nvtx`'s options: --trace lists each range as recorded, so a grouping asked for with it is
    refused, not passed over."""
    grouped = grouping(by, raw_names)
    if trace and grouped == "shape":
        raise OptionsError("--trace lists each range by its name as recorded: --by shape does not apply")
    return {"trace_rows": trace, "by": grouped}


# the options of every table that groups PyTorch's NVTX names, turned into `by` by `grouping`
BY = Option(
    "by", "--by",
    "PyTorch's NVTX ranges (`aten::to, seq = N, op_id = N`): op groups them by operator (as "
    "torch.profiler's key_averages()), shape by operator and input sizes.",
    str, "op", choices=("op", "shape"),
)  # fmt: skip
RAW_NAMES = Option(
    "raw_names", "--raw-names", "NVTX names as recorded, one row each (what nsys stats prints)."
)

TABLE = Table(
    "nvtx",
    summary="Time per NVTX range (nvtxsum).",
    help="Time per NVTX range, like `nsys stats -r nvtxsum` (with --raw-names: the same rows). PyTorch's "
    "ranges are grouped by operator.",
    mirrors="nsys stats -r nvtxsum (with --trace: nvtxpptrace)",
    one=_one,
    pieces=_pieces,
    combine=_combine,
    options=(
        Option("trace", "--trace", "One row per push/pop range instance (like nvtxpptrace)."),
        BY,
        RAW_NAMES,
        TOP,
    ),
    prepare=_prepare,
    order=20,
    title="NVTX ranges",
    deciding=("Range", "Total Time (ns)", "Time (%)", "Instances"),
    in_summary=InSummary(
        (("NVTX ranges", "nvtxsum"),),
        build=lambda by, stats_format: [lambda trace: nvtx_summary(trace, by)],
        options=lambda by, stats_format: {"by": by},
    ),
    example="harness nvtx report.sqlite --raw-names",
)
