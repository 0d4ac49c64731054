"""GPU memory operations, like `nsys stats -r gpumemtimesum` and `-r gpumemsizesum`: `harness memops`.

Light at import, as every table module (the registry reads `TABLE`): the computing functions import numpy,
pandas and what they compute with.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from analysis.tables.stats_format import DEFAULT as DEFAULT_FORMAT
from analysis.tables.stats_format import STATS_FORMAT, producer
from analysis.tables.stats_format import copy_label as _label
from analysis.tables.table import MEMOP_STATS, InSummary, Table, Tables
from analysis.trace.multi import Combined, Part, Piece, Sources, categories

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from analysis.trace.trace import Trace

MEMSET_LABEL = "[CUDA memset]"
TIME_COLUMNS = [
    "Time (%)", "Total Time (ns)", "Count", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)", "StdDev (ns)",
    "Operation",
]  # fmt: skip
SIZE_COLUMNS = [
    "Total (MB)", "Count", "Avg (MB)", "Med (MB)", "Min (MB)", "Max (MB)", "StdDev (MB)", "Operation",
]  # fmt: skip


def copy_label(kind: int, trace: Trace | None = None, stats_format: str = DEFAULT_FORMAT) -> str:
    """How `nsys stats` of `stats_format` names a copy kind (analysis.tables.stats_format): [CUDA memcpy
    HtoD] in
    2022.4, [CUDA memcpy Host-to-Device] from 2023.3."""
    return _label(kind, stats_format, producer(trace) if trace is not None else None)


MEMOP_COLUMNS = ["bytes", "start", "end", "stream_id", "correlation_id", "global_pid"]


def memory_ops(
    trace: Trace, window: tuple[int, int] | None = None, stats_format: str = DEFAULT_FORMAT
) -> pd.DataFrame:
    """Every memcpy and memset (those starting inside `window`): Operation, bytes, start, end, duration,
    stream_id, correlation_id, global_pid."""
    import pandas as pd

    if trace.count("memcpy") + trace.count("memset") == 0:
        trace.require("memcpy", "GPU memory operations")
    copies = trace.frame("memcpy", ["copy_kind", *MEMOP_COLUMNS]) if trace.has("memcpy") else None
    sets = trace.frame("memset", MEMOP_COLUMNS) if trace.has("memset") else None
    parts = []
    if copies is not None:
        labels = {k: copy_label(k, trace, stats_format) for k in copies["copy_kind"].unique()}
        parts.append(copies.assign(Operation=copies["copy_kind"].map(labels)).drop(columns="copy_kind"))
    if sets is not None:
        parts.append(sets.assign(Operation=MEMSET_LABEL))
    ops = pd.concat(parts, ignore_index=True)
    ops["duration"] = ops["end"] - ops["start"]
    if window is not None:
        ops = ops[(ops["start"] >= window[0]) & (ops["start"] <= window[1])].reset_index(drop=True)
    return ops


def _by_kind(trace: Trace, value: str, stats_format: str) -> tuple[pd.DataFrame, dict[int, str]]:
    """The rows of `memory_ops` as (Operation code, `value`: duration or bytes), and code -> Operation: an
    integer per row, not a string, and only the columns the value needs (a frame of every column with a
    string per row was the peak of `summary` at 1M memory operations)."""
    import numpy as np
    import pandas as pd

    if trace.count("memcpy") + trace.count("memset") == 0:
        trace.require("memcpy", "GPU memory operations")
    read = ["start", "end"] if value == "duration" else ["bytes"]
    codes, values, labels = [], [], {}
    if trace.has("memcpy"):
        copies = trace.frame("memcpy", ["copy_kind", *read])
        kind = copies["copy_kind"].to_numpy()
        labels = {int(k): copy_label(k, trace, stats_format) for k in pd.unique(kind)}
        codes.append(kind)
        values.append(_value(copies, value))
        del copies
    if trace.has("memset"):
        sets = trace.frame("memset", read)
        code = max(labels, default=-1) + 1  # a code no copy kind has
        labels[code] = MEMSET_LABEL
        codes.append(np.full(len(sets), code, dtype=np.int64))
        values.append(_value(sets, value))
        del sets
    ops = pd.DataFrame({"Operation": np.concatenate(codes), value: np.concatenate(values)}, copy=False)
    return ops, labels


def _value(ops: pd.DataFrame, value: str) -> np.ndarray:
    return (ops["end"] - ops["start"]).to_numpy() if value == "duration" else ops["bytes"].to_numpy()


def memops_time(trace: Trace, stats_format: str = DEFAULT_FORMAT) -> pd.DataFrame:
    """GPU time per memory operation kind (TIME_COLUMNS), largest first; copies named as `nsys stats` of
    `stats_format` names them."""
    import numpy as np

    from analysis.stats import describe, order_like_nsys, time_percent

    ops, labels = _by_kind(trace, "duration", stats_format)
    out = describe(ops, ["Operation"], count_name="Count")
    del ops
    out["Operation"] = out["Operation"].map(labels)
    out = order_like_nsys(out, "Total Time (ns)", ["Operation"])
    out["Time (%)"] = time_percent(out["Total Time (ns)"])
    out = out[TIME_COLUMNS].astype({"Total Time (ns)": np.int64, "Count": np.int64})
    out.attrs["notes"] = list(trace.notes)
    return out


def memops_size(trace: Trace, stats_format: str = DEFAULT_FORMAT) -> pd.DataFrame:
    """Bytes moved per memory operation kind, in MB (10^6 bytes) to 3 decimals, largest first."""
    import numpy as np
    import pandas as pd

    from analysis.readers import NULL
    from analysis.stats import order_like_nsys, round_half_up

    ops, labels = _by_kind(trace, "bytes", stats_format)
    bad = (ops["bytes"] == NULL) | (ops["bytes"] < 0)
    if bad.any():  # a damaged export: no byte count (the NULL sentinel would be -9.2e12 MB)
        trace.note(_no_bytes_note(int(bad.sum()), len(ops)))
        ops = ops[~bad]
    # float64 sums: exact to 9 PB, and a huge count in a damaged export cannot wrap int64 round
    g = ops.assign(bytes=ops["bytes"].astype(np.float64)).groupby("Operation", sort=False)["bytes"]
    stats = g.agg(["sum", "size", "mean", "median", "min", "max", "std"]).reset_index()
    stats["std"] = stats["std"].fillna(0.0)
    out = pd.DataFrame(
        {
            "Operation": stats["Operation"].map(labels),
            "Count": stats["size"].astype(np.int64),
            "bytes": stats["sum"],
        }
    )
    for col, key in (("Total", "sum"), ("Avg", "mean"), ("Med", "median"), ("Min", "min"), ("Max", "max"),
                     ("StdDev", "std")):  # fmt: skip
        out[f"{col} (MB)"] = round_half_up(stats[key] / 1e6, 3)
    out = order_like_nsys(out, "bytes", ["Operation"])  # by the bytes, not their rounded MB
    out = out[SIZE_COLUMNS]
    out.attrs["notes"] = list(trace.notes)
    return out


# --- several exports: what each contributes, how they combine ---------------------------------------------


def _no_bytes_note(bad: int, ops: int) -> str:
    return f"left out {bad:,} of {ops:,} memory operations with no byte count from the sizes"


def memop_rows(trace: Trace, stats_format: str = DEFAULT_FORMAT) -> pd.DataFrame:
    """One row per memory operation, for a table over several exports: Operation, duration, bytes (NaN
    where the export has no byte count that can be right: `size_table` leaves those out, as `memops_size`)."""
    import numpy as np
    import pandas as pd

    from analysis.readers import NULL

    ops = memory_ops(trace, stats_format=stats_format)
    size = ops["bytes"].to_numpy()
    bad = (size == NULL) | (size < 0)
    if bad.any():
        trace.note(_no_bytes_note(int(bad.sum()), len(size)))
        size = np.where(bad, np.nan, size.astype(np.float64))
    return pd.DataFrame(
        {
            "Operation": categories(ops["Operation"]),
            "duration": ops["duration"].to_numpy(),
            "bytes": size,
        }
    )


def size_table(parts: Sequence[Part], sources: Sources, by_rank: bool) -> pd.DataFrame | None:
    """gpumemsizesum over several exports (per export with `by_rank`)."""
    import numpy as np
    import pandas as pd

    from analysis.stats import figures, round_half_up
    from analysis.trace.multi_combine import gather_rows

    rows = gather_rows(parts, "memops", sources, ["Operation"], by_rank)
    if rows is None:
        return None
    table = []
    for key in list(rows.sources):
        size = rows.joined("bytes", key)
        if size.dtype.kind == "f":  # NaN: no byte count (memop_rows)
            size = size[~np.isnan(size)]
        if not len(size):
            continue
        total, count, mean, median, low, high, std = figures(size)
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


SPEC: dict[str, Any] = {"keys": ["Operation"], "columns": [*MEMOP_STATS, "Operation"], "count_name": "Count"}


def _combine(out: Combined, parts: Sequence[Part], sources: Sources, by_rank: bool,
             options: dict[str, Any]) -> None:  # fmt: skip
    from analysis.trace.multi_combine import summarised

    parts, note = _named_one_way(parts, sources, options.get("stats_format", DEFAULT_FORMAT))
    by_time = summarised("memops", parts, sources, by_rank, **SPEC)
    if by_time is not None and note:  # in the table's notes: the summary keeps those of its tables
        by_time.attrs["notes"] = [*by_time.attrs.get("notes", []), note]
    out.tables.append(("by time", by_time))  # type: ignore[arg-type]
    out.tables.append(("by size", size_table(parts, sources, by_rank)))  # type: ignore[arg-type]


def _named_one_way(parts: Sequence[Part], sources: Sources, stats_format: str) -> tuple[list[Part], str]:
    """The parts with their copies named one way, and a note where they were not: in each export's own
    format (the nsys that wrote it) an export of 2022 names a copy `[CUDA memcpy HtoD]` and one of 2024
    `[CUDA memcpy Host-to-Device]`, which would be two rows of one kind. The later names win."""
    import pandas as pd

    from analysis.tables.stats_format import long_copy_names, names_copies_long, producer_of
    from analysis.trace.multi import Grouped

    with_rows = [p for p in parts if p.pieces.get("memops") is not None]
    short = [p.path for p in with_rows if not names_copies_long(stats_format, producer_of(p.info))]
    if not short or len(short) == len(with_rows):
        return list(parts), ""
    rename = long_copy_names()
    out = []
    for part in parts:
        rows = part.pieces["memops"].rows if part.path in short else None
        if isinstance(rows, Grouped):
            at = rows.keys.index("Operation")
            groups = [(*g[:at], rename.get(g[at], g[at]), *g[at + 1 :]) for g in rows.groups]
            rows = Grouped(rows.keys, groups, rows.values)
        elif isinstance(rows, pd.DataFrame):
            ops = rows["Operation"].astype(object).map(lambda o: rename.get(o, o))
            rows = rows.assign(Operation=categories(ops.to_numpy()))
        if rows is not None:
            part = replace(part, pieces={**part.pieces, "memops": Piece(rows=rows)})
        out.append(part)
    label = {str(s.path): s.label for s in sources.items}
    return out, (
        f"copies named as nsys 2023.3 and later name them ([CUDA memcpy Host-to-Device]), also those of "
        f"{', '.join(label[p] for p in short)}, whose nsys names them [CUDA memcpy HtoD]: "
        "--stats-format names them one way for every export"
    )


# --- the table -------------------------------------------------------------------------------------------


def _one(trace: Trace, source: str, stats_format: str = DEFAULT_FORMAT) -> Tables:
    by_time = memops_time(trace, stats_format)
    by_size = memops_size(trace, stats_format)
    tables = [("GPU memory operations by time", by_time), ("by size (MB)", by_size)]
    # the sizes' notes: the trace's notes once both tables are made (those of the sizes come last)
    return Tables(tables, notes=list(by_size.attrs.get("notes", [])), titled=True)  # type: ignore[arg-type]


def _pieces(trace: Trace, stats_format: str = DEFAULT_FORMAT) -> dict[str, Piece]:
    return {"memops": Piece(rows=memop_rows(trace, stats_format))}


TABLE = Table(
    "memops",
    summary="GPU memory copies and sets by time and by size (gpumem*sum).",
    help="GPU memory copies and sets by time and by size, like cuda_gpu_mem_time_sum and _size_sum (2022.4: "
    "gpumemtimesum, gpumemsizesum).",
    mirrors="nsys stats -r gpumemtimesum, gpumemsizesum",
    one=_one,
    pieces=_pieces,
    combine=_combine,
    options=(STATS_FORMAT,),
    order=50,
    deciding=("Operation", "Total Time (ns)", "Total (MB)", "Count"),
    headings={"by time": "GPU memory operations by time", "by size": "by size (MB)"},
    in_summary=InSummary(
        (("GPU memory time", "gpumemtimesum"), ("GPU memory size", "gpumemsizesum")),
        build=lambda by, stats_format: [
            lambda trace: memops_time(trace, stats_format),
            lambda trace: memops_size(trace, stats_format),
        ],
        options=lambda by, stats_format: {"stats_format": stats_format},
    ),
    example="harness memops report.sqlite --stats-format 2023.4",
)
