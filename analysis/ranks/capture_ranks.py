"""One capture, several ranks: `harness ranks report.sqlite` on one nsys run around a whole torchrun job.

Most users profile a multi-GPU job with one `nsys profile torchrun ...`, so one export holds every rank:
one process per rank, each driving its own GPU (the torchrun_2gpu fixture: PIDs 144 and 145 on devices
0 and 1). Here each process that launched kernels is a rank, numbered by its device (the lowest it
launched on; then by PID). nsys records the environment of the launcher only (TARGET_INFO_SYSTEM_ENV's
DeviceEnvironment, the same for every process), never a process's own RANK, so the device is what
numbers them.

The tables are those of `harness ranks DIR` over per-rank exports (analysis.ranks.ranks), built from the
processes' share of the one trace: phase times where the capture has the harness's phase ranges, else one
phase `capture` per rank (its first kernel start to its last kernel end); GPU busy time and NCCL kernels
per rank (gpu_activity of the process's kernels); and what happens around each collective
(collective_rows):

- the k-th communication kernel (name starting with `nccl`, any case) of every rank is one collective:
  NCCL's kernels of one communicator run in the same order on every rank;
- compute before it: the rank's GPU busy time (union of its other kernels) since its previous collective
  ended (for the first: since its first kernel);
- wait: how long the rank's collective kernel ran before the last rank's started (latest start − own
  start, at most its duration): a collective cannot move data before every rank has arrived;
- the last rank to arrive is the straggler of that collective; the rank that arrives last most often is
  the straggler of the capture.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis import tables
from analysis.errors import ExportError
from analysis.hta.gpu_events import merge
from analysis.intervals import clipped_sums
from analysis.ranks.ranks import CAPTURE, COMM_PREFIX, PHASE_COLUMNS, RanksReport, gpu_activity, phase_rows
from analysis.readers.global_ids import pid_of
from analysis.trace.frames import FRAMES
from analysis.trace.multi import Part, Source, Sources
from analysis.trace.opening import open_trace
from analysis.trace.trace import Trace
from analysis.trace.view import TraceView
from analysis.views.timeline import time_zero, zero_words

COLLECTIVE_COLUMNS = [
    "Collective", "Rank", "Kernel", "Start (ns)", "Compute Before (ns)", "Wait (ns)", "Duration (ns)",
    "Last",
]  # fmt: skip


def kernel_processes(trace: Trace) -> pd.DataFrame:
    """The processes that launched kernels, one row each, as ranks: rank, pid, device (the lowest device
    it launched on), kernels. Ranks are numbered by device, then PID. Empty without kernel data."""
    cols = ["rank", "pid", "device", "kernels"]
    if not trace.has("kernels"):
        return pd.DataFrame({c: pd.Series(dtype=np.int64) for c in cols})
    k = trace.frame("kernels", ["global_pid", "device_id"])
    df = pd.DataFrame({"pid": pid_of(k["global_pid"].to_numpy()), "device": k["device_id"].to_numpy()})
    procs = df.groupby("pid").agg(device=("device", "min"), kernels=("device", "size")).reset_index()
    procs = procs.sort_values(["device", "pid"], kind="stable").reset_index(drop=True)
    procs.insert(0, "rank", np.arange(len(procs), dtype=np.int64))
    return procs[cols].astype(np.int64)


def collective_rows(trace: Trace, procs: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """One row per rank and collective (COLLECTIVE_COLUMNS; times in ns, Start from timeline.time_zero: an
    nsys export's session start, as Nsight Systems' timeline and `harness health` count), and notes.
    Collectives are matched by their order on each rank; where ranks ran different numbers of them, only
    the first as many as every rank ran are matched (a note says so)."""
    notes: list[str] = []
    empty = pd.DataFrame({c: [] for c in COLLECTIVE_COLUMNS})
    if not trace.has("kernels") or procs.empty:
        return empty, notes
    k = trace.frame("kernels", ["start", "end", "name_id", "global_pid"])
    names = trace.strings(k["name_id"].unique())
    comm_ids = [i for i, n in names.items() if n.lower().startswith(COMM_PREFIX)]
    comm = k["name_id"].isin(comm_ids).to_numpy()
    pid = pid_of(k["global_pid"].to_numpy())
    start, end, name_id = k["start"].to_numpy(), k["end"].to_numpy(), k["name_id"].to_numpy()
    per_rank = []
    for rank, p in zip(procs["rank"], procs["pid"], strict=True):
        mine = pid == p
        ms, me = merge(start[mine & ~comm], end[mine & ~comm])
        c = np.flatnonzero(mine & comm)
        c = c[np.argsort(start[c], kind="stable")]
        first = start[mine].min() if mine.any() else 0
        prev_end = np.concatenate([[first], end[c][:-1]])
        prev_end = np.minimum(prev_end, start[c])  # overlapping collectives: nothing before
        compute = clipped_sums(ms, me, prev_end, start[c])  # its other kernels' time since the last one
        per_rank.append((int(rank), c, compute))
    counts = {r: len(c) for r, c, _ in per_rank}
    n = min(counts.values())
    if n == 0:
        return empty, notes
    if len(set(counts.values())) > 1:
        ran = ", ".join(f"rank {r}: {m}" for r, m in counts.items())
        notes.append(f"the ranks ran different numbers of collectives ({ran}): the first {n} of each matched")
    origin = time_zero(trace)
    starts = np.vstack([start[c[:n]] for _, c, _ in per_rank])  # ranks × collectives
    latest = starts.max(axis=0)
    last_rank = np.array([r for r, _, _ in per_rank])[starts.argmax(axis=0)]
    rows = []
    for i, (rank, c, compute) in enumerate(per_rank):
        idx = c[:n]
        dur = end[idx] - start[idx]
        rows.append(
            pd.DataFrame(
                {
                    "Collective": np.arange(n, dtype=np.int64),
                    "Rank": rank,
                    "Kernel": [names[x] for x in name_id[idx]],
                    "Start (ns)": start[idx] - origin,
                    "Compute Before (ns)": compute[:n].astype(np.int64),
                    "Wait (ns)": np.minimum(latest - starts[i], dur).astype(np.int64),
                    "Duration (ns)": dur,
                    "Last": last_rank == rank,
                }
            )
        )
    out = pd.concat(rows, ignore_index=True).sort_values(["Collective", "Rank"], kind="stable")
    out = out.reset_index(drop=True)
    # what the table is for, kept on a narrow terminal before the kernel's name (NCCL's, on most rows alike)
    out.attrs["priority"] = ["Collective", "Rank", "Wait (ns)", "Last", "Compute Before (ns)", "Kernel"]
    return out, notes


def collective_summary(rows: pd.DataFrame) -> pd.DataFrame:
    """Per rank: Rank, Collectives, Compute Before (ns), Wait (ns), NCCL Time (ns), Last to Arrive (how many
    collectives it was the last rank to start), Straggler (`rank R` on the rank last to arrive most often,
    ties to the lowest rank; `-` elsewhere)."""
    g = rows.groupby("Rank", sort=True)
    out = pd.DataFrame(
        {
            "Collectives": g.size(),
            "Compute Before (ns)": g["Compute Before (ns)"].sum(),
            "Wait (ns)": g["Wait (ns)"].sum(),
            "NCCL Time (ns)": g["Duration (ns)"].sum(),
            "Last to Arrive": g["Last"].sum().astype(np.int64),
        }
    ).reset_index()
    worst = int(out.loc[out["Last to Arrive"].idxmax(), "Rank"]) if len(out) > 1 else None
    out["Straggler"] = [f"rank {r}" if r == worst else "-" for r in out["Rank"]]
    out.attrs["priority"] = ["Rank", "Wait (ns)", "Compute Before (ns)", "Last to Arrive", "Straggler"]
    return out


def capture_report(trace: Trace, procs: pd.DataFrame | None = None) -> RanksReport:
    """`harness ranks` over one capture whose processes are the ranks (kernel_processes)."""
    procs = kernel_processes(trace) if procs is None else procs
    rank_of = dict(zip(procs["pid"], procs["rank"], strict=True))
    labels = {
        int(r): f"PID {p} (device {d})"
        for r, p, d in zip(procs["rank"], procs["pid"], procs["device"], strict=True)
    }
    notes = [
        f"one capture, {len(procs)} processes that launched kernels as ranks, numbered by device: "
        + ", ".join(f"rank {r} = {label}" for r, label in labels.items())
    ]
    ph = phase_rows(trace, with_pid=True)
    ph = ph[ph["pid"].isin(list(rank_of))]
    if len(ph):
        phases = ph.assign(rank=ph["pid"].map(rank_of).astype(np.int64))
        notes.append("times per phase from the harness's phase ranges of each process")
    else:
        k = trace.frame("kernels", ["start", "end", "global_pid"])
        span = (
            pd.DataFrame({"pid": pid_of(k["global_pid"].to_numpy()), "start": k["start"], "end": k["end"]})
            .groupby("pid")
            .agg(start_ns=("start", "min"), end_ns=("end", "max"))
        )
        span = span.loc[procs["pid"]]
        phases = pd.DataFrame(
            {
                "rank": procs["rank"].to_numpy(),
                "phase": CAPTURE,
                "step": np.zeros(len(procs), dtype=np.int64),
                "duration_ns": (span["end_ns"] - span["start_ns"]).to_numpy(),
                "start_ns": span["start_ns"].to_numpy(),
                "end_ns": span["end_ns"].to_numpy(),
            }
        )
        notes.append(
            "no phase ranges (forward, backward, optimizer, allreduce, prefill, decode): the whole capture, "
            "each rank's first kernel start to its last kernel end"
        )
    phases = phases[[*PHASE_COLUMNS, "start_ns", "end_ns"]].reset_index(drop=True)
    gpu = pd.DataFrame([{**gpu_activity(trace, int(p)), "rank": int(r)} for p, r in rank_of.items()])
    rows, more = collective_rows(trace, procs)
    notes += more
    if rows.empty:
        notes.append("no communication kernels (nccl*): no collectives to line up")
    else:
        notes.append(
            f"each collective's Start counts from {zero_words(trace)}, as `harness health` and "
            "`harness timeline --start/--end` count"
        )
    report = RanksReport.of(phases, gpu, labels, notes)
    report.notes += trace.notes
    report.collectives = rows
    report.around = collective_summary(rows) if len(rows) else None
    return report


def one_capture(paths: Sequence[Path], cache: bool = True) -> RanksReport | None:
    """`harness ranks` over one export in which several processes launched kernels: one capture of several
    ranks (capture_report). None for anything else: one export per rank (analysis.ranks.ranks's
    ranks_report)."""
    if len(paths) != 1:
        return None
    trace = open_trace(paths[0], cache=cache)
    procs = kernel_processes(trace)
    return capture_report(trace, procs) if len(procs) > 1 else None


# --- `--by-rank` on one capture: each process's share of the trace ---------------------------------------


class ProcessView(TraceView):
    """One process of a trace, as a trace: every frame holds only that process's rows (kernels, copies,
    sets and syncs by the process that launched them; calls, ranges and threads by their thread's
    process). The tables run on it unchanged; the data stays the base trace's, read once."""

    def __init__(self, base: Trace, pid: int) -> None:
        super().__init__(base)
        self.pid = pid
        self.notes = list(base.notes)
        self._facts: dict[str, int | bool] | None = None
        self._masks: dict[str, np.ndarray | None] = {}

    def __repr__(self) -> str:
        return f"ProcessView({self.base!r}, pid={self.pid})"

    def holds(self, frame: str, columns: Sequence[str]) -> bool:
        return self.base.holds(frame, columns)

    def capture_facts(self) -> dict[str, int | bool]:
        """The base's, those of NVTX of this process's threads where the base has a range never closed."""
        facts = self.base.capture_facts()
        if facts.get("open_ranges") and self._facts is None:
            self._facts = self.base.reader.capture_facts(pid=self.pid)
        return self._facts or facts

    def count(self, frame: str) -> int:
        mask = self._mask(frame)
        return self.base.count(frame) if mask is None else int(mask.sum())

    def _mask(self, frame: str) -> np.ndarray | None:
        """The base's raw rows of `frame` that belong to the process (None: every row)."""
        if frame not in self._masks:
            key = next((c for c in ("global_pid", "global_tid") if c in FRAMES[frame]), None)
            if key is None:  # strings
                self._masks[frame] = None
            else:
                ids = np.asarray(self.base._columns(frame, [key])[key])
                self._masks[frame] = pid_of(ids) == self.pid
        return self._masks[frame]

    def _columns(self, frame: str, columns: list[str], keep: bool = True) -> dict[str, Any]:
        data = self.base._columns(frame, columns, keep=keep)
        mask = self._mask(frame)
        if mask is None:
            return data
        return {
            c: v[mask].reset_index(drop=True) if isinstance(v, pd.Series) else v[mask]
            for c, v in data.items()
        }


def process_ranks(trace: Trace) -> tuple[list[Trace], list[str]]:
    """One nsys capture of several processes that launched kernels (one nsys around torchrun) as one trace
    per process, each a rank numbered by its device (`kernel_processes`), and the line that says so; else
    the trace alone: the GPUs of several ranks are not one rank's (`harness breakdown`)."""
    procs = kernel_processes(trace) if trace.format == "nsys-sqlite" else []
    if len(procs) < 2:
        return [trace], []
    views: list[Trace] = []
    for rank, pid in zip(procs["rank"], procs["pid"], strict=True):
        view = ProcessView(trace, int(pid))
        view.meta = {**trace.meta, "rank": int(rank)}  # its own: the base's meta stays the export's
        views.append(view)
    labels = ", ".join(
        f"rank {r} = PID {p} (device {d})"
        for r, p, d in zip(procs["rank"], procs["pid"], procs["device"], strict=True)
    )
    return views, [f"one capture split by process, ranks numbered by device: {labels}"]


def analyse_by_process(kind: str, path: Path, options: dict[str, Any], *, cache: bool = True) -> Any:
    """One command's tables over one capture split by process (`--by-rank` on one export): each process
    that launched kernels is a rank (kernel_processes), its share of the trace a ProcessView, and the
    tables combine as those of one export per rank do (analysis.tables.combine)."""
    trace = open_trace(path, cache=cache)
    procs = kernel_processes(trace)
    if len(procs) < 2:
        raise ExportError(
            f"--by-rank on one export splits it by the processes that launched kernels, and {path.name} "
            f"has {len(procs) or 'none'}: give one export per rank"
        )
    parts, items, errors = [], [], []
    for rank, pid in zip(procs["rank"], procs["pid"], strict=True):
        view = ProcessView(trace, int(pid))
        part = Part(path=f"{path}#{pid}")
        try:
            pieces = tables.get(kind).pieces(view, **options)
        except ExportError as e:  # this process has none of it: the others may
            pieces, part.skipped = {}, {kind: str(e)}
            errors.append(str(e))
        skipped = pieces.pop("_skipped", None)
        if skipped is not None and skipped.table is not None:
            part.skipped = dict(zip(skipped.table["table"], skipped.table["why"], strict=True))
        part.pieces = pieces
        part.notes = list(view.notes)
        part.info = {
            "format": trace.format,
            "rank": int(rank),
            "session_start_ns": trace.meta.get("session_start_ns"),
        }
        parts.append(part)
        items.append(Source(Path(part.path), int(rank), "process", f"rank {int(rank)}"))
    if len(errors) == len(parts):  # no process has it: as for the whole export
        raise ExportError(errors[0])
    labels = ", ".join(
        f"rank {r} = PID {p} (device {d})"
        for r, p, d in zip(procs["rank"], procs["pid"], procs["device"], strict=True)
    )
    sources = Sources(items, "Rank", [f"one capture split by process, ranks numbered by device: {labels}"])
    return tables.combine(kind, parts, sources, by_rank=True, options=options)
