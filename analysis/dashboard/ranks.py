"""Multi-rank panels (`harness ranks --html`): what `harness ranks` reports of the straggler (per rank its
compute and its wait in collectives per step, the straggler named with what it costs the others:
analysis.ranks.ranks.straggler_table), a ranks × phases heatmap of the mean time per step, and a timeline with
every rank's phase ranges on one clock (ns since the earliest report's session start)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pandas as pd

from analysis.dashboard.panel import DashboardData, Panel
from analysis.dashboard.style import MS, TEMPLATE, hover, ordered_phases, phase_color
from analysis.ranks.ranks import straggler_note, straggler_table

RANK_PHASES = ("forward", "backward", "allreduce", "optimizer", "prefill", "decode", "step")
MAX_TIMELINE_RANGES = 20_000
PHASE_COLOR_ALLREDUCE = "#E45756"
COMPUTE_COLOR = "#4C78A8"
COMPUTE_TRACE = "compute (every phase but the collectives)"
WAIT_TRACE = "wait in collectives (all-reduce)"
STRAGGLER_AXIS = "ms per step (mean): compute, then the wait in collectives"
NO_RANKS = "no per-rank phase ranges: `harness ranks EXPORTS --html OUT` draws this panel"


def _of_ranks(draw: Callable[[pd.DataFrame], Panel]) -> Callable[[DashboardData], Panel]:
    """A panel drawn from the per-rank phase ranges (DashboardData.ranks); without them, the line saying how
    to get them."""

    @functools.wraps(draw)
    def build(data: DashboardData) -> Panel:
        if data.ranks is None or data.ranks.empty:
            return Panel(missing=NO_RANKS)
        return draw(data.ranks)

    return build


def _order(names: pd.Series) -> list[str]:
    present = list(dict.fromkeys(names))
    return [p for p in RANK_PHASES if p in present] + ordered_phases(
        n for n in present if n not in RANK_PHASES
    )


def rank_phase_matrix(phases: pd.DataFrame) -> pd.DataFrame:
    """Mean ms per step, ranks as rows, phases (step order) as columns."""
    mean = phases.groupby(["rank", "phase"])["duration_ns"].mean().unstack() / MS
    return mean[_order(phases["phase"])].sort_index()


def heatmap_figure(matrix: pd.DataFrame):
    """Colour: each cell's time relative to the phase's median rank (1 = the median), text: ms. In a
    collective the slowest rank is the one that waited longest, not the straggler: the straggler panel
    names that one."""
    import plotly.graph_objects as go

    rel = matrix / matrix.median(axis=0)
    ys = [f"rank {r}" for r in matrix.index]
    fig = go.Figure(
        go.Heatmap(
            z=rel.to_numpy(),
            x=list(matrix.columns),
            y=ys,
            text=matrix.round(3).to_numpy(),
            texttemplate="%{text} ms",
            customdata=matrix.to_numpy(),
            colorscale="RdBu_r",
            zmid=1.0,
            colorbar={"title": "÷ median rank"},
            hovertemplate=hover(
                "%{y}, %{x}", "mean per step: %{customdata:,.3f} ms", "÷ median rank: %{z:.3f}"
            ),
        )
    )
    fig.update_layout(
        template=TEMPLATE,
        xaxis_title="phase (colour: the rank's mean ÷ the phase's median rank)",
        yaxis={"autorange": "reversed"},
        height=max(260, 40 * len(ys) + 120),
    )
    return fig


@_of_ranks
def rank_heatmap_panel(ranks: pd.DataFrame) -> Panel:
    matrix = rank_phase_matrix(ranks)
    notes = []
    if len(matrix) > 1 and "allreduce" in matrix.columns:
        notes.append(
            f"allreduce: rank {matrix['allreduce'].idxmax()} spends longest in it, waiting for the last rank "
            "to arrive: a victim, not the straggler (the straggler panel names the rank that arrives last)"
        )
    return Panel(figure=heatmap_figure(matrix), notes=notes)


def straggler_figure(table: pd.DataFrame):
    """`harness ranks`' straggler table (ns) drawn: a bar per rank of its compute and, stacked after it, its
    wait in collectives (ms per step); the straggler's bar is labelled with what it costs the others."""
    import plotly.graph_objects as go

    row = _straggler(table)
    straggler = None if row is None else int(row["Rank"])
    ys = [f"rank {r}" + (" (straggler)" if r == straggler else "") for r in table["Rank"]]
    fig = go.Figure()
    _rank_bars(fig, ys, table["Compute (ns)"] / MS, COMPUTE_TRACE, COMPUTE_COLOR, "compute")
    if table["Wait (ns)"].notna().any():
        costs = [
            f"costs the others {c / MS:,.3f} ms" if r == straggler else ""
            for r, c in zip(table["Rank"], table["Costs Others (ns)"], strict=True)
        ]
        label = {"text": costs, "textposition": "outside", "cliponaxis": False}
        _rank_bars(
            fig, ys, table["Wait (ns)"] / MS, WAIT_TRACE, PHASE_COLOR_ALLREDUCE, "wait in collectives", label
        )
    fig.update_layout(
        template=TEMPLATE,
        barmode="stack",
        xaxis_title=STRAGGLER_AXIS,
        yaxis={"title": "rank", "autorange": "reversed"},
        height=max(240, 50 * len(ys) + 140),
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "traceorder": "normal"},
        margin={"r": 160},
    )
    return fig


def _rank_bars(
    fig: Any,
    ys: list[str],
    ms: pd.Series,
    name: str,
    color: str,
    what: str,
    label: dict[str, Any] | None = None,
) -> None:
    """One part of every rank's stacked bar: `ms` per step of `what`; `label`: a text over each bar."""
    lines = [f"{what}: %{{x:,.3f}} ms per step", *(["%{text}"] if label else [])]
    fig.add_bar(name=name, y=ys, x=ms.to_numpy(), orientation="h", marker_color=color,
                hovertemplate=hover("%{y}", *lines), **(label or {}))  # fmt: skip


def _straggler(table: pd.DataFrame) -> pd.Series | None:
    """The straggler table's row of the rank it names, if it names one."""
    named = table[table["Straggler"] != "-"]
    return None if named.empty else named.iloc[0]


def straggler_title(table: pd.DataFrame) -> str:
    """The panel's title: who arrives last and what it costs the others, or that no rank is one."""
    row = _straggler(table)
    if row is None:
        return "Straggler: none (compute and wait in collectives per rank)"
    cost = row["Costs Others (ns)"]
    costs = "" if pd.isna(cost) else f", costs the others {cost / MS:,.3f} ms per step"
    return f"Straggler: rank {row['Rank']} arrives last{costs}"


@_of_ranks
def rank_straggler_panel(ranks: pd.DataFrame) -> Panel:
    table = straggler_table(ranks)
    if table.empty:
        return Panel(missing="one rank, or whole captures without phases: no straggler to name")
    return Panel(figure=straggler_figure(table), notes=[straggler_note(table)], title=straggler_title(table))


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


@_of_ranks
def rank_timeline_panel(ranks: pd.DataFrame) -> Panel:
    ev = ranks
    notes = []
    if len(ev) > MAX_TIMELINE_RANGES:
        ev = ev.nlargest(MAX_TIMELINE_RANGES, "duration_ns")
        notes.append(f"Showing the {MAX_TIMELINE_RANGES:,} longest of {len(ranks):,} ranges.")
    return Panel(figure=timeline_figure(ev), notes=notes)
