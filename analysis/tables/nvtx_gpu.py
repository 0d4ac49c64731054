"""GPU time per NVTX range: like `nsys stats -r nvtxkernsum` (nvtx_gpu_proj_sum), plus the phase view.

Each kernel is attributed through its CUDA launch call (joined on correlationId, each call counted once):

- thread mode, inclusive (the default; nvtxkernsum's rule): every push/pop range open on the launching
  thread around the call, so a kernel counts for a range and for each range around it.
- thread mode, exclusive: only the innermost such range, so the ranges' times add up to the kernel total.
- phase mode (the default for harness runs): the harness phase range whose span contains the call's start
  on any thread of the same process. PyTorch runs backward on autograd's own thread, so thread attribution
  leaves a main-thread `backward` range with none of its kernels. The phases are the run's (train:
  forward, backward, optimizer; generate: prefill, decode), read from the export where it is not named:
  the ranges nested directly in `step` ranges (analysis.joins.nvtx_ranges.phases_of); `--phases` names
  them.

A CUDA graph's replayed kernels carry the correlationId of the `cudaGraphLaunch` that replayed them, so
they are credited to the ranges open around that launch (a generate run's `token` range, its `decode`
phase).

Where nsys counts one kernel twice for one row (its runtime call recorded twice; a range nested in a range
of the same name), it is counted once here and a note says so.

Phase mode counts the measured steps only: `step` ranges inside the harness's `measured` range when the
export has one, else every `step` range (else everything). `phase_check` says whether the phases add up.

`harness nvtx-gpu` (`TABLE`); the crediting itself is analysis.joins.nvtx_credits'. Light at import, as
every table module: the computing functions import what they compute with.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from analysis.errors import ExportError, OptionsError, comma_list
from analysis.tables import nvtx
from analysis.tables.memops import memory_ops
from analysis.tables.table import TOP, InSummary, Option, Table, Tables, stacked
from analysis.trace.multi import Piece
from workloads.names import ALL_PHASES, STEP

if TYPE_CHECKING:
    import pandas as pd

    from analysis.joins.nvtx_credits import Mode, _Credits
    from analysis.trace.trace import Trace

UNATTRIBUTED = "unattributed"
KERNSUM_COLUMNS = [
    "NVTX Range", "Style", "PID", "TID", "NVTX Inst", "Kern Inst", "Total Time (ns)", "Avg (ns)",
    "Med (ns)", "Min (ns)", "Max (ns)", "StdDev (ns)", "Kernel Name",
]  # fmt: skip


def _with_labels(out: pd.DataFrame, table: dict[int, Any]) -> pd.DataFrame:
    labels = out["label"].map(lambda c: table.get(int(c), (None, None)))
    return out.assign(**{"NVTX Range": labels.map(lambda t: t[0]), "Style": labels.map(lambda t: t[1])}).drop(
        columns="label"
    )


KERN_STATS = {"sum": "Total Time (ns)", "size": "Kern Inst", "mean": "Avg (ns)", "median": "Med (ns)",
              "min": "Min (ns)", "max": "Max (ns)", "std": "StdDev (ns)"}  # fmt: skip


def _table(credits: _Credits, keys: Sequence[str]) -> pd.DataFrame:
    """describe() of the credits that count, one row per group, with `keys` (label, PID, TID, name_id)
    first and NVTX Inst last."""
    import numpy as np
    import pandas as pd

    from analysis.stats import round_half_up

    out = pd.DataFrame(credits.figures, columns=list(KERN_STATS.values()))
    out = out.astype({c: np.int64 for c in ("Total Time (ns)", "Kern Inst", "Min (ns)", "Max (ns)")})
    for col in ("Avg (ns)", "Med (ns)", "StdDev (ns)"):
        out[col] = round_half_up(out[col].astype(np.float64))
    group = np.arange(len(out))
    values = {"label": credits.label, "PID": credits.pid, "TID": credits.tid, "name_id": credits.name_id}
    for i, k in enumerate(keys):
        out.insert(i, k, values[k][group])
    out["NVTX Inst"] = credits.nvtx_inst[group]
    return out


def nvtx_gpu_kernels(
    trace: Trace,
    *,
    mode: Mode = "thread",
    phases: Sequence[str] | None = None,
    top: int | None = None,
    names: str = "demangled",
    exclusive: bool = False,
    by: str = "op",
) -> pd.DataFrame:
    """Kernels per NVTX range, like nvtxkernsum (KERNSUM_COLUMNS): ordered by range, PID, TID, then the
    largest total; `top` keeps the first N kernels of each range. Kernels under no range have no name.
    PyTorch's ranges count under their operator (`by`, as in analysis.tables.nvtx.nvtx_summary; "raw": as
    nvtxkernsum prints them).
    """
    from analysis.joins.nvtx_credits import _credits

    credits = _credits(trace, mode, phases, names, exclusive, by_name=True, by_thread=True, by=by)
    mode, notes = credits.mode, credits.notes
    out = _with_labels(_table(credits, ["label", "PID", "TID", "name_id"]), credits.table)
    del credits
    out.loc[out["NVTX Range"].isna(), "NVTX Inst"] = 0
    out["Kernel Name"] = out["name_id"].map(trace.strings(out["name_id"].unique()))
    out = out.sort_values(["Total Time (ns)"], ascending=False, kind="stable")
    out = out.sort_values(["NVTX Range", "PID", "TID"], kind="stable", na_position="first")
    if top is not None:
        out = out.groupby(["NVTX Range", "PID", "TID"], dropna=False, sort=False).head(top)
    out = out[KERNSUM_COLUMNS].reset_index(drop=True)
    out.attrs.update(notes=notes, mode=mode, exclusive=exclusive)
    return out


def nvtx_gpu_summary(
    trace: Trace,
    *,
    mode: Mode = "phase",
    phases: Sequence[str] | None = None,
    exclusive: bool = False,
    by: str = "op",
) -> pd.DataFrame:
    """GPU time per range: Range (Style, PID, TID in thread mode), NVTX Inst, Kern Inst, the kernel-time
    statistics and Time (%). Phase mode lists the phases in `phases` order, measured steps only. PyTorch's
    ranges count under their operator (`by`, as in analysis.tables.nvtx.nvtx_summary). `phases`: None,
    the export's own.
    """
    from analysis.joins.nvtx_credits import _credits
    from analysis.joins.nvtx_ranges import phases_of
    from analysis.stats import time_percent

    if phases is None and mode != "thread":
        phases = phases_of(trace)
    credits = _credits(trace, mode, phases, "demangled", exclusive, by_name=False, ranged_only=True, by=by)
    mode, notes = credits.mode, credits.notes
    keys = ["label"] if mode == "phase" else ["label", "PID", "TID"]
    out = _with_labels(_table(credits, keys), credits.table)
    del credits
    if mode == "phase":
        # one row per phase name (a phase's ranges may come from several threads)
        rank = {p: i for i, p in enumerate(phases or ())}
        out = out.sort_values("NVTX Range", key=lambda s: s.map(rank), kind="stable")
        keys = ["NVTX Range"]
    else:
        out = out.sort_values("Total Time (ns)", ascending=False, kind="stable")
        keys = ["NVTX Range", "Style", "PID", "TID"]
    out.insert(0, "Time (%)", time_percent(out["Total Time (ns)"]))
    cols = [*keys, "NVTX Inst", "Kern Inst"]
    stats = [c for c in out.columns if c not in cols and c not in ("Style", "PID", "TID")]
    out = out[[*cols, *stats]].rename(columns={"NVTX Range": "Range"}).reset_index(drop=True)
    out.attrs.update(notes=notes, mode=mode, exclusive=exclusive)
    return out


def phase_check(trace: Trace, phases: Sequence[str] | None = None) -> pd.DataFrame:
    """Do the phases add up? GPU time of each phase, the unattributed rest and all kernel time of the
    measured steps (Phase, Kernels, Total Time (ns), Share (%)). `phases`: None, the export's own.
    """
    import numpy as np
    import pandas as pd

    from analysis.joins.nvtx_credits import attribute
    from analysis.joins.nvtx_ranges import phases_of

    if phases is None:
        phases = phases_of(trace)
    launches, ranges, pairs = attribute(trace, "phase", phases)
    hit = pairs["range"].to_numpy()
    names = np.where(
        hit >= 0,
        ranges["name"].to_numpy(dtype=object)[np.maximum(hit, 0)] if len(ranges) else UNATTRIBUTED,
        UNATTRIBUTED,
    )
    per = pd.DataFrame({"Phase": names, "duration": launches["duration"].to_numpy()})
    g = per.groupby("Phase")["duration"]
    totals, counts = g.sum(), g.size()
    order = [*dict.fromkeys(phases), UNATTRIBUTED]  # a phase named twice is one row, not counted twice
    whole = int(per["duration"].sum())
    out = pd.DataFrame(
        {
            "Phase": [*order, "all kernels"],
            "Kernels": [int(counts.get(p, 0)) for p in order] + [len(per)],
            "Total Time (ns)": [int(totals.get(p, 0)) for p in order] + [whole],
        }
    )
    out["Share (%)"] = out["Total Time (ns)"] / whole * 100 if whole else 0.0
    out.attrs["notes"] = [*trace.notes, *launches.attrs.get("notes", [])]
    out.attrs["uncut"] = True  # its answer is its last rows: --top leaves it whole
    return out


PROJECTION_COLUMNS = [
    "Name", "Projected Start (ns)", "Projected Duration (ns)", "Orig Start (ns)", "Orig Duration (ns)",
    "Style", "PID", "TID", "NumGPUOps", "Lvl", "NumChild", "RangeId", "ParentId", "RangeStack",
]  # fmt: skip
REPLAYED = "Replayed Kernels"  # ours, after nvtx_gpu_proj_trace's columns: kernels a CUDA graph replay ran


def gpu_ops(trace: Trace) -> pd.DataFrame:
    """Kernels, memory copies and sets with their launch call (has_call, call_start, call_end,
    global_tid), like `kernel_launches` but for every kind of GPU operation; `replayed`: a kernel a CUDA
    graph replay ran (analysis.joins.runtime.replayed)."""
    import numpy as np
    import pandas as pd

    from analysis.joins.runtime import _call_key, _lookup, kernel_launches, replayed, runtime_calls
    from analysis.readers.global_ids import PROCESS_MASK as MASK

    cols = ["start", "end", "correlation_id", "global_pid"]
    kern = kernel_launches(trace, extra=("start", "end"))
    kern["replayed"] = replayed(kern)
    parts = [kern[[*cols, "has_call", "call_start", "call_end", "global_tid", "replayed"]]]
    if trace.has("memcpy") or trace.has("memset"):
        ops = memory_ops(trace)
        pid = np.zeros(len(ops), dtype=np.int64)
        if "global_pid" in ops:
            pid = ops["global_pid"].to_numpy()
        calls = runtime_calls(trace)
        found = _lookup(
            _call_key(calls["correlation_id"].to_numpy(), calls["global_tid"].to_numpy() & MASK),
            _call_key(ops["correlation_id"].to_numpy(), pid),
        )
        has = found >= 0
        pick = np.maximum(found, 0)
        parts.append(
            pd.DataFrame(
                {
                    "start": ops["start"].to_numpy(),
                    "end": ops["end"].to_numpy(),
                    "correlation_id": ops["correlation_id"].to_numpy(),
                    "global_pid": pid,
                    "has_call": has,
                    "call_start": calls["start"].to_numpy()[pick],
                    "call_end": calls["end"].to_numpy()[pick],
                    "global_tid": calls["global_tid"].to_numpy()[pick],
                    "replayed": np.zeros(len(ops), dtype=bool),
                }
            )
        )
    return pd.concat(parts, ignore_index=True)


def nvtx_gpu_projection(trace: Trace) -> pd.DataFrame:
    """Each push/pop range projected onto the GPU, like `nsys stats -r nvtxgpuproj`: the span from the first
    start to the last end of the GPU operations launched inside it (or inside a range it encloses) on its
    thread. Ranges without GPU operations are left out, and NumChild counts the children that have some.

    NumGPUOps counts launches as nsys does (distinct correlationIds): a CUDA graph replay is one GPU
    operation however many kernels it ran; those kernels are counted in REPLAYED, the last column."""
    import numpy as np
    import pandas as pd

    from analysis.joins.nvtx_credits import _containing, _require, _with_enclosing
    from analysis.joins.nvtx_ranges import all_ranges
    from analysis.joins.runtime import _call_key

    _require(trace)
    ranges = all_ranges(trace)
    ranges = ranges[ranges["style"] == "PushPop"].reset_index(drop=True)
    ops = gpu_ops(trace)
    inner, parent = _containing(ranges, ops, by_thread=True, point=False)
    op, hit = _with_enclosing(parent, np.arange(len(ops), dtype=np.int64), inner)
    keep = hit >= 0
    op = op[keep]
    launch = _call_key(ops["correlation_id"].to_numpy()[op], ops["global_pid"].to_numpy()[op])  # nsys: one op
    pairs = pd.DataFrame(
        {
            "range": hit[keep],
            "start": ops["start"].to_numpy()[op],
            "end": ops["end"].to_numpy()[op],
            "launch": launch,
            "replayed": ops["replayed"].to_numpy()[op],
        }
    )
    g = pairs.groupby("range")
    span = pd.DataFrame(
        {"first": g["start"].min(), "last": g["end"].max(), "ops": g["launch"].nunique(),
         "replayed": g["replayed"].sum()}
    )  # fmt: skip
    tree = nvtx.nvtx_trace(trace).set_index("RangeId")
    r = ranges.iloc[span.index.to_numpy()]
    ids = r["range_id"].to_numpy()
    out = pd.DataFrame(
        {
            "Name": tree.loc[ids, "Name"].to_numpy(),
            "Projected Start (ns)": span["first"].to_numpy(),
            "Projected Duration (ns)": (span["last"] - span["first"]).to_numpy(),
            "Orig Start (ns)": r["start_ns"].to_numpy(),
            "Orig Duration (ns)": r["duration_ns"].to_numpy(),
            "Style": r["style"].to_numpy(),
            "PID": r["pid"].to_numpy(),
            "TID": r["tid"].to_numpy(),
            "NumGPUOps": span["ops"].to_numpy(),
            "Lvl": tree.loc[ids, "Lvl"].to_numpy(),
            "NumChild": tree.loc[ids, "NumChild"].to_numpy(),
            "RangeId": ids,
            "ParentId": pd.array(tree.loc[ids, "ParentId"].to_numpy(), dtype="Int64"),  # ids, not 1.0
            "RangeStack": tree.loc[ids, "RangeStack"].to_numpy(),
            REPLAYED: span["replayed"].to_numpy(dtype=np.int64),
        }
    )
    # NumChild: the children that are projected themselves (nsys's `child` counts those of the projection)
    children = out["ParentId"].dropna().astype("int64").value_counts()
    out["NumChild"] = out["RangeId"].map(children).fillna(0).astype("int64")
    # by RangeId: nsys's `ORDER BY "Projected Start"` names no column of its query (they are "Projected
    # Start:ts_ns"), so SQLite orders by a constant and the rows come as its GROUP BY range id left them
    out = out.sort_values("RangeId", kind="stable").reset_index(drop=True)
    out.attrs["notes"] = list(trace.notes)
    return out[[*PROJECTION_COLUMNS, REPLAYED]]


# --- the table -------------------------------------------------------------------------------------------

HEADINGS = {
    "ranges": "GPU time per NVTX range",
    "check": "Do the phases add up? (measured steps)",
    "kernels": "kernels per NVTX range",
    "projection": "NVTX ranges projected onto the GPU",
}


def _one(trace: Trace, source: str, view: str = "summary", mode: Mode = "auto", phases: Sequence[str] = (),
         exclusive: bool = False, top: int | None = None, by: str = "op") -> Tables:  # fmt: skip
    """One export's tables; `phases` () reads the phases from the export."""
    phases = tuple(phases) or None
    if view == "projection":
        df = nvtx_gpu_projection(trace)
        df = df.head(top) if top else df
        title = f"NVTX ranges projected onto the GPU in {source}"
        return Tables([(title, df)], notes=list(df.attrs.get("notes", [])))
    if view == "kernels":
        df = nvtx_gpu_kernels(trace, mode=mode, phases=phases, top=top, exclusive=exclusive, by=by)
        title = f"kernels per NVTX range ({df.attrs['mode']} mode) in {source}"
        return Tables([(title, df)], notes=list(df.attrs.get("notes", [])))
    per_range = nvtx_gpu_summary(trace, mode=mode, phases=phases, exclusive=exclusive, by=by)
    chosen, notes = per_range.attrs["mode"], list(per_range.attrs.get("notes", []))
    per_range = per_range.head(top) if top else per_range  # the phase check below is its answer: kept whole
    out = Tables([(f"GPU time per NVTX range ({chosen} mode) in {source}", per_range)], titled=True)
    out.notes = notes
    if chosen == "phase":
        out.tables.append(("Do the phases add up? (measured steps)", phase_check(trace, phases)))
    return out


def _pieces(trace: Trace, view: str = "summary", mode: Mode = "auto", phases: Sequence[str] = (),
            exclusive: bool = False, top: int | None = None, by: str = "op") -> dict[str, Piece]:  # fmt: skip
    """The finished tables of one export (their rows are per process already), named by view."""
    tables = _one(trace, "", view, mode, phases, exclusive, top, by).tables
    names = {"projection": ["projection"], "kernels": ["kernels"]}.get(view, ["ranges", "check"])
    return {name: Piece(table=df) for name, (_, df) in zip(names, tables, strict=False)}  # type: ignore[arg-type]


def _prepare(mode: str = "auto", kernels: bool = False, exclusive: bool = False,
             phases: str = "", projection: bool = False, by: str = "op",
             raw_names: bool = False) -> dict[str, Any]:  # fmt: skip
    """`harness nvtx-gpu`'s options; an option the chosen view or mode does not use is refused, not
    passed over."""
    grouped = nvtx.grouping(by, raw_names)
    named = tuple(dict.fromkeys(comma_list("--phases", phases)))  # each phase once
    if projection:
        if kernels:
            raise OptionsError("--projection and --kernels exclude each other: pick one")
        unused = [flag for flag, given in (("--mode", mode != "auto"), ("--phases", bool(named)),
                  ("--exclusive", exclusive), ("--by shape", grouped == "shape")) if given]  # fmt: skip
        if unused:
            raise OptionsError(f"--projection lists each range as recorded: {unused[0]} does not apply")
    if mode == "thread" and named:
        raise OptionsError(
            "--phases names the phase ranges of phase mode: it does not apply with --mode thread"
        )
    if mode == "phase" and exclusive:
        raise OptionsError(
            "--exclusive is thread mode's: phase mode credits each kernel to one phase already"
        )
    return {
        "view": "projection" if projection else "kernels" if kernels else "summary",
        "mode": mode,
        "phases": named,
        "exclusive": exclusive,
        "by": grouped,
    }


NO_PHASES = (
    "the export has no harness phase ranges (`step` ranges and the phases inside them): the tables cover "
    "the whole capture"
)


def has_phase_ranges(trace: Trace) -> bool:
    """Whether the trace holds any of the harness's phase ranges (`step`, or a phase of any mode)."""
    from analysis.joins.nvtx_ranges import any_named

    if not trace.has("nvtx"):
        return False
    # the names alone, not the 1.8M ranges' nesting that all_ranges builds; the rows all_ranges keeps
    # (those with a start and an end) are only asked for where a phase name is there at all
    wanted = [*ALL_PHASES, STEP]
    if not any_named(trace, wanted):
        return False
    names = trace.frame("nvtx", ["start", "end", "name"], keep=False)["name"]
    return bool(names.isin(wanted).any())


def _in_summary(by: str, stats_format: str) -> list[Any]:
    """GPU time per range (phase mode where ranges are named after the phases and have rows, else thread
    mode) and whether the phases add up, for `harness summary` of one export."""
    from analysis.joins.nvtx_ranges import phases_of

    def per_range(trace: Trace) -> pd.DataFrame:
        # phase mode has rows only where a range is named after a phase: else not built (a whole join)
        if phases := phases_of(trace):
            out = nvtx_gpu_summary(trace, mode="phase", phases=phases, by=by)
            if len(out):
                return out
        return nvtx_gpu_summary(trace, mode="thread", by=by)

    def phases_add_up(trace: Trace) -> pd.DataFrame:
        if not has_phase_ranges(trace):
            raise ExportError(NO_PHASES)
        out = phase_check(trace)
        if out["Kernels"].iloc[:-2].sum() == 0:
            raise ExportError("no kernels in the harness's phase ranges")
        return out

    return [per_range, phases_add_up]


MODE = Option(
    "mode", "--mode",
    "phase: kernels to the harness phase open on any thread of the process; thread: to the ranges open on "
    "the launching thread (nvtxkernsum); auto: phase when the export has phases.",
    str, "auto", choices=("auto", "phase", "thread"),
)  # fmt: skip
KERNELS = Option("kernels", "--kernels", "One row per range and kernel (the nvtxkernsum table).")
EXCLUSIVE = Option(
    "exclusive", "--exclusive",
    "Thread mode: credit each kernel to the innermost range only, so ranges add up to the total (default: "
    "inclusive, to every enclosing range, like nvtxkernsum).",
)  # fmt: skip
PHASE_NAMES = Option(
    "phases", "--phases",
    "Phase range names, comma separated (default: the export's own, the ranges nested in `step` ranges: "
    "forward,backward,optimizer for training, prefill,decode for generate).",
    str, "", metavar="<list>",
)  # fmt: skip
PROJECTION = Option(
    "projection", "--projection",
    "One row per push/pop range projected onto the GPU: first start to last end of the GPU work launched "
    "inside it (like nvtxgpuproj).",
)  # fmt: skip
TOP_PER_RANGE = replace(TOP, help="Show only the first N ranges; with --kernels: top N kernels per range.")

TABLE = Table(
    "nvtx-gpu",
    summary="GPU time per NVTX range, through kernel launches (nvtxkernsum).",
    help="GPU time per NVTX range (kernels tied to ranges through their launch calls), like nvtxkernsum. "
    "Several exports: each rank's rows, one block per rank (the rows are per process already).",
    mirrors="nsys stats -r nvtxkernsum (--projection: nvtxgpuproj)",
    one=_one,
    pieces=_pieces,
    combine=stacked,
    options=(MODE, KERNELS, EXCLUSIVE, PHASE_NAMES, PROJECTION, TOP_PER_RANGE, nvtx.BY, nvtx.RAW_NAMES),
    prepare=_prepare,
    order=30,
    title="GPU time per NVTX range",
    deciding=("Range", "Total Time (ns)"),
    headings=HEADINGS,
    served_from_cache=True,
    takes_top=True,
    in_summary=InSummary(
        (("GPU time per NVTX range", "nvtxkernsum"), ("Do the phases add up?", None)), build=_in_summary
    ),  # over several exports: left to `harness nvtx-gpu`
    example="harness nvtx-gpu report.sqlite --kernels --top 3",
)
