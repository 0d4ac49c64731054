"""Energy arithmetic over power samples: joules per run and per phase, average and peak watts, FLOPs and
tokens per joule. Pure functions of DataFrames; the sampling itself lives in harness/energy/power.py.

Samples frame (one row per device per sampler tick):

    device   str     "gpu0", "gpu1", "cpu-package-0"
    tick     int     sampler tick; rows of one tick were read together
    t_ns     int     time.perf_counter_ns() at the reading (the same clock as the phase timers)
    power_w  float   power the source reported (NVML); NaN where the source reports none (RAPL)
    energy_j float   energy counter, J since the first sample, wrap-around undone; NaN where there is none

Intervals frame (one row per timed phase of a measured step): step, phase, start_ns, end_ns.

Energy over an interval comes from the counter where the device has one (NVML's total-energy counter,
RAPL's energy_uj), read at the interval's ends by linear interpolation between samples; otherwise from the
power readings, integrated by the trapezoid rule with the power linearly interpolated at the ends. An
interval not covered by samples on both sides gets NaN: nothing is extrapolated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from workloads.names import ENERGY_COUNTER, ENERGY_POWER, RUN_ENERGY_FIELDS

TOTAL = "total"  # the device label of the row summing every device
RUN = "run"  # the scope of the whole measured window
PEAK_SLACK = 0.05  # a peak this share below the average power is not shown: the samples missed the peak

ENERGY_COLUMNS = [
    "scope",
    "device",
    "method",
    "joules",
    "duration_ns",
    "avg_w",
    "peak_w",
    "samples",
    "flops",
    "flops_per_j",
    "tokens",
    "tokens_per_j",
]


def _power_integral(t_ns: np.ndarray, watts: np.ndarray, at_ns: np.ndarray) -> np.ndarray:
    """Joules from t_ns[0] to each of `at_ns` under the piecewise-linear power curve; NaN outside."""
    at = np.asarray(at_ns, dtype=np.float64)
    out = np.full(at.shape, np.nan)
    if len(t_ns) < 2:
        return out
    cumulative = np.concatenate([[0.0], np.cumsum(np.diff(t_ns) * (watts[1:] + watts[:-1]) / 2e9)])
    inside = (at >= t_ns[0]) & (at <= t_ns[-1])
    i = np.clip(np.searchsorted(t_ns, at[inside], side="right") - 1, 0, len(t_ns) - 2)
    dt = at[inside] - t_ns[i]
    p_at = watts[i] + (watts[i + 1] - watts[i]) * dt / (t_ns[i + 1] - t_ns[i])
    out[inside] = cumulative[i] + dt * (watts[i] + p_at) / 2e9
    return out


def integrate(samples: pd.DataFrame, start_ns: float | None = None, end_ns: float | None = None) -> float:
    """Joules under one device's power readings (trapezoid rule) from `start_ns` to `end_ns`.

    The bounds default to the first and last sample; between samples the power is taken as linear. NaN
    when fewer than two readings exist or the bounds reach outside them.
    """
    df = samples.dropna(subset=["power_w"]).sort_values("t_ns")
    t = df["t_ns"].to_numpy(dtype=np.float64)
    if len(t) < 2:
        return float("nan")
    w = df["power_w"].to_numpy(dtype=np.float64)
    lo = t[0] if start_ns is None else start_ns
    hi = t[-1] if end_ns is None else end_ns
    a, b = _power_integral(t, w, np.array([lo, hi]))
    return float(b - a)


def _device_energy(samples: pd.DataFrame, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, str]:
    """Joules of one device in each [start, end]: from the counter if it has one, else from power."""
    counter = samples.dropna(subset=["energy_j"]).sort_values("t_ns")
    if len(counter) >= 2:
        t = counter["t_ns"].to_numpy(dtype=np.float64)
        e = counter["energy_j"].to_numpy(dtype=np.float64)
        at = np.concatenate([starts, ends]).astype(np.float64)
        read = np.interp(at, t, e)
        read[(at < t[0]) | (at > t[-1])] = np.nan
        return read[len(starts) :] - read[: len(starts)], ENERGY_COUNTER
    power = samples.dropna(subset=["power_w"]).sort_values("t_ns")
    t = power["t_ns"].to_numpy(dtype=np.float64)
    w = power["power_w"].to_numpy(dtype=np.float64)
    return _power_integral(t, w, ends) - _power_integral(t, w, starts), ENERGY_POWER


def power_series(samples: pd.DataFrame) -> pd.DataFrame:
    """One device's power over time (tick, t_ns, power_w): its readings, or for a counter-only source
    (RAPL) the average power of each sample period, stamped at the period's end."""
    df = samples.sort_values("t_ns")
    if df["power_w"].notna().any():
        return df.loc[df["power_w"].notna(), ["tick", "t_ns", "power_w"]].reset_index(drop=True)
    counter = df.dropna(subset=["energy_j"])
    if len(counter) < 2:
        return pd.DataFrame({"tick": [], "t_ns": [], "power_w": []})
    dt = np.diff(counter["t_ns"].to_numpy(dtype=np.float64))
    de = np.diff(counter["energy_j"].to_numpy(dtype=np.float64))
    return pd.DataFrame(
        {
            "tick": counter["tick"].to_numpy()[1:],
            "t_ns": counter["t_ns"].to_numpy()[1:],
            "power_w": np.where(dt > 0, de / np.where(dt > 0, dt, 1) * 1e9, np.nan),
        }
    )


def _inside(t_ns: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Which of `t_ns` fall inside any [start, end]."""
    if not len(starts):
        return np.zeros(len(t_ns), dtype=bool)
    order = np.argsort(starts)
    s, e = starts[order], ends[order]
    i = np.searchsorted(s, t_ns, side="right") - 1
    ok = i >= 0
    hit = np.zeros(len(t_ns), dtype=bool)
    hit[ok] = t_ns[ok] <= np.maximum.accumulate(e)[i[ok]]
    return hit


def run_window(intervals: pd.DataFrame) -> tuple[int, int] | None:
    """The measured window: the first phase's start to the last phase's end."""
    if intervals.empty:
        return None
    return int(intervals["start_ns"].min()), int(intervals["end_ns"].max())


def energy_table(
    samples: pd.DataFrame,
    intervals: pd.DataFrame,
    *,
    flops: Mapping[str, float] | None = None,
    tokens_per_step: float | None = None,
    groups: Mapping[str, Sequence[str]] | None = None,
) -> pd.DataFrame:
    """Joules, average and peak watts, FLOPs/J and tokens/J for the run and each phase, per device and per
    group of devices. Columns: ENERGY_COLUMNS.

    `intervals`: step, phase, start_ns, end_ns of the measured steps. `flops`: analytic FLOPs of one step's
    phase (e.g. {"forward": F, "backward": 2F}); a phase missing from it gets NaN FLOPs and FLOPs/J.
    `tokens_per_step`: tokens one step processes (batch × context); each phase is credited all of them.
    avg_w is joules over the summed interval time; peak_w the highest power reading (or counter-derived
    period average) stamped inside the intervals, NaN where none fell inside (a phase shorter than the
    sample period) or where the highest is below avg_w by more than PEAK_SLACK (the samples missed it).
    The run's FLOPs are the sum over the phases `flops` has.
    `groups`: extra rows summing devices, {label: devices}, default {"total": every device}; e.g.
    {"gpu": ["gpu0"], "total": [...]} for a GPU run that also samples the CPU package. A group's peak is
    the highest per-tick sum of its devices' power; a device without energy makes its group's joules NaN.
    """
    flops = flops or {}
    if samples.empty or intervals.empty:
        return pd.DataFrame(columns=ENERGY_COLUMNS)
    window = run_window(intervals)
    assert window is not None
    steps = intervals["step"].nunique()
    scopes: list[tuple[str, np.ndarray, np.ndarray, float, float]] = []
    known = [flops[p] * n for p, n in intervals["phase"].value_counts().items() if p in flops]
    scopes.append((RUN, np.array([window[0]]), np.array([window[1]]), sum(known) if known else np.nan, steps))
    for phase, part in intervals.groupby("phase", sort=False):
        scopes.append(
            (
                str(phase),
                part["start_ns"].to_numpy(dtype=np.float64),
                part["end_ns"].to_numpy(dtype=np.float64),
                flops.get(str(phase), np.nan) * len(part),
                part["step"].nunique(),
            )
        )
    rows = []
    series = {str(d): power_series(s) for d, s in samples.groupby("device", sort=True)}
    groups = groups if groups is not None else {TOTAL: list(series)}
    for scope, starts, ends, scope_flops, scope_steps in scopes:
        duration = int((ends - starts).sum())
        tokens = tokens_per_step * scope_steps if tokens_per_step else np.nan
        per_device = []
        for device, part in samples.groupby("device", sort=True):
            joules, method = _device_energy(part, starts, ends)
            s = series[str(device)]
            hit = _inside(s["t_ns"].to_numpy(dtype=np.float64), starts, ends)
            peak = float(s["power_w"][hit].max()) if hit.any() else np.nan
            per_device.append((str(device), method, float(joules.sum()), peak, int(hit.sum())))
        sums = [
            _group(label, list(members), series, starts, ends, per_device)
            for label, members in groups.items()
        ]
        for device, method, joules, peak, n in [*per_device, *sums]:
            avg = joules / (duration / 1e9) if duration > 0 else np.nan
            rows.append(
                {
                    "scope": scope,
                    "device": device,
                    "method": method,
                    "joules": joules,
                    "duration_ns": duration,
                    "avg_w": avg,
                    # readings (or a counter's period averages) that stay clearly below the scope's own
                    # average missed its peak: a 20-step run on an H200 gave 117 W "peak" for a 176 W
                    # average (a constant load's counter reads within a percent or two of its readings)
                    "peak_w": np.nan if peak < avg * (1 - PEAK_SLACK) else peak,
                    "samples": n,
                    "flops": scope_flops,
                    "flops_per_j": scope_flops / joules if joules > 0 else np.nan,
                    "tokens": tokens,
                    "tokens_per_j": tokens / joules if joules > 0 else np.nan,
                }
            )
    return pd.DataFrame(rows, columns=ENERGY_COLUMNS)


def _group(
    label: str,
    members: list[str],
    series: dict[str, pd.DataFrame],
    starts: np.ndarray,
    ends: np.ndarray,
    per_device: list[tuple[str, str, float, float, int]],
) -> tuple[str, str, float, float, int]:
    """The sum over `members`; its peak is the highest per-tick sum of every member's power."""
    rows = [r for r in per_device if r[0] in members]
    if len(rows) < len(members) or not rows:  # a member that was never sampled: no sum to make
        return label, "", float("nan"), float("nan"), 0
    joules = sum(j for _, _, j, _, _ in rows)  # NaN if any member has none
    methods = sorted({m for _, m, _, _, _ in rows})
    frames = [series[d].assign(device=d) for d in members if not series[d].empty]
    peak, n = np.nan, 0
    if len(frames) == len(members):
        stacked = pd.concat(frames)
        stacked = stacked[_inside(stacked["t_ns"].to_numpy(dtype=np.float64), starts, ends)]
        complete = stacked.groupby("tick")["power_w"].agg(["sum", "count"])
        complete = complete[complete["count"] == len(members)]
        if len(complete):
            peak, n = float(complete["sum"].max()), len(complete)
    return label, "+".join(methods), float(joules), peak, n


def run_summary(table: pd.DataFrame, device: str = TOTAL) -> dict[str, float | str | None]:
    """The run-level figures (RUN_ENERGY_FIELDS) from one device or group row of the run scope; None for
    what is unknown, so a store writes NULL rather than NaN."""
    row = table[(table["scope"] == RUN) & (table["device"] == device)]
    if row.empty:
        return dict.fromkeys(RUN_ENERGY_FIELDS)
    r = row.iloc[0]
    values = (r["joules"], r["avg_w"], r["peak_w"], r["flops_per_j"], r["tokens_per_j"], r["method"] or None)
    return {name: _plain(value) for name, value in zip(RUN_ENERGY_FIELDS, values, strict=True)}


def _plain(value: object) -> float | str | None:
    """numpy scalars to Python ones, NaN to None."""
    if isinstance(value, float | np.floating):
        return None if np.isnan(value) else float(value)
    return value  # type: ignore[return-value]
