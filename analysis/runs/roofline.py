"""The roofline: where each sub-block's work sits against a device's compute and memory roofs, and MFU.

Inputs are plain frames, so any timing source plugs in:
- costs: workloads.roofline.subblock_costs (sub-block, pass, kind, flops, bytes, intensity) for one step;
- times: one step's time per sub-block and pass (sub-block, pass, time_ns), from per-block timers or GPU
  time per --nvtx-detail range (nvtx-gpu), divided by the measured steps; None for the analytic table;
- roofs: Roofs, from the datasheet table or measured (harness.experiments.roofs).

A sub-block is memory-bound when its intensity (FLOP/byte) is below the ridge point peak / bandwidth.
Attainable FLOP/s = min(peak, bandwidth × intensity); the roofline time = max(flops / peak, bytes /
bandwidth) is the least time the device could take for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

TABLE_COLUMNS = [
    "sub-block",
    "pass",
    "kind",
    "flops",
    "bytes",
    "intensity",
    "bound",
    "attainable TFLOP/s",
    "roofline time (ns)",
    "time (ns)",
    "achieved TFLOP/s",
    "achieved GB/s",
    "of roof (%)",
]
MFU_COLUMNS = ["phase", "flops", "time (ns)", "achieved TFLOP/s", "MFU (%)"]
PHASE_COLUMNS = [
    "phase",
    "model flops",
    "flops",
    "bytes",
    "intensity",
    "bound",
    "roofline time (ns)",
    "time (ns)",
    "achieved TFLOP/s",
    "achieved GB/s",
    "of roof (%)",
]


@dataclass(frozen=True)
class Roofs:
    """A device's roofs: peak FLOP/s at one precision and memory bandwidth in bytes/s (None: unknown)."""

    label: str  # where they come from: "NVIDIA H100 80GB HBM3, datasheet, bf16" / "measured: …"
    peak_flops: float | None
    bandwidth: float | None

    @property
    def ridge(self) -> float | None:
        """The intensity (FLOP/byte) where the memory roof meets the compute roof."""
        if not self.peak_flops or not self.bandwidth:
            return None
        return self.peak_flops / self.bandwidth

    def attainable(self, intensity: np.ndarray | float) -> np.ndarray | float:
        """FLOP/s the roofs allow at `intensity`; NaN where a roof is unknown."""
        if not self.peak_flops or not self.bandwidth:
            return np.full(np.shape(intensity), np.nan) if np.ndim(intensity) else float("nan")
        return np.minimum(self.peak_flops, self.bandwidth * np.asarray(intensity, dtype=np.float64))


def times_frame(times: pd.DataFrame | Mapping[tuple[str, str], float] | None) -> pd.DataFrame:
    """One step's time per (sub-block, pass) as a frame, from a frame or a {(sub-block, pass): ns} mapping."""
    if times is None:
        return pd.DataFrame(columns=["sub-block", "pass", "time_ns"])
    if isinstance(times, pd.DataFrame):
        return times[["sub-block", "pass", "time_ns"]]
    return pd.DataFrame(
        [(block, phase, ns) for (block, phase), ns in times.items()], columns=["sub-block", "pass", "time_ns"]
    )


def roofline_table(
    costs: pd.DataFrame,
    times: pd.DataFrame | Mapping[tuple[str, str], float] | None = None,
    roofs: Roofs | None = None,
) -> pd.DataFrame:
    """Each sub-block against the roofs: bound (compute | memory), attainable TFLOP/s, roofline time; with
    `times`, also achieved TFLOP/s and GB/s and the achieved share of the attainable (of roof (%)).

    A sub-block without a time (or without known roofs) keeps those columns NaN: nothing is estimated.
    """
    out = costs[["sub-block", "pass", "kind", "flops", "bytes", "intensity"]].merge(
        times_frame(times), on=["sub-block", "pass"], how="left", validate="one_to_one"
    )
    flops = out["flops"].to_numpy(dtype=np.float64)
    moved = out["bytes"].to_numpy(dtype=np.float64)
    intensity = out["intensity"].to_numpy(dtype=np.float64)
    ridge = roofs.ridge if roofs else None
    out["bound"] = np.where(intensity < ridge, "memory", "compute") if ridge else None
    attainable = roofs.attainable(intensity) if roofs else np.full(len(out), np.nan)
    out["attainable TFLOP/s"] = attainable / 1e12
    if roofs and roofs.peak_flops and roofs.bandwidth:
        out["roofline time (ns)"] = np.maximum(flops / roofs.peak_flops, moved / roofs.bandwidth) * 1e9
    else:
        out["roofline time (ns)"] = np.nan
    seconds = out.pop("time_ns").to_numpy(dtype=np.float64) / 1e9
    with np.errstate(divide="ignore", invalid="ignore"):
        achieved = np.where(seconds > 0, flops / seconds, np.nan)
        out["time (ns)"] = seconds * 1e9
        out["achieved TFLOP/s"] = achieved / 1e12
        out["achieved GB/s"] = np.where(seconds > 0, moved / seconds, np.nan) / 1e9
        share = achieved / attainable * 100
        if roofs and roofs.bandwidth:  # no FLOPs (a gather): its share is of the bandwidth
            bandwidth_share = np.where(seconds > 0, moved / seconds, np.nan) / roofs.bandwidth * 100
            share = np.where(flops == 0, bandwidth_share, share)
        out["of roof (%)"] = share
    return out[TABLE_COLUMNS]


def model_flops(costs: pd.DataFrame) -> dict[str, float]:
    """Matmul FLOPs per phase as MFU counts them: model work only. The fused attention's backward is charged
    two products per forward one like every other matmul, not the five FlopCounterMode counts (its recompute
    of Q·Kᵀ is hardware work, not model work), so the total equals workloads.flops.train_flops."""
    matmul = costs[costs["kind"] == "matmul"].copy()
    fused = (matmul["sub-block"] == "sdpa") & (matmul["pass"] == "backward")
    if fused.any():
        forward = matmul.loc[(matmul["sub-block"] == "sdpa") & (matmul["pass"] == "forward"), "flops"]
        matmul.loc[fused, "flops"] = 2 * float(forward.iloc[0]) if len(forward) else np.nan
    phases = list(dict.fromkeys(costs["pass"]))
    per = matmul.groupby("pass")["flops"].sum()
    return {p: float(per.get(p, 0.0)) for p in phases}


def mfu_table(costs: pd.DataFrame, phase_ns: Mapping[str, float], peak_flops: float | None) -> pd.DataFrame:
    """MFU per phase and for the whole step: model FLOPs (model_flops) over one step's phase time (mean ns
    over the measured steps) against the device's peak. A phase without a time is left out; a timed phase
    without model work (a run across ranks' all-reduce) has 0 FLOPs, and its time is the step's too. MFU is
    NaN where the peak is unknown (a CPU)."""
    flops = model_flops(costs)
    rows = [(p, flops.get(p, 0.0), float(t)) for p, t in phase_ns.items()]
    if rows:
        rows.append(("step", sum(r[1] for r in rows), sum(r[2] for r in rows)))
    df = pd.DataFrame(rows, columns=["phase", "flops", "time (ns)"])
    if df["flops"].notna().all():
        df["flops"] = df["flops"].astype("int64")
    seconds = df["time (ns)"] / 1e9
    df["achieved TFLOP/s"] = df["flops"] / seconds / 1e12
    df["MFU (%)"] = df["flops"] / seconds / peak_flops * 100 if peak_flops else np.nan
    return df[MFU_COLUMNS]


def phase_table(
    costs: pd.DataFrame, phase_ns: Mapping[str, float] | None = None, roofs: Roofs | None = None
) -> pd.DataFrame:
    """Per phase (forward, backward, optimizer): model (matmul) FLOPs, all FLOPs and bytes of its sub-blocks,
    their intensity, the least time the roofs allow (the sum of the sub-blocks' roofline times); with
    `phase_ns` (each phase's mean time over the measured steps), achieved TFLOP/s and GB/s and the share of
    the roof, where the phase's whole work is placed at its own intensity: the view of a run whose blocks
    were not timed. PHASE_COLUMNS."""
    per = roofline_table(costs, None, roofs)
    grouped = per.groupby("pass", sort=False)
    out = grouped[["flops", "bytes"]].sum().reset_index().rename(columns={"pass": "phase"})
    out.insert(1, "model flops", out["phase"].map(model_flops(costs)).astype("int64"))
    out["intensity"] = out["flops"] / out["bytes"]
    ridge = roofs.ridge if roofs else None
    out["bound"] = np.where(out["intensity"] < ridge, "memory", "compute") if ridge else None
    out["roofline time (ns)"] = grouped["roofline time (ns)"].sum(min_count=1).to_numpy()
    times = out["phase"].map(dict(phase_ns or {})).astype("float64")
    seconds = times.to_numpy() / 1e9
    attainable = roofs.attainable(out["intensity"].to_numpy()) if roofs else np.full(len(out), np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        achieved = np.where(seconds > 0, out["flops"].to_numpy(dtype=np.float64) / seconds, np.nan)
        out["time (ns)"] = times
        out["achieved TFLOP/s"] = achieved / 1e12
        out["achieved GB/s"] = np.where(seconds > 0, out["bytes"].to_numpy(dtype=np.float64) / seconds,
                                        np.nan) / 1e9  # fmt: skip
        out["of roof (%)"] = achieved / attainable * 100
    return out[PHASE_COLUMNS]


ABOVE = 100.0  # of roof (%) beyond which a point lies above the roof it is placed against
# what a compute roof's peak is, by where it comes from (workloads.peak: datasheet peaks are at boost clock)
PEAK_IS = {
    "measured": "a measured peak is one matmul size's",
    "datasheet": "a datasheet peak is the dense rate at boost clock of the run's precision; fp32's is the "
    "CUDA cores', which TF32 matmuls pass",
}


def above_roof(
    table: pd.DataFrame, roofs: Roofs | None, name: str = "sub-block", ran_on: str | None = None
) -> list[str]:
    """One line per measured point above its roof (of roof > 100%): which roof, by how much, and why that
    is possible, instead of a bare 120%. A memory-bound point above the bandwidth roof moved its bytes faster
    than the roof's copy (or the datasheet's DRAM figure): its working set stayed in cache, which the roof,
    counting every byte as a trip to DRAM, does not see. A compute-bound point above the compute roof did
    more FLOP/s than the peak the roofs hold: a measured peak is one matmul size's; a datasheet peak
    (workloads.peak) is the dense rate at boost clock of the run's precision, fp32's that of the CUDA cores,
    which TF32 matmuls pass; and the count may charge work the kernels skip. `ran_on`: the device the
    times were measured on where the roofs are another device's (`--gpu`): that device is the why."""
    if roofs is None or "of roof (%)" not in table or table["of roof (%)"].isna().all():
        return []
    kind = "measured" if "measured" in roofs.label else "datasheet"
    lines = []
    for row in table[table["of roof (%)"] > ABOVE].to_dict("records"):
        label = f"{row[name]} {row['pass']}" if "pass" in row else f"{row[name]} (whole phase)"
        pct = percent_above(row["of roof (%)"])
        if ran_on is not None:
            memory = row.get("bound") == "memory" and roofs.bandwidth
            rate = (
                f"{row['achieved GB/s']:,.1f} GB/s against {roofs.bandwidth / 1e9:,.1f} GB/s"
                if memory
                else f"{row['achieved TFLOP/s']:,.3f} against {(roofs.peak_flops or 0) / 1e12:,.3f} TFLOP/s"
            )
            lines.append(
                f"{label}: {pct} of the {kind} {'bandwidth' if memory else 'compute'} roof ({rate}): it "
                f"ran on {ran_on}, not on the device these roofs are of"
            )
        elif row.get("bound") == "memory" and roofs.bandwidth:
            rate = row["achieved GB/s"]
            lines.append(
                f"{label}: {pct} of the {kind} bandwidth roof ({rate:,.1f} GB/s against "
                f"{roofs.bandwidth / 1e9:,.1f} GB/s): its {row['bytes'] / 2**20:,.1f} MiB stayed in cache "
                "between reads and writes, faster than the memory the roof measures; the roof counts every "
                "byte as a trip to memory, so a cache-resident point can lie above it"
            )
        else:
            lines.append(
                f"{label}: {pct} of the {kind} compute roof ({row['achieved TFLOP/s']:,.3f} against "
                f"{(roofs.peak_flops or 0) / 1e12:,.3f} TFLOP/s): the roof's peak is below what this shape "
                f"reaches ({PEAK_IS[kind]}), or the analytic count charges work its kernels skip"
            )
    return lines


def percent_above(pct: float) -> str:
    """A share above 100% as a percentage that reads as above it: whole where that is more than 100 (`125%`),
    else with the decimals that show it (`100.3%`, not a `100%` said to be above the roof)."""
    for digits in range(4):
        text = f"{pct:.{digits}f}"
        if float(text) > ABOVE:
            return f"{text}%"
    return f">{ABOVE:.0f}%"
