"""Profiler overhead: per phase, step times without a profiler against the same configuration under it."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

BASELINE = "no nsys"
STEP_SUM = "step (sum)"


def _row(name: str, durations: pd.DataFrame, labels: list[str], baseline: str) -> dict[str, object]:
    """`durations`: label, duration_ns for one phase (or for whole steps)."""
    row: dict[str, object] = {"Phase": name}
    base_mean = None
    for label in labels:
        d = durations.loc[durations["label"] == label, "duration_ns"]
        mean = float(d.mean()) if len(d) else float("nan")
        row[f"{label} Avg (ns)"] = mean
        row[f"{label} StdDev (ns)"] = float(d.std(ddof=1)) if len(d) > 1 else 0.0
        if label == baseline:
            base_mean = mean
        elif base_mean:
            row[f"{label} overhead (%)"] = (mean - base_mean) / base_mean * 100
    return row


def overhead_table(steps: pd.DataFrame, phases: Sequence[str], baseline: str = BASELINE) -> pd.DataFrame:
    """`steps`: label, repeat, step, phase, duration_ns (measured steps of every repeat, pooled per label).

    One row per phase and one for whole steps: mean and sample standard deviation per label, and for each
    label but the baseline its overhead in percent of the baseline mean. Labels keep first-seen order.
    """
    labels = list(dict.fromkeys(steps["label"]))
    if baseline in labels:
        labels.remove(baseline)
        labels.insert(0, baseline)
    steps = steps[steps["phase"].isin(phases)]
    rows = [_row(phase, steps[steps["phase"] == phase], labels, baseline) for phase in phases]
    whole = steps.groupby(["label", "repeat", "step"], sort=False, as_index=False)["duration_ns"].sum()
    if len(phases) > 1 and len(whole):
        rows.append(_row(STEP_SUM, whole, labels, baseline))
    return pd.DataFrame(rows)
