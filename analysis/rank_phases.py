"""Phases across ranks, from the in-process timers of a run across ranks (one row per rank, phase, step).

Input: a DataFrame with columns rank, phase, step, duration_ns (measured steps only; ns). The whole step
is the sum of a rank's phases in that step. A rank's figure for a phase is its mean over the steps.
"""

from __future__ import annotations

import pandas as pd

from analysis.names import COMM_PHASES

STEP_ROW = "step"  # the row of whole steps (sum of a rank's phases per step)
COLUMNS = [
    "phase",
    "Ranks",
    "Avg (ns)",
    "Med (ns)",
    "slowest rank",
    "Max (ns)",
    "fastest rank",
    "Min (ns)",
    "straggler ratio",
    "share of step (%)",
]


def per_rank(df: pd.DataFrame) -> pd.DataFrame:
    """Rank × phase: each rank's mean duration per phase (ns), phases in their order of appearance, plus
    the whole step."""
    if df.empty:
        return pd.DataFrame(columns=["rank"])
    order = list(dict.fromkeys(df["phase"]))
    steps = df.groupby(["rank", "step"], sort=True)["duration_ns"].sum().groupby("rank").mean()
    table = df.pivot_table(index="rank", columns="phase", values="duration_ns", aggfunc="mean")[order]
    table[STEP_ROW] = steps
    table.columns = [f"{c} (ns)" for c in table.columns]
    table.columns.name = None
    return table.reset_index()


def straggler_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per phase (and the whole step, last): the mean over ranks, the median rank, the slowest and fastest
    rank with their means, the straggler ratio (slowest / median) and the phase's share of the mean step.
    The communication phases' share is the communication share of the step."""
    if df.empty:
        return pd.DataFrame(columns=COLUMNS)
    means = per_rank(df).set_index("rank")
    step_mean = means[f"{STEP_ROW} (ns)"].mean()
    rows = []
    for col in means.columns:
        by_rank = means[col].dropna()
        median = float(by_rank.median())
        rows.append(
            {
                "phase": col.removesuffix(" (ns)"),
                "Ranks": len(by_rank),
                "Avg (ns)": float(by_rank.mean()),
                "Med (ns)": median,
                "slowest rank": int(by_rank.idxmax()),
                "Max (ns)": float(by_rank.max()),
                "fastest rank": int(by_rank.idxmin()),
                "Min (ns)": float(by_rank.min()),
                "straggler ratio": float(by_rank.max()) / median if median else float("nan"),
                "share of step (%)": 100 * float(by_rank.mean()) / step_mean if step_mean else float("nan"),
            }
        )
    return pd.DataFrame(rows, columns=COLUMNS)


def communication_share(df: pd.DataFrame) -> float:
    """The communication phases' share of the mean step over ranks, 0 … 1 (NaN without steps)."""
    if df.empty:
        return float("nan")
    step = df.groupby(["rank", "step"])["duration_ns"].sum().mean()
    comm = df[df["phase"].isin(COMM_PHASES)].groupby(["rank", "step"])["duration_ns"].sum()
    comm = comm.reindex(df.groupby(["rank", "step"]).size().index, fill_value=0)
    return float(comm.mean() / step) if step else float("nan")
