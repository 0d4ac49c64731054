"""The CUDA API summary, like `nsys stats -r cudaapisum` (cuda_api_sum), each call counted once (`harness
api`).

The calls are read a block at a time (`Trace.blocks`) and only each function's durations stay (4 bytes a
call where they fit, for the exact median): 6M runtime calls held as five columns were ~600 MB at the
peak. Calls recorded twice under one correlationId are found as the blocks come (`stats.Repeats`); an
export that has any is summarized from the whole table (`runtime_calls`), which drops the copies.

Light at import, as every table module (the registry reads `TABLE`): the computing functions import numpy,
pandas and what they compute with.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from analysis.tables.table import CALL_STATS, TOP, InSummary, Table, one_frame, one_piece, summarising
from analysis.trace.multi import named

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from analysis.trace.trace import Trace

APISUM_COLUMNS = [
    "Time (%)", "Total Time (ns)", "Num Calls", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)",
    "StdDev (ns)", "Name",
]  # fmt: skip
BLOCK_COLUMNS = ["correlation_id", "start", "end", "name_id"]  # RUNTIME_COLUMNS but the thread


def summarize_calls(calls: pd.DataFrame, names: dict[int, str]) -> pd.DataFrame:
    """Time per function name (APISUM_COLUMNS), largest first, ties by string id like nsys; calls grouped
    by an integer code per name (analysis.stats.name_codes)."""
    import pandas as pd

    from analysis.stats import describe, name_codes

    code, labels, first_id = name_codes(calls["name_id"], names, missing="?")
    data = pd.DataFrame({"code": code, "duration": calls["duration"].to_numpy()})
    out = describe(data, ["code"], count_name="Num Calls")
    out["Name"] = labels[out["code"].to_numpy()]
    out["name_id"] = first_id.reindex(out["code"]).to_numpy()
    return _ordered(out)


def _ordered(out: pd.DataFrame) -> pd.DataFrame:
    import numpy as np

    from analysis.stats import order_like_nsys, time_percent

    out = order_like_nsys(out, "Total Time (ns)", ["name_id"])
    out["Time (%)"] = time_percent(out["Total Time (ns)"])
    return out[APISUM_COLUMNS].astype({"Total Time (ns)": np.int64, "Num Calls": np.int64})


class _Repeated(Exception):
    """A correlationId came twice: the blocks cannot tell the copies apart."""


def _durations(trace: Trace, block_rows: int | None) -> Iterator[dict[str, np.ndarray]]:
    """(name_id, duration) of the calls a block at a time; raises _Repeated at a correlationId seen
    before (or ids too far apart to be checked so)."""
    from analysis.readers import NULL
    from analysis.stats import Repeats

    repeats = Repeats()
    extra = {} if block_rows is None else {"rows": block_rows}
    for block in trace.blocks("runtime", BLOCK_COLUMNS, **extra):
        if repeats.seen(block["correlation_id"], NULL) is not False:
            raise _Repeated
        yield {"name_id": block["name_id"], "duration": block["end"] - block["start"]}


def _by_blocks(trace: Trace, block_rows: int | None = None) -> pd.DataFrame:
    import numpy as np

    from analysis.joins.runtime import plain_name
    from analysis.stats import durations_by_group, figures, figures_table

    per_id = dict(durations_by_group(_durations(trace, block_rows), ["name_id"]))  # (name_id,) -> durations
    ids = sorted(k[0] for k in per_id)
    strings = trace.strings(ids)
    by_name: dict[str, list[int]] = {}
    for i in ids:  # several ids with one plain name (name and name_vNNNN) are one function
        by_name.setdefault(plain_name(strings[i]) if i in strings else "?", []).append(i)
    rows = []
    for name, group in by_name.items():
        pieces = [per_id.pop((i,)) for i in group]
        values = pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
        del pieces
        rows.append([*figures(values), name, group[0]])
        del values
    return _ordered(figures_table(rows, ["Name", "name_id"], count_name="Num Calls"))


def cuda_api_summary(trace: Trace, *, block_rows: int | None = None) -> pd.DataFrame:
    """Time in each CUDA runtime/driver function, like cudaapisum, but a call recorded twice under one
    correlationId (name and name_vNNNN) counts once; `attrs["notes"]` says when that happened.
    block_rows: rows per block read (tests check that the size of the blocks changes nothing)."""
    from analysis.joins.runtime import runtime_calls

    trace.require("runtime", "CUDA API calls")
    try:
        out = _by_blocks(trace, block_rows)
        out.attrs["notes"] = list(trace.notes)
        return out
    except _Repeated:
        pass
    calls = runtime_calls(trace)
    out = summarize_calls(calls.assign(duration=calls["end"] - calls["start"]), calls.attrs["names"])
    out.attrs["notes"] = [*trace.notes, *calls.attrs["notes"]]
    return out


# --- several exports, and the table ------------------------------------------------------------------------


def api_rows(trace: Trace) -> pd.DataFrame:
    """One row per CUDA API call, for a table over several exports: Name, duration."""
    import pandas as pd

    from analysis.joins.runtime import runtime_calls

    trace.require("runtime", "CUDA API calls")
    calls = runtime_calls(trace)
    trace.notes += [n for n in calls.attrs["notes"] if n not in trace.notes]
    names = named(calls["name_id"], calls.attrs["names"])
    return pd.DataFrame({"Name": names, "duration": (calls["end"] - calls["start"]).to_numpy()})


# over several exports: each function summarised over all of them
SPEC: dict[str, Any] = {"keys": ["Name"], "columns": [*CALL_STATS, "Name"], "count_name": "Num Calls"}


def calls_table(
    name: str,
    what: str,
    compute: Callable[[Trace], pd.DataFrame],
    rows: Callable[[Trace], pd.DataFrame],
    *,
    summary: str,
    help: str,
    mirrors: str,
    order: int,
    in_summary: tuple[str, str],
    example: str,
) -> Table:
    """A table of time in calls, one row per function in APISUM_COLUMNS, as nsys's call summaries (this
    module's CUDA API calls, osrt's OS runtime calls): `compute(trace)` for one export, titled "WHAT in
    SOURCE"; over several, the calls' `rows(trace)` (Name, duration) summarised together (SPEC); --top;
    its part of `harness summary`: `in_summary`, (what, report) as `InSummary` takes them."""
    return Table(
        name,
        summary=summary,
        help=help,
        mirrors=mirrors,
        one=one_frame(what, compute),
        pieces=one_piece(name, rows=rows),
        combine=summarising(name, **SPEC),
        options=(TOP,),
        order=order,
        title=what,
        deciding=("Name", "Total Time (ns)", "Time (%)", "Num Calls"),
        in_summary=InSummary(
            (in_summary,), build=lambda by, stats_format: [compute], options=lambda by, stats_format: {}
        ),
        example=example,
    )


TABLE = calls_table(
    "api",
    "CUDA API calls",
    cuda_api_summary,
    api_rows,
    summary="Time in CUDA API calls, each counted once (cudaapisum).",
    help="Time in CUDA API calls, like `nsys stats -r cudaapisum` (each call counted once).",
    mirrors="nsys stats -r cudaapisum",
    order=40,
    in_summary=("CUDA API", "cudaapisum"),
    example="harness api report.sqlite --top 10",
)
