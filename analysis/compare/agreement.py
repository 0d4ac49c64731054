"""How far the NVTX ranges in an export agree with the harness's in-process timers.

Both describe the same steps: the timers as (step, phase, duration_ns, warmup) rows, the export as NVTX
range instances. Ranges carry the step index as their int64 payload when the harness wrote them; for
exports without payloads (the cpu-train fixture) the k-th range of a phase is the k-th timed step, counting
from the end when capture started late (nsys --capture-range).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pandas as pd

from workloads.names import counted

AGREEMENT_TITLE = "NVTX vs in-process timers"  # the agreement as `run`, `show` and the dashboard title it
AGREEMENT_COLUMNS = [
    "phase", "steps", "nvtx_mean_ns", "nvtx_median_ns", "timer_mean_ns", "timer_median_ns", "rel_diff",
]  # fmt: skip


@dataclass
class Pairing:
    """Timer and NVTX durations of the same (step, phase), one row each, measured steps only."""

    pairs: pd.DataFrame  # step, phase, timer_ns, nvtx_ns
    notes: list[str] = field(default_factory=list)


def pair_ranges(timers: pd.DataFrame, ranges: pd.DataFrame, phases: Sequence[str]) -> Pairing:
    """Match each measured step's phase timer with the NVTX range of the same step and phase.

    `timers`: step, phase, duration_ns, warmup. `ranges`: name, duration_ns, start_ns and payload
    (the step index, or NA).
    """
    notes: list[str] = []
    frames = []
    for phase in phases:
        t = timers[timers["phase"] == phase].sort_values("step")
        r = ranges[ranges["name"] == phase].sort_values("start_ns")
        if t.empty or r.empty:
            if not t.empty:
                notes.append(f"no NVTX range {phase!r} in the export")
            continue
        payload = r["payload"] if "payload" in r else pd.Series(pd.NA, index=r.index)
        if payload.notna().all():
            counts = payload.astype("int64").value_counts()
            repeated = counts[counts > 1]
            if len(repeated):
                notes.append(
                    f"{phase!r} recorded more than once in step(s) {', '.join(map(str, repeated.index))}"
                )
            nvtx = pd.DataFrame(
                {"step": payload.astype("int64"), "nvtx_ns": r["duration_ns"].astype("int64")}
            )
            nvtx = nvtx.drop_duplicates("step", keep="first")
        else:
            steps = t["step"].to_numpy()
            if len(r) > len(steps):
                notes.append(
                    f"{len(r)} {phase!r} ranges for {counted(len(steps), 'timed step')}; "
                    "pairing the last ones"
                )
                r = r.tail(len(steps))
            # capture may start late (--nsys-capture measured): align the ranges with the last steps
            nvtx = pd.DataFrame(
                {"step": steps[len(steps) - len(r) :], "nvtx_ns": r["duration_ns"].to_numpy()}
            )
        merged = t.merge(nvtx, on="step", how="inner")
        merged = merged[~merged["warmup"].astype(bool)]
        missing = int((~t["warmup"].astype(bool)).sum()) - len(merged)
        if missing > 0:
            notes.append(f"{missing} measured step(s) have no {phase!r} range")
        frames.append(
            pd.DataFrame(
                {
                    "step": merged["step"].astype("int64"),
                    "phase": phase,
                    "timer_ns": merged["duration_ns"].astype("int64"),
                    "nvtx_ns": merged["nvtx_ns"].astype("int64"),
                }
            )
        )
    pairs = (
        pd.concat(frames, ignore_index=True)
        if frames
        else pd.DataFrame({"step": [], "phase": [], "timer_ns": [], "nvtx_ns": []})
    )
    return Pairing(pairs=pairs, notes=notes)


def agreement_table(pairing: Pairing, phases: Sequence[str]) -> pd.DataFrame:
    """Per phase: mean and median by NVTX and by timer, and (NVTX mean − timer mean) / timer mean."""
    rows = []
    for phase in phases:
        p = pairing.pairs[pairing.pairs["phase"] == phase]
        if p.empty:
            continue
        timer_mean = float(p["timer_ns"].mean())
        nvtx_mean = float(p["nvtx_ns"].mean())
        rows.append(
            {
                "phase": phase,
                "steps": len(p),
                "nvtx_mean_ns": nvtx_mean,
                "nvtx_median_ns": float(p["nvtx_ns"].median()),
                "timer_mean_ns": timer_mean,
                "timer_median_ns": float(p["timer_ns"].median()),
                "rel_diff": (nvtx_mean - timer_mean) / timer_mean if timer_mean else float("nan"),
            }
        )
    return pd.DataFrame(rows, columns=AGREEMENT_COLUMNS)


def for_people(table: pd.DataFrame) -> pd.DataFrame:
    """The agreement table with display names (ns columns render as ms; difference in percent)."""
    out = pd.DataFrame(
        {
            "Phase": table["phase"],
            "Steps": table["steps"],
            "NVTX Avg (ns)": table["nvtx_mean_ns"],
            "Timer Avg (ns)": table["timer_mean_ns"],
            "NVTX Med (ns)": table["nvtx_median_ns"],
            "Timer Med (ns)": table["timer_median_ns"],
            "Difference (%)": table["rel_diff"] * 100,
        }
    )
    out.attrs["digits"] = {"Difference (%)": 3}  # agreement is often within 0.05%: one decimal shows 0.0
    return out


def range_summary(ranges: pd.DataFrame) -> pd.DataFrame:
    """nvtxsum-shaped statistics of a set of range instances (e.g. the measured steps' ranges)."""
    g = ranges.groupby("name", sort=False)["duration_ns"]
    out = pd.DataFrame(
        {
            "Total Time (ns)": g.sum(),
            "Instances": g.size(),
            "Avg (ns)": g.mean(),
            "Med (ns)": g.median(),
            "Min (ns)": g.min(),
            "Max (ns)": g.max(),
            "StdDev (ns)": g.std(ddof=1).fillna(0.0),
        }
    )
    total = out["Total Time (ns)"].sum()
    out.insert(0, "Time (%)", out["Total Time (ns)"] / total * 100 if total else 0.0)
    out = out.sort_values("Total Time (ns)", ascending=False, kind="stable")
    return out.rename_axis("Range").reset_index()[[*out.columns, "Range"]]
