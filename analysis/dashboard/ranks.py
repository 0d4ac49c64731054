"""Multi-rank panels (`harness ranks --html`): a ranks × phases heatmap of the mean time per step, and a
timeline with every rank's phase ranges on one clock (ns since the earliest report's session start)."""

from __future__ import annotations

import pandas as pd

from analysis.dashboard.panel import DashboardData, Panel
from analysis.dashboard.style import MS, TEMPLATE, hover, ordered_phases, phase_color

RANK_PHASES = ("forward", "backward", "allreduce", "optimizer", "prefill", "decode", "step")
MAX_TIMELINE_RANGES = 20_000
PHASE_COLOR_ALLREDUCE = "#E45756"


def _missing(data: DashboardData) -> str | None:
    if data.ranks is None or data.ranks.empty:
        return "no per-rank phase ranges: `harness ranks EXPORTS --html OUT` draws this panel"
    return None


def _order(names: pd.Series) -> list[str]:
    present = list(dict.fromkeys(names))
    return [p for p in RANK_PHASES if p in present] + ordered_phases(
        n for n in present if n not in RANK_PHASES
    )


def rank_phase_matrix(phases: pd.DataFrame) -> pd.DataFrame:
    """Mean ms per step, ranks as rows, phases (step order) as columns."""
    mean = phases.groupby(["rank", "phase"])["duration_ns"].mean().unstack() / MS
    return mean[_order(phases["phase"])].sort_index()


def heatmap_figure(matrix: pd.DataFrame, ratio: pd.Series):
    """Colour: each cell's time relative to the phase's median rank (1 = the median), text: ms."""
    import plotly.graph_objects as go

    rel = matrix / matrix.median(axis=0)
    ys = [f"rank {r}" for r in matrix.index]
    fig = go.Figure(
        go.Heatmap(
            z=rel.to_numpy(),
            x=[f"{p} (x{ratio.get(p, 1.0):.2f})" for p in matrix.columns],
            y=ys,
            text=matrix.round(3).to_numpy(),
            texttemplate="%{text} ms",
            customdata=matrix.to_numpy(),
            colorscale="RdBu_r",
            zmid=1.0,
            colorbar={"title": "÷ median"},
            hovertemplate=hover(
                "%{y}, %{x}", "mean per step: %{customdata:,.3f} ms", "÷ median rank: %{z:.3f}"
            ),
        )
    )
    fig.update_layout(
        template=TEMPLATE,
        xaxis_title="phase (straggler ratio: slowest ÷ median rank)",
        yaxis={"autorange": "reversed"},
        height=max(260, 40 * len(ys) + 120),
    )
    return fig


def rank_heatmap_panel(data: DashboardData) -> Panel:
    missing = _missing(data)
    if missing:
        return Panel(missing=missing)
    assert data.ranks is not None
    matrix = rank_phase_matrix(data.ranks)
    ratio = matrix.max(axis=0) / matrix.median(axis=0)
    slow = matrix.idxmax(axis=0)
    notes = [
        f"{p}: slowest rank {slow[p]} at {ratio[p]:.2f}× the median rank"
        for p in matrix.columns
        if len(matrix) > 1 and ratio[p] >= 1.05
    ]
    return Panel(figure=heatmap_figure(matrix, ratio), notes=notes)


def timeline_figure(phases: pd.DataFrame):
    """One lane per rank; a bar per phase range, x in ms since the common start."""
    import plotly.graph_objects as go

    fig = go.Figure()
    lanes = [f"rank {r}" for r in sorted(phases["rank"].unique())]
    names = _order(phases["phase"])
    names = [n for n in names if n == "step"] + [n for n in names if n != "step"]  # steps underneath
    for i, phase in enumerate(names):
        part = phases[phases["phase"] == phase]
        color = PHASE_COLOR_ALLREDUCE if phase == "allreduce" else phase_color(phase, i)
        fig.add_bar(
            name=phase,
            y=[f"rank {r}" for r in part["rank"]],
            x=(part["duration_ns"] / MS).to_numpy(),
            base=(part["start_ns"] / MS).to_numpy(),
            orientation="h",
            marker_color=color,
            opacity=0.45 if phase == "step" else 0.9,
            width=0.9 if phase == "step" else 0.6,
            customdata=part[["step"]].to_numpy(),
            hovertemplate=hover(
                f"{phase}, %{{y}}", "step %{customdata[0]}", "start %{base:,.3f} ms", "%{x:,.3f} ms"
            ),
        )
    fig.update_layout(
        template=TEMPLATE,
        barmode="overlay",
        xaxis_title="ms since the earliest session start",
        yaxis={"categoryorder": "array", "categoryarray": lanes, "autorange": "reversed"},
        height=max(260, 50 * len(lanes) + 140),
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.02},
    )
    return fig


def rank_timeline_panel(data: DashboardData) -> Panel:
    missing = _missing(data)
    if missing:
        return Panel(missing=missing)
    assert data.ranks is not None
    ev = data.ranks
    notes = []
    if len(ev) > MAX_TIMELINE_RANGES:
        ev = ev.nlargest(MAX_TIMELINE_RANGES, "duration_ns")
        notes.append(f"Showing the {MAX_TIMELINE_RANGES:,} longest of {len(data.ranks):,} ranges.")
    return Panel(figure=timeline_figure(ev), notes=notes)
