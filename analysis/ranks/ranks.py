"""Ranks side by side: phase times, GPU busy time, communication kernels and the straggler (`harness ranks`).

The tables are functions of one long frame of phase instances, PHASE_COLUMNS = rank, phase, step,
duration_ns, so that they work the same on exports (`phase_rows` of each rank's trace) and on the results
store's per-rank step records:

    phase_table(phases)      per rank and phase: steps, mean per step, total, min, max
    imbalance_table(phases)  per phase: mean over ranks, fastest and slowest rank, median, slowest / median
    straggler_table(phases)  per rank: time computing and time waiting in collectives per step, the
                             straggler and what it costs the others
    gpu_table(gpu, phases)   per rank: GPU busy time, NCCL kernels and time, communication share of a step

A rank's time for a phase is its mean per step. The slowest rank of a phase is not its straggler: a
collective (the gradient all-reduce) lasts until the last rank arrives, so the slowest rank inside it is
the one that waited longest, a victim. The straggler is the rank that arrives last: the most time
computing before the collective and the least waiting inside it (compute − wait largest). What it costs the
others is their wait beyond its own. It is named when it computes at least STRAGGLER_AT times the median
rank's compute, or costs the others at least STRAGGLER_AT − 1 of the median step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.errors import ExportError
from analysis.hta.gpu_events import merge
from analysis.joins.nvtx_ranges import all_ranges, measured_steps, step_phases
from analysis.readers.global_ids import pid_of
from analysis.stats import round_half_up
from analysis.trace.multi import Piece, check_name_ranks, label_sources
from analysis.trace.multi_run import raise_errors, read_part, run_tasks
from analysis.trace.opening import require_events
from analysis.trace.trace import Trace
from analysis.views.timeline import step_index
from workloads.names import ALL_PHASES, ALLREDUCE, COMM_PHASES, MEASURED, STEP

PHASE_ORDER = (*ALL_PHASES, STEP)
PHASE_COLUMNS = ["rank", "phase", "step", "duration_ns"]
COMM_PREFIX = "nccl"  # communication kernels: names starting with it, any case
STRAGGLER_AT = 1.05  # compute at or above this times the median's names the straggler
CAPTURE = "capture"  # the phase of a rank's whole capture, where there are no phase ranges
MS = 1e6


# --- one trace ------------------------------------------------------------------------------------------


def phase_rows(trace: Trace, phases: Sequence[str] | None = None, *, with_pid: bool = False) -> pd.DataFrame:
    """The phase ranges (and `step` ranges, as phase "step") of the measured steps: phase, step,
    duration_ns, start_ns, end_ns on the trace's clock (and pid, the process that pushed the range, with
    `with_pid`). Steps are numbered by the harness's payload (else their order); without `step` ranges,
    each phase's instances are numbered in order (per process). `phases`: None, the harness's and the
    export's own (analysis.joins.nvtx_ranges.step_phases: a program's names too)."""
    cols = ["phase", "step", "duration_ns", "start_ns", "end_ns", *(["pid"] if with_pid else [])]
    if not trace.has("nvtx"):
        return pd.DataFrame({c: pd.Series(dtype=object if c == "phase" else np.int64) for c in cols})
    if phases is None:
        phases = [*ALL_PHASES, *(p for p in step_phases(trace) if p not in ALL_PHASES)]
    ranges = all_ranges(trace).astype({"name": object})
    ph = ranges[ranges["name"].isin(list(phases))].reset_index(drop=True)
    all_steps = ranges[ranges["name"] == STEP].reset_index(drop=True)
    if all_steps.empty:
        step = ph.groupby(["pid", "name"], sort=False).cumcount().to_numpy()
        out = ph.assign(step=step)
    else:
        numbers = step_index(all_steps, all_steps).to_numpy()
        marked = pd.concat(
            [all_steps.assign(step=numbers), ranges[ranges["name"] == MEASURED]], ignore_index=True
        )
        measured = measured_steps(marked).sort_values("start_ns", kind="stable")
        hit = np.full(len(ph), -1, dtype=np.int64)
        for pid, steps in measured.groupby("pid", sort=False):
            mine = np.flatnonzero(ph["pid"].to_numpy() == pid)
            starts, ends = steps["start_ns"].to_numpy(), steps["end_ns"].to_numpy()
            at = np.searchsorted(starts, ph["start_ns"].to_numpy()[mine], side="right") - 1
            ok = (at >= 0) & (ph["start_ns"].to_numpy()[mine] <= ends[np.maximum(at, 0)])
            hit[mine[ok]] = steps["step"].to_numpy()[at[ok]]
        out = pd.concat(
            [ph.assign(step=hit)[hit >= 0], measured.drop(columns="step").assign(step=measured["step"])],
            ignore_index=True,
        )
    out = out.rename(columns={"name": "phase"})[cols]
    out = out.astype({"step": np.int64, "duration_ns": np.int64}).reset_index(drop=True)
    return out.astype({"pid": np.int64}) if with_pid else out


def union_ns(start: np.ndarray, end: np.ndarray) -> int:
    """Length of the union of the intervals [start, end)."""
    lo, hi = merge(start, end)
    return int((hi - lo).sum())


NOT_TRACED = "CUDA not traced (no kernel data: a CPU run, or profiled without --trace=cuda)"


def gpu_activity(trace: Trace, pid: int | None = None) -> dict[str, Any]:
    """Kernels, GPU busy ns (union of kernel intervals over all devices and streams), communication
    kernels (names starting with `nccl`, any case) and their summed duration; `pid`: only the kernels
    that process launched. No kernel data: None for each (not 0: nothing was measured), and `note` says
    the export did not trace CUDA."""
    out: dict[str, Any] = {"kernels": 0, "gpu_busy_ns": 0, "comm_kernels": 0, "comm_ns": 0, "note": ""}
    if not trace.has("kernels"):
        return {**dict.fromkeys(out, None), "note": NOT_TRACED}
    kern = trace.frame("kernels", ["start", "end", "name_id", "global_pid"])
    if pid is not None:
        kern = kern[pid_of(kern["global_pid"].to_numpy()) == pid]
    names = trace.strings(kern["name_id"].unique())
    comm_ids = [i for i, n in names.items() if n.lower().startswith(COMM_PREFIX)]
    comm = kern["name_id"].isin(comm_ids).to_numpy()
    dur = (kern["end"] - kern["start"]).to_numpy()
    out.update(
        kernels=len(kern),
        gpu_busy_ns=union_ns(kern["start"].to_numpy(), kern["end"].to_numpy()),
        comm_kernels=int(comm.sum()),
        comm_ns=int(dur[comm].sum()),
    )
    return out


def capture_rows(trace: Trace) -> pd.DataFrame:
    """Without phase ranges: one phase CAPTURE, the trace's first kernel start to its last kernel end (no
    row without kernels), as phase_rows's columns."""
    cols = ["phase", "step", "duration_ns", "start_ns", "end_ns"]
    if not trace.has("kernels") or not trace.count("kernels"):
        return pd.DataFrame({c: pd.Series(dtype=object if c == "phase" else np.int64) for c in cols})
    k = trace.frame("kernels", ["start", "end"])
    first, last = int(k["start"].min()), int(k["end"].max())
    return pd.DataFrame([{"phase": CAPTURE, "step": 0, "duration_ns": last - first, "start_ns": first,
                          "end_ns": last}], columns=cols)  # fmt: skip


def export_pieces(trace: Trace) -> dict[str, Any]:
    """A worker's share of `harness ranks`: the phase rows (the whole capture without phase ranges) and the
    GPU activity of one trace."""
    require_events(trace)  # a memory timeline: named, not "no phase ranges and no kernels"
    gpu = gpu_activity(trace)
    phases = phase_rows(trace)
    if phases.empty:
        phases = capture_rows(trace)
    return {"phases": Piece(table=phases), "gpu": Piece(table=pd.DataFrame([gpu]))}


def ranks_task(path: str, cache: bool = True) -> Any:
    """The task a worker runs for `harness ranks` (a Part of analysis.trace.multi)."""
    return read_part(path, export_pieces, cache)


# --- tables over ranks ----------------------------------------------------------------------------------


def _ordered(phases: Sequence[str]) -> list[str]:
    rank = {p: i for i, p in enumerate(PHASE_ORDER)}
    return sorted(set(phases), key=lambda p: (rank.get(p, len(rank)), p))


def _ns(value: float) -> float:
    """A time in ns from a mean, median or difference: rounded half away from zero to one decimal (NaN
    stays NaN), as nsys's own averages are."""
    return float(round_half_up(np.array([value], dtype=np.float64))[0])


def per_rank_means(phases: pd.DataFrame) -> pd.DataFrame:
    """rank, phase, steps, mean_ns (per step), total_ns, min_ns, max_ns."""
    g = phases.groupby(["rank", "phase"], sort=False)["duration_ns"]
    return g.agg(steps="size", mean_ns="mean", total_ns="sum", min_ns="min", max_ns="max").reset_index()


def with_step_rows(phases: pd.DataFrame) -> pd.DataFrame:
    """In-process timers have no step range: add one `step` row per rank and step, the sum of its phases."""
    steps = phases.groupby(["rank", "step"], sort=True)["duration_ns"].sum().reset_index()
    return pd.concat([phases[PHASE_COLUMNS], steps.assign(phase=STEP)[PHASE_COLUMNS]], ignore_index=True)


def per_rank(phases: pd.DataFrame) -> pd.DataFrame:
    """Rank × phase, for a terminal: each rank's mean per step and phase (ns), phases in step order, and
    the whole step (the sum of the rank's phases per step)."""
    if phases.empty:
        return pd.DataFrame(columns=["rank"])
    df = with_step_rows(phases[phases["phase"] != STEP])
    table = df.pivot_table(index="rank", columns="phase", values="duration_ns", aggfunc="mean")
    table = table[_ordered(table.columns)]
    table.columns = [f"{c} (ns)" for c in table.columns]
    table.columns.name = None
    return table.reset_index()


def communication_share(phases: pd.DataFrame) -> float:
    """The communication phases' share of the mean step over ranks, 0 … 1 (NaN without steps)."""
    df = phases[phases["phase"] != STEP]
    if df.empty:
        return float("nan")
    per_step = df.groupby(["rank", "step"])["duration_ns"]
    step = per_step.sum().mean()
    comm = df[df["phase"].isin(COMM_PHASES)].groupby(["rank", "step"])["duration_ns"].sum()
    comm = comm.reindex(per_step.size().index, fill_value=0)
    return float(comm.mean() / step) if step else float("nan")


def phase_table(phases: pd.DataFrame) -> pd.DataFrame:
    """Per rank and phase (phases in step order): Rank, Phase, Steps, Mean (ns) (rounded half away from
    zero to one decimal, as nsys's Avg), Total (ns), Min (ns), Max (ns). `phases` has PHASE_COLUMNS (one row
    per phase instance). A `step` row stays where there is one rank only: with several, the step is in the
    imbalance table."""
    if phases["rank"].nunique() != 1:
        phases = phases[phases["phase"] != STEP]
    m = per_rank_means(phases)
    order = {p: i for i, p in enumerate(_ordered(m["phase"]))}
    m = m.sort_values(["rank", "phase"], key=lambda s: s.map(order) if s.name == "phase" else s)
    return pd.DataFrame(
        {
            "Rank": m["rank"].to_numpy(),
            "Phase": m["phase"].to_numpy(),
            "Steps": m["steps"].to_numpy(),
            "Mean (ns)": round_half_up(m["mean_ns"]),
            "Total (ns)": m["total_ns"].to_numpy(dtype=np.int64),
            "Min (ns)": m["min_ns"].to_numpy(dtype=np.int64),
            "Max (ns)": m["max_ns"].to_numpy(dtype=np.int64),
        }
    )


IMBALANCE_COLUMNS = ["Phase", "Ranks", "Mean (ns)", "Fastest Rank", "Fastest (ns)", "Median (ns)",
                     "Slowest Rank", "Slowest (ns)", "Spread (ns)", "Imbalance"]  # fmt: skip


def one_rank_note(phases: pd.DataFrame) -> list[str]:
    """Why there is no imbalance and no straggler where `phases` (PHASE_COLUMNS) hold one rank; else []."""
    ranks = phases["rank"].unique()
    said = (
        "imbalance and the straggler need two or more ranks, and there is one (rank {}): its own times only"
    )
    return [said.format(int(ranks[0]))] if len(ranks) == 1 else []


def imbalance_table(phases: pd.DataFrame) -> pd.DataFrame:
    """Per phase, over the ranks' mean time per step: Phase, Ranks, Mean (ns), Fastest Rank, Fastest (ns),
    Median (ns), Slowest Rank, Slowest (ns), Spread (ns) (slowest - fastest), Imbalance (slowest /
    median); times rounded half away from zero to one decimal; no row for fewer than two ranks (nothing to
    compare: one_rank_note). A phase that one rank of several measured has no Spread or Imbalance (NaN).
    The slowest rank is not the straggler: in a collective it waited longest; straggler_table names the
    rank that arrived last.

    `phases`: PHASE_COLUMNS, one row per phase instance, from exports (phase_rows) or the results store.
    Ties go to the lowest rank.
    """
    m = per_rank_means(phases).sort_values(["phase", "rank"], kind="stable")
    if m["rank"].nunique() < 2:
        return pd.DataFrame(columns=IMBALANCE_COLUMNS)
    rows = []
    for phase in _ordered(m["phase"]):
        p = m[m["phase"] == phase]
        mean = p["mean_ns"].to_numpy()
        ranks = p["rank"].to_numpy()
        slow, fast = int(np.argmax(mean)), int(np.argmin(mean))
        median = float(np.median(mean))
        ratio = mean[slow] / median if median > 0 else float("nan")
        # a phase one rank of several measured is compared with nothing: no spread, no balance to claim
        alone = len(p) == 1
        rows.append(
            {
                "Phase": phase,
                "Ranks": len(p),
                "Mean (ns)": _ns(mean.mean()),
                "Fastest Rank": ranks[fast],
                "Fastest (ns)": _ns(mean[fast]),
                "Median (ns)": _ns(median),
                "Slowest Rank": ranks[slow],
                "Slowest (ns)": _ns(mean[slow]),
                "Spread (ns)": float("nan") if alone else _ns(mean[slow] - mean[fast]),
                "Imbalance": float("nan") if alone else round(ratio, 3),
            }
        )
    out = pd.DataFrame(rows)
    out.attrs["deciding"] = ["Phase", "Slowest Rank", "Imbalance"]
    out.attrs["priority"] = ["Median (ns)", "Fastest Rank"]
    return out


STRAGGLER_COLUMNS = [
    "Rank",
    "Steps",
    "Compute (ns)",
    "Wait (ns)",
    "Compute + Wait (ns)",
    "Straggler",
    "Costs Others (ns)",
]


def compute_and_wait(phases: pd.DataFrame) -> pd.DataFrame:
    """Per rank, the mean per step of its time computing (every phase but the collectives) and of its time
    in collectives (COMM_PHASES; NaN where there are none): rank, steps, compute_ns, wait_ns."""
    df = phases[~phases["phase"].isin([STEP, CAPTURE])]
    comm = df["phase"].isin(COMM_PHASES).to_numpy()
    dur = df["duration_ns"].to_numpy(dtype=float)
    per_step = (
        df[["rank", "step"]]
        .assign(compute_ns=np.where(comm, 0.0, dur), wait_ns=np.where(comm, dur, 0.0))
        .groupby(["rank", "step"], sort=True)[["compute_ns", "wait_ns"]]
        .sum()
    )
    g = per_step.groupby(level="rank")
    out = g.mean().assign(steps=g.size()).reset_index()
    if not comm.any():
        out["wait_ns"] = np.nan
    return out[["rank", "steps", "compute_ns", "wait_ns"]]


def straggler_table(phases: pd.DataFrame, threshold: float = STRAGGLER_AT) -> pd.DataFrame:
    """Per rank: Rank, Steps, Compute (ns) and Wait (ns) (in collectives) per step, Compute + Wait (ns) (the
    phases' sum, named so: the step's own time, gaps between phases in it, is imbalance_table's `step` row),
    Straggler (`rank R` on the straggler's row, `-` elsewhere) and Costs Others (ns) (on its row: the other
    ranks' mean wait per step beyond its own); times rounded half away from zero to one decimal. Empty for
    fewer than two ranks or without phases but whole captures. `phases`: PHASE_COLUMNS (step rows are left
    out)."""
    m = compute_and_wait(phases).sort_values("rank", kind="stable").reset_index(drop=True)
    if len(m) < 2:
        return pd.DataFrame(columns=STRAGGLER_COLUMNS)
    compute, wait = m["compute_ns"].to_numpy(), m["wait_ns"].to_numpy()
    waits = not np.isnan(wait).all()
    late = compute - wait if waits else compute  # arrives last: computes longest, waits least
    s = int(np.argmax(late))  # ties: the lowest rank
    others = np.arange(len(m)) != s
    cost = float((wait[others] - wait[s]).mean()) if waits else float("nan")
    step = np.median(compute + (wait if waits else 0))
    median = float(np.median(compute))
    named = compute[s] >= threshold * median or (waits and cost >= (threshold - 1) * step)
    straggler = int(m["rank"].iloc[s]) if named else None
    out = pd.DataFrame(
        {
            "Rank": m["rank"].to_numpy(),
            "Steps": m["steps"].to_numpy(),
            "Compute (ns)": round_half_up(compute),
            "Wait (ns)": round_half_up(wait),
            "Compute + Wait (ns)": round_half_up(compute + np.nan_to_num(wait)),
            "Straggler": [f"rank {r}" if r == straggler else "-" for r in m["rank"]],
            "Costs Others (ns)": [_ns(cost) if r == straggler else np.nan for r in m["rank"]],
        }
    )
    out.attrs["deciding"] = ["Rank", "Compute (ns)", "Wait (ns)", "Straggler", "Costs Others (ns)"]
    return out


def straggler_note(table: pd.DataFrame) -> str:
    """One line on straggler_table: who arrives last and what it costs the others, or that no rank does."""
    if table.empty:
        return ""
    named = table[table["Straggler"] != "-"]
    if named.empty:
        return f"no straggler: every rank computes within {STRAGGLER_AT - 1:.0%} of the median rank"
    row = named.iloc[0]
    others = table[table["Rank"] != row["Rank"]]
    more = (row["Compute (ns)"] - float(np.median(others["Compute (ns)"]))) / MS
    # named by what it costs the others, a rank can compute less than they do and still arrive last
    than = f"{more:,.3f} ms more" if more >= 0 else f"{-more:,.3f} ms less"
    line = f"straggler: rank {row['Rank']} computes {than} per step than the others"
    cost = row["Costs Others (ns)"]
    if np.isnan(cost):
        return line + " (no collective phases: what it costs them is not measured)"
    return (
        line + f" {'and' if more >= 0 else 'yet'} arrives last at the all-reduce: the others wait "
        f"{cost / MS:,.3f} ms per step there beyond its own wait"
    )


def gpu_table(gpu: pd.DataFrame, phases: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per rank: Rank, Kernels, GPU Busy (ns), NCCL Kernels, NCCL Time (ns), NCCL Share (%) (of GPU busy;
    empty when the GPU was never busy; every cell but Rank empty where CUDA was not traced), and with
    phases the all-reduce share of a step, Comm Share (%) (all-reduce total / step total)."""
    g = gpu.sort_values("rank")
    # None where CUDA was not traced: the cells stay empty, never 0
    busy = pd.to_numeric(g["gpu_busy_ns"], errors="coerce").to_numpy(dtype=float)
    comm_ns = pd.to_numeric(g["comm_ns"], errors="coerce").to_numpy(dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(busy > 0, comm_ns * 100 / busy, np.nan)  # never busy: no share, not 0.0
    out = pd.DataFrame(
        {
            "Rank": g["rank"].to_numpy(),
            "Kernels": pd.array(g["kernels"], dtype="Int64"),
            "GPU Busy (ns)": pd.array(g["gpu_busy_ns"], dtype="Int64"),
            "NCCL Kernels": pd.array(g["comm_kernels"], dtype="Int64"),
            "NCCL Time (ns)": pd.array(g["comm_ns"], dtype="Int64"),
            "NCCL Share (%)": share.round(1),
        }
    )
    if phases is not None and len(phases):
        totals = phases.groupby(["rank", "phase"])["duration_ns"].sum().unstack(fill_value=0)
        if ALLREDUCE in totals and STEP in totals:
            share = (totals[ALLREDUCE] * 100 / totals[STEP].where(totals[STEP] > 0)).round(1)
            out["Comm Share (%)"] = out["Rank"].map(share).to_numpy()
    return out


# --- from exports --------------------------------------------------------------------------------------


@dataclass
class RanksReport:
    """`harness ranks` over exports: the long phase rows (PHASE_COLUMNS + start_ns/end_ns on the common
    clock: ns since the earliest session start), per-rank GPU activity, the three tables and notes."""

    phases: pd.DataFrame
    gpu: pd.DataFrame
    phase_times: pd.DataFrame
    imbalance: pd.DataFrame
    per_rank: pd.DataFrame
    labels: dict[int, str] = field(default_factory=dict)  # rank -> file name (or process, in one capture)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # exports whose capture failed its health checks
    stragglers: pd.DataFrame = field(default_factory=pd.DataFrame)  # straggler_table
    # one capture of several ranks (analysis.ranks.capture_ranks): each rank's collectives, and per rank
    collectives: pd.DataFrame | None = None
    around: pd.DataFrame | None = None

    @classmethod
    def of(
        cls, phases: pd.DataFrame, gpu: pd.DataFrame, labels: dict[int, str], notes: list[str]
    ) -> RanksReport:
        """The tables of the phase rows and the per-rank GPU activity, the straggler's note after `notes`."""
        stragglers = straggler_table(phases)
        said = straggler_note(stragglers)
        notes = one_rank_note(phases) + notes
        return cls(
            phases=phases,
            gpu=gpu,
            phase_times=phase_table(phases),
            imbalance=imbalance_table(phases),
            per_rank=gpu_table(gpu, phases),
            labels=labels,
            notes=notes + ([said] if said else []),
            stragglers=stragglers,
        )


def ranks_report(
    paths: Sequence[Path],
    *,
    names: Sequence[Path] | None = None,
    jobs: int | None = None,
    dask: str | None = None,
    cache: bool = True,
) -> RanksReport:
    """Read each export in a worker (analysis.trace.multi) and build the tables. Ranks come from the file
    names (`names`, the paths the user gave, when `paths` are exports made from them), else the traces,
    else the order given (with a note). One export of several ranks: analysis.ranks.capture_ranks."""
    given = list(names) if names is not None else list(paths)
    check_name_ranks(given)
    parts = run_tasks(ranks_task, paths, cache, jobs=jobs, dask=dask)
    for name, part in zip(given, parts, strict=True):
        part.path = str(name)
    raise_errors(parts)
    sources = label_sources(given, parts)
    notes = list(sources.notes)
    if sources.column != "Rank":
        notes = [n for n in notes if not n.startswith("no rank in")]
        notes.insert(0, "no rank in some file names (rank<R>) or traces: ranks are the inputs' order")
        for i, s in enumerate(sources.items):
            s.rank = i
    by_path = {p.path: p for p in parts}
    starts = {s.rank: by_path[str(s.path)].info.get("session_start_ns") for s in sources.items}
    known = [v for v in starts.values() if v is not None]
    origin = min(known) if known else 0
    if len(known) < len(starts):
        lacking = [sources.items[i].path.name for i, v in enumerate(starts.values()) if v is None]
        notes.append(f"no session start time in {', '.join(lacking)}: its timeline starts at the common 0")
    frames, gpus = [], []
    for s in sources.items:
        part = by_path[str(s.path)]
        ph = part.pieces["phases"].table
        offset = (starts[s.rank] or origin) - origin
        frames.append(ph.assign(rank=s.rank, start_ns=ph["start_ns"] + offset, end_ns=ph["end_ns"] + offset))
        gpu = part.pieces["gpu"].table.assign(rank=s.rank)
        if gpu["note"].iloc[0]:
            notes.append(f"rank {s.rank}: {gpu['note'].iloc[0]}")
        gpus.append(gpu)
        notes += [f"rank {s.rank}: {n}" for n in part.notes if f"rank {s.rank}: {n}" not in notes]
    phases = pd.concat(frames, ignore_index=True)[[*PHASE_COLUMNS, "start_ns", "end_ns"]]
    gpu = pd.concat(gpus, ignore_index=True)
    if phases.empty:
        raise ExportError(
            "no phase ranges (forward, backward, optimizer, allreduce, prefill, decode) and no kernels in "
            + ", ".join(p.name for p in given)
        )
    whole = sorted({int(r) for r in phases.loc[phases["phase"] == CAPTURE, "rank"]})
    if whole:
        which = "any export" if len(whole) == len(sources.items) else ", ".join(f"rank {r}" for r in whole)
        notes.insert(0, f"no harness phase ranges in {which}: the whole capture, first kernel to last")
    labels = {int(s.rank): s.path.name for s in sources.items}  # type: ignore[arg-type]
    return RanksReport.of(phases, gpu, labels, notes)
