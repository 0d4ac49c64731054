"""The waterfall of the newest `harness optimize`: the baseline's tokens/s, each kept change's gain as it was
measured against the configuration before it, the final configuration; changes tried and not kept are said
beside it.

Reads the `optimize` column of the runs frame (each run's part, stored by harness.experiments.optimize:
role, the stack of changes its configuration has, the change it tries, the verdict so far) and the runs'
tokens/s. A change's figures are the geometric means of its timed rounds: the candidate's runs against the
runs of the configuration before it.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis.dashboard.panel import DashboardData, Panel
from analysis.dashboard.style import PALETTE, TEMPLATE, hover

KEPT = "faster"
FINAL = "final"  # harness.experiments.optimize's check of the changes kept, stacked


def _geomean(values: pd.Series) -> float:
    v = values.dropna().astype("float64")
    v = v[v > 0]
    return float(np.exp(np.log(v).mean())) if len(v) else math.nan


def newest_experiment(runs: pd.DataFrame) -> str | None:
    """The newest optimize experiment's id, whatever its runs (None: no optimisation stored)."""
    if "optimize" not in runs.columns or runs.empty:
        return None
    parts = runs[runs["optimize"].map(lambda p: isinstance(p, dict))]
    return None if parts.empty else str(parts.sort_values("created_at", kind="stable").iloc[-1]["experiment"])


def newest_optimisation(runs: pd.DataFrame) -> pd.DataFrame:
    """The timed runs of the newest optimize experiment, each with its part's fields (role, stack, change,
    verdict) as columns; empty where there is none."""
    newest = newest_experiment(runs)
    if newest is None:
        return runs.iloc[0:0]
    mine = runs[(runs["experiment"] == newest) & runs["optimize"].map(lambda p: isinstance(p, dict))]
    fields = pd.DataFrame(list(mine["optimize"]), index=mine.index)
    out = mine.assign(
        role=fields.get("role"),
        stack=fields.get("stack").map(lambda s: tuple(s or ())),
        change=fields.get("change"),
        verdict=fields.get("verdict"),
    )
    return out[out["role"] == "timed"]


def steps_of(timed: pd.DataFrame) -> list[tuple[str, float, float, str]]:
    """Per change tried, in the order tried: (change, tokens/s before, tokens/s after, verdict)."""
    out = []
    # the final configuration against the baseline (change "final") is the stack's check, not a change
    candidates = timed[timed["change"].notna() & (timed["change"] != FINAL)]
    for change, rows in candidates.groupby("change", sort=False):
        stack = rows["stack"].iloc[0]
        before_stack = tuple(f for f in stack if f != change)
        before = timed[timed["change"].isna() & (timed["stack"] == before_stack)]
        verdict = str(rows.sort_values("created_at", kind="stable")["verdict"].iloc[-1])
        out.append((str(change), _geomean(before["tokens_per_s"]), _geomean(rows["tokens_per_s"]), verdict))
    return out


def optimize_panel(data: DashboardData) -> Panel:
    import plotly.graph_objects as go

    timed = newest_optimisation(data.runs)
    if timed.empty:
        if (newest := newest_experiment(data.runs)) is not None:  # its baseline captured, nothing timed
            return Panel(
                missing=f"{newest}: no run of it was timed (its --budget or a stop left only the baseline's "
                "capture)"
            )
        return Panel(missing="no optimisation stored: `harness optimize tiny --device cpu` makes one")
    experiment = str(timed["experiment"].iloc[0])
    changes = steps_of(timed)
    base = _geomean(timed[timed["stack"] == ()]["tokens_per_s"])
    if not changes or math.isnan(base):
        return Panel(missing=f"{experiment}: no change was measured against the baseline")
    kept = [c for c in changes if c[3] == KEPT and not math.isnan(c[1]) and not math.isnan(c[2])]
    x = ["baseline", *(c[0] for c in kept), "final"]
    y = [base, *(after - before for _, before, after, _ in kept), 0.0]
    measure = ["absolute", *(["relative"] * len(kept)), "total"]
    words = [
        f"{base:,.0f} tokens/s",
        *(f"{before:,.0f} → {after:,.0f} tokens/s" for _, before, after, _ in kept),
        "the changes kept, stacked",
    ]
    fig = go.Figure(
        go.Waterfall(
            x=x,
            y=y,
            measure=measure,
            increasing={"marker": {"color": PALETTE[2]}},
            decreasing={"marker": {"color": PALETTE[3]}},
            totals={"marker": {"color": PALETTE[0]}},
            customdata=words,
            hovertemplate=hover("%{x}", "%{customdata}"),
            name="",
        )
    )
    fig.update_layout(
        template=TEMPLATE, yaxis_title="tokens/s", title=f"{experiment}: each kept change's gain, stacked"
    )
    notes = [
        f"{change}: {verdict} ({before:,.0f} → {after:,.0f} tokens/s), not kept"
        for change, before, after, verdict in changes
        if verdict != KEPT
    ]
    return Panel(figure=fig, notes=notes)
