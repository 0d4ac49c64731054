"""nsys analyze's two rules of GPU time, gpu-starv and gpu-low-util (2023.4: gpu_gaps, gpu_time_util).

Both read the same GPU work (nsys's gpustats.GPUOperation): per process and device, the kernels, copies and
memsets that have a start above 0, and nsys's own CUDA flush overhead (named exactly "CUDA profiling data
flush overhead", "CUDA profiling stop overhead" or "CUDA profiling overhead") of the process that lies
strictly inside the span of that device's work (the user cannot remove it, so it counts as work).

- gpu-starv: the ends and the starts of a device's work, each sorted, the j-th end paired with the next
  start: a gap where the end comes first and the two lie more than `gap` ms apart; the 50 (rows=) longest,
  ties by the earlier. Its Context ID is that of the work whose end opens the gap.
- gpu-low-util: the span of a device's work cut into `chunks` chunks of ceil(span / chunks) ns (a double,
  as SQLite computes it: the last chunk is cut at the span's end, and a chunk that starts past it is not
  one); each chunk's in-use share is the time of the work inside it (overlaps add up) over its length.
  Chunks below `threshold` % are kept, runs of consecutive ones merged (their length-weighted mean, rounded
  to 0.1 as SQLite's round() does). Then the first 50 (rows=) merged runs in nsys's grouping order (by run
  number, then device, then process: not the least used) are listed least used first. Its Context ID is
  that of the device's work that ends last.
  nsys 2022.4 groups the chunks by the *work* they hold: the chunks that hold none, of every device and
  process with the same chunk number, make one chunk, which takes the first such device's place (by device,
  then process) at 0 %: with several devices, the others lose their idle chunks. Kept under 2022.4's name
  (MERGE_IDLE); 2023.4 groups each chunk by its own device and process.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis.advice.nsys_query import Query
from analysis.readers.global_ids import pid_of
from analysis.trace.frames import GPU_WORK

FLUSH_OVERHEAD = (
    "CUDA profiling data flush overhead",
    "CUDA profiling stop overhead",
    "CUDA profiling overhead",
)
GAP_HEADERS = ["Row#", "Duration (ns)", "Start (ns)", "PID", "Device ID", "Context ID"]
UTIL_HEADERS = ["Row#", "In-Use (%)", "Duration (ns)", "Start (ns)", "PID", "Device ID", "Context ID"]
OPS_COLUMNS = ("start", "end", "pid", "device", "context")
# whether gpu-low-util merges chunks without work across devices and processes (see above): 2022.4 does
MERGE_IDLE = {"2022.4": True, "2023.4": False}


def started(ops: pd.DataFrame) -> np.ndarray:
    """GPU work that counts: start > 0."""
    return ops["start"].to_numpy() > 0


def strictly_inside(over: pd.DataFrame) -> np.ndarray:
    """Overhead (start, end) strictly inside its process's span of work on a device (lo, hi)."""
    return (over["start"].to_numpy() > over["lo"].to_numpy()) & (
        over["end"].to_numpy() < over["hi"].to_numpy()
    )


def longer(duration: np.ndarray, gap_ns: int) -> np.ndarray:
    """gpu-starv's test of a gap: longer than gap= ms, not as long."""
    return duration > gap_ns


def idle_gaps(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The idle gaps of one device's work (`starts`, `ends`: one each per row): (the row whose end opens
    each gap, its start, its end). The ends and the starts each sorted, the j-th end with the (j+1)-th
    start, where the end comes first."""
    by_end = np.argsort(ends, kind="stable")
    lo, hi = ends[by_end][:-1], np.sort(starts, kind="stable")[1:]
    j = np.flatnonzero(lo < hi)
    return by_end[j], lo[j], hi[j]


def chunk_size(span: int, chunks: int) -> float:
    """ceil(CAST(span AS FLOAT) / chunks): a whole number of ns, as a double."""
    return float(math.ceil(float(span) / chunks))


def below(pct: float, threshold: int) -> bool:
    """gpu-low-util's test of a chunk: in use less than threshold= %."""
    return pct < threshold


def first_runs(q: Query, runs: pd.DataFrame) -> pd.DataFrame:
    """The runs nsys lists: its inner LIMIT takes the first rows= runs in its grouping order (run number,
    device, process), before they are sorted least used first."""
    return q.limit(runs)


def _spans(ops: pd.DataFrame) -> pd.DataFrame:
    """Per (device, pid), in that order (nsys's GROUP BY deviceId, pid): lo, hi and the context of the
    work that ends last (the first such row, as SQLite's max() keeps it)."""
    last = ops.sort_values("end", ascending=False, kind="stable").drop_duplicates(["device", "pid"])
    span = ops.groupby(["device", "pid"], sort=True).agg(lo=("start", "min"), hi=("end", "max"))
    return span.join(last.set_index(["device", "pid"])["context"]).reset_index()


def gpu_ops(q: Query) -> pd.DataFrame:
    """The GPU work of every process and device (start, end, pid, device, context): nsys's profiling
    overhead inside each span first, then kernels, copies and memsets, each in table order."""
    parts = []
    for f in GPU_WORK:
        if q.trace.has(f):
            df = q.frame(f, ["global_pid", "device_id", "context_id"], "global_pid")
            df = df[started(df)]
            parts.append(
                pd.DataFrame(
                    {
                        "start": df["start"],
                        "end": df["end"],
                        "pid": pid_of(df["global_pid"]),
                        "device": df["device_id"],
                        "context": df["context_id"],
                    }
                )
            )
    ops = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=list(OPS_COLUMNS))
    if ops.empty or not q.trace.has("overhead"):
        return ops.reset_index(drop=True)
    over = q.frame("overhead", ["name_id"], "global_tid")
    names = {i for i, s in q.trace.strings(over["name_id"].unique()).items() if s in FLUSH_OVERHEAD}
    over = over[over["name_id"].isin(list(names))]
    over = pd.DataFrame({"start": over["start"], "end": over["end"], "pid": pid_of(over["global_tid"])})
    inside = over.merge(_spans(ops), on="pid")
    inside = inside[strictly_inside(inside)]
    return pd.concat([inside[list(OPS_COLUMNS)], ops], ignore_index=True)


def gpu_gaps(q: Query, gap: int = 500) -> pd.DataFrame:
    """gpu-starv: idle gaps of each process's device longer than `gap` ms, longest first."""
    found = []
    for (pid, device), ops in gpu_ops(q).groupby(["pid", "device"], sort=True):
        row, lo, hi = idle_gaps(ops["start"].to_numpy(np.int64), ops["end"].to_numpy(np.int64))
        keep = longer(hi - lo, gap * 1_000_000)
        found.append(
            pd.DataFrame(
                {
                    "Duration (ns)": (hi - lo)[keep],
                    "Start (ns)": lo[keep],
                    "PID": pid,
                    "Device ID": device,
                    "Context ID": ops["context"].to_numpy()[row[keep]],  # the work whose end opens it
                }
            )
        )
    out = pd.concat(found, ignore_index=True) if found else pd.DataFrame(columns=GAP_HEADERS[1:])
    out = q.limit(out.sort_values(["Duration (ns)", "Start (ns)"], ascending=[False, True], kind="stable"))
    out.insert(0, "Row#", np.arange(1, len(out) + 1))
    return out[GAP_HEADERS]


def sqlite_round1(x: float) -> float:
    """SQLite's round(x, 1) (it prints x with "%.1f" its own way and reads that back): half away from zero,
    after a nudge of 3e-16 x, so that 0.15, stored just below, rounds to 0.2 as its decimal says."""
    r = np.longdouble(abs(x))
    r += np.longdouble(0.05) + r * np.longdouble(3e-16)
    return math.copysign(int(np.floor(r * 10)) / 10, x)


def _chunks(ops: pd.DataFrame, spans: pd.DataFrame, chunks: int, merge_idle: bool) -> list[dict]:
    """nsys's `utilization`: each chunk of each span with its share of time in use (%), chunk-major, the
    spans by device then process; chunks without work merged across spans where `merge_idle`."""
    work = {
        key: (g["start"].to_numpy(np.int64), g["end"].to_numpy(np.int64))
        for key, g in ops.groupby(["device", "pid"], sort=False)
    }
    out: list[dict] = []
    idle_taken: set[int] = set()
    for k in range(chunks):
        for span in spans.itertuples(index=False):
            lo, hi = int(span.lo), int(span.hi)
            size = chunk_size(hi - lo, chunks)
            cs = float(k) * size + float(lo)
            ce = min(cs + size, hi)
            if not cs < ce:
                continue
            s, e = work[(span.device, span.pid)]
            hit = (s < ce) & (e > cs)
            row = {
                "k": k,
                "start": cs,
                "end": ce,
                "pid": span.pid,
                "device": span.device,
                "ctx": span.context,
            }
            if not hit.any() and merge_idle:
                if k in idle_taken:
                    continue
                idle_taken.add(k)
            busy = np.minimum(e[hit], ce) - np.maximum(s[hit], cs)
            total = float(np.add.accumulate(busy.astype(np.float64))[-1]) if len(busy) else 0.0
            out.append(row | {"pct": total / (ce - cs) * 100})
    return out


def gpu_low_util(
    q: Query, threshold: int = 50, chunks: int = 30, merge_idle: bool | None = None
) -> pd.DataFrame:
    """gpu-low-util: runs of chunks of each process's device span in use less than `threshold` percent."""
    ops = gpu_ops(q)
    merge_idle = MERGE_IDLE[q.nsys] if merge_idle is None else merge_idle
    low = []
    if chunks and not ops.empty:
        low = [c for c in _chunks(ops, _spans(ops), chunks, merge_idle) if below(c["pct"], threshold)]
    rows = pd.DataFrame(low, columns=["k", "start", "end", "pid", "device", "ctx", "pct"])
    rows = rows.sort_values("k", kind="stable")
    rows["group"] = rows["k"] - rows.groupby(["pid", "device"]).cumcount()  # consecutive chunks: one group
    found = []
    for (_, device, pid), g in rows.groupby(["group", "device", "pid"], sort=True):
        size = (g["end"] - g["start"]).to_numpy(np.float64)
        mean = float(np.add.accumulate(size * g["pct"].to_numpy())[-1]) / float(np.add.accumulate(size)[-1])
        start = g["start"].min()
        found.append(
            {
                "In-Use (%)": sqlite_round1(mean),
                "Duration (ns)": int(g["end"].max() - start),
                "Start (ns)": int(start),
                "PID": pid,
                "Device ID": device,
                "Context ID": g["ctx"].iloc[-1],
            }
        )
    out = first_runs(q, pd.DataFrame(found, columns=UTIL_HEADERS[1:]))
    out = out.sort_values(["In-Use (%)", "Duration (ns)"], kind="stable").reset_index(drop=True)
    out.insert(0, "Row#", np.arange(1, len(out) + 1))
    out["In-Use (%)"] = out["In-Use (%)"].map(lambda v: f"{v:.1f}")
    return out[UTIL_HEADERS]
