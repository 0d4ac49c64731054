"""Findings panel: the newest run's findings as bars of their time at stake (the upper bound on what fixing
each can save, analysis.advice.findings), with its health line as the title: what `run --nsys` printed
after its tables and `show RUN` repeats.

Reads the `advice` column of the runs frame (analysis.advice.record, stored with a run by `run --nsys`).
A run without stored advice is left out; the panel says how to get some. A run whose capture failed its
health checks (stored as `degraded`) gets no bars: the panel says why its findings are not ranked.
"""

from __future__ import annotations

import pandas as pd

from analysis.advice.record import findings_frame, health_line, untrusted_line
from analysis.dashboard.panel import DashboardData, Panel
from analysis.dashboard.style import MS, PALETTE, TEMPLATE, hover


def newest_advice(runs: pd.DataFrame) -> tuple[str, dict] | None:
    """(run id, advice) of the newest run that has stored advice."""
    if "advice" not in runs.columns:
        return None
    have = runs[runs["advice"].map(lambda a: isinstance(a, dict) and "health" in a)]
    if have.empty:
        return None
    newest = have.sort_values("created_at", kind="stable").iloc[-1]
    return str(newest["run_id"]), newest["advice"]


def findings_panel(data: DashboardData) -> Panel:
    import plotly.graph_objects as go

    found = newest_advice(data.runs)
    if found is None:
        return Panel(missing="no run with stored findings: `harness run tiny --nsys` stores them")
    run_id, record = found
    line = health_line(record)
    untrusted = untrusted_line(record, run_id)
    if untrusted:  # a degraded run: its findings are not drawn as if they could be trusted
        return Panel(missing=f"run {run_id}: {untrusted}; {line}")
    table = findings_frame(record)
    if table.empty:
        return Panel(missing=f"run {run_id}: no finding fired; {line}")
    table = table.iloc[::-1]  # largest at the top
    fig = go.Figure(
        go.Bar(
            x=table["Time at stake (ns)"] / MS,
            y=table["Rule"],
            orientation="h",
            marker_color=PALETTE[0],
            # outside text (kernel and range names): escaped as every panel's (PanelSpec), never markup
            customdata=table[["Where", "Evidence", "Fix"]].map(str).to_numpy(),
            hovertemplate=hover(
                "%{y}",
                "at stake: %{x:,.3f} ms",
                "where: %{customdata[0]}",
                "%{customdata[1]}",
                "fix: %{customdata[2]}",
            ),
        )
    )
    fig.update_layout(
        template=TEMPLATE,
        height=max(240, 60 * len(table) + 120),
        xaxis_title="time at stake (ms): an upper bound on what fixing it saves",
        showlegend=False,
    )
    return Panel(figure=fig, title=f"Findings of run {run_id}, largest time at stake first", notes=[line])
