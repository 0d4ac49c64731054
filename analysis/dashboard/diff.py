"""`harness diff A B --html OUT.html`: the diff as a page of panels.

- one panel per analysis.compare.diff table (kernels, NVTX ranges, operators, a profiler step): the `top`
largest
  changes in total time, B − A, as horizontal bars (red where B is slower, teal where faster), names that
  only one side has marked `added` / `removed`;
- for two runs, the per-phase verdicts: the relative difference of the means (B against A) with its 95%
  confidence interval, coloured by verdict.

Not one of the dashboard's registered panels: those are drawn from a results database (its compare panel
already shows two runs side by side), while a diff is of two sides named on the command line, runs or
exports alike. The page reuses the dashboard's page (analysis.dashboard.page.render_html).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from analysis.dashboard.page import Dashboard, render_html, write_page
from analysis.dashboard.panel import Panel
from analysis.dashboard.style import KERNEL_COLOR, MS, OOM_COLOR, TEMPLATE, plain_short

if TYPE_CHECKING:
    import plotly.graph_objects as go

TOP = 15
MARKED = ("added", "removed")  # a name only one side has
VERDICT_COLORS = {"regression": OOM_COLOR, "improvement": KERNEL_COLOR, "inconclusive": "#999999"}


def diff_figure(table: pd.DataFrame, title: str = "Largest changes (B − A)", top: int = TOP) -> go.Figure:
    """Bars of Δ Total Time (ms) for the `top` rows of an analysis.compare.diff table (already sorted by
    impact):
    red where B is slower, teal where faster; names only one side has are hatched and marked (added) or
    (removed)."""
    import plotly.graph_objects as go

    rows = table.head(top).iloc[::-1]  # largest at the top
    delta = rows["Δ Total Time (ns)"]
    marked = [c in MARKED for c in rows["Change"]]
    names = _unique([plain_short(s, 50) for s in rows["Name"]])
    labels = [f"{n} ({c})" if m else n for n, c, m in zip(names, rows["Change"], marked, strict=True)]
    fig = go.Figure(
        go.Bar(
            orientation="h",
            y=labels,
            x=delta / MS,
            marker_color=[OOM_COLOR if d > 0 else KERNEL_COLOR for d in delta],
            marker_pattern_shape=["/" if m else "" for m in marked],
            customdata=rows[["Change", "Instances A", "Instances B", "Δ Total Time (%)"]].to_numpy(),
            hovertemplate="%{y}<br>Δ %{x:.3f} ms (%{customdata[3]:+.1f}%)<br>%{customdata[0]}: "
            "%{customdata[1]} → %{customdata[2]} instances<extra></extra>",
        )
    )
    fig.update_yaxes(tickmode="array", tickvals=labels, ticktext=labels, automargin=True)
    fig.update_layout(
        template=TEMPLATE,
        title=title or None,
        xaxis_title="Δ total time (ms)",
        height=(120 if title else 90) + 26 * len(rows),
        margin={"t": 50 if title else 20, "b": 50},
    )
    return fig


def _unique(labels: list[str]) -> list[str]:
    """Labels made distinct (two long names can shorten alike; plotly would stack their bars as one)."""
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        out.append(label if seen[label] == 1 else f"{label} [{seen[label]}]")
    return out


def table_panel(key: str, title: str, table: pd.DataFrame, top: int = TOP) -> Panel:
    """One diff table as a panel: the bars, or a line saying that nothing changed."""
    changed = table[table["Change"] != "same"]
    what = title.lower()
    if table.empty:
        return Panel(key=key, title=title, missing=f"neither side has {what}")
    if changed.empty:
        return Panel(
            key=key, title=title, missing=f"no change: {len(table)} {what}, same count and total time"
        )
    counts = changed["Change"].value_counts()
    said = ", ".join(f"{counts[c]} {c}" for c in ("added", "removed", "changed") if c in counts)
    shown = min(top, len(changed))
    return Panel(
        key=key,
        title=f"{title}: top {shown} of {len(table)} by |Δ total time|",
        figure=diff_figure(changed, title="", top=top),
        notes=[f"{said}; {len(table) - len(changed)} the same."],
    )


def verdict_figure(verdicts: pd.DataFrame, gate_pct: float | None = None) -> go.Figure:
    """Δ (%) per phase with its 95% CI as error bars, one colour per verdict; a dashed line at the gate."""
    import plotly.graph_objects as go

    rows = verdicts.iloc[::-1]  # the overall step at the bottom, as in the table
    fig = go.Figure()
    for verdict, color in VERDICT_COLORS.items():
        part = rows[rows["Verdict"] == verdict]
        if part.empty:
            continue
        delta = part["Δ (%)"].astype(float)
        fig.add_trace(
            go.Scatter(
                name=verdict,
                x=delta,
                y=part["Phase"],
                mode="markers",
                marker={"color": color, "size": 11},
                error_x={
                    "type": "data",
                    "symmetric": False,
                    "array": part["CI High (%)"].astype(float) - delta,
                    "arrayminus": delta - part["CI Low (%)"].astype(float),
                },
                customdata=part[["CI Low (%)", "CI High (%)", "Mean A (ns)", "Mean B (ns)"]].to_numpy(),
                hovertemplate="%{y}: %{x:+.2f}% (95% CI %{customdata[0]:+.2f}% … %{customdata[1]:+.2f}%)"
                "<br>mean %{customdata[2]:,.0f} → %{customdata[3]:,.0f} ns<extra>" + verdict + "</extra>",
            )
        )
    fig.add_vline(x=0, line_color="#444", line_width=1)
    if gate_pct is not None:
        fig.add_vline(
            x=gate_pct, line_dash="dash", line_color=OOM_COLOR, annotation_text=f"gate {gate_pct:g}%"
        )
    fig.update_layout(
        template=TEMPLATE,
        xaxis_title="B against A: Δ mean (%), 95% confidence interval",
        height=140 + 40 * len(rows),
        legend_title_text="verdict",
    )
    return fig


def verdict_panel(verdicts: pd.DataFrame | None, gate_pct: float | None = None) -> Panel:
    """The per-phase verdicts (analysis.compare.diff.verdict_table) of two runs; missing where a side is no
    run."""
    title = "Phases: B against A (95% CI of the relative difference of means)"
    if verdicts is None or verdicts.empty:
        missing = (
            "verdicts need two runs (their per-step timings); here a side is an export or trace"
            if verdicts is None
            else "the two runs time no phase in common: no verdict"
        )
        return Panel(key="verdicts", title=title, missing=missing)
    notes = [f"{r['Phase']}: {r['Verdict']}, {r['Detail']}" for _, r in verdicts.iterrows()]
    return Panel(key="verdicts", title=title, figure=verdict_figure(verdicts, gate_pct), notes=notes)


def diff_panels(
    tables: Sequence[tuple[str, pd.DataFrame]],
    verdicts: pd.DataFrame | None,
    *,
    top: int = TOP,
    gate_pct: float | None = None,
) -> list[Panel]:
    """The verdict panel, then one panel per diff table, in the order given."""
    panels = [verdict_panel(verdicts, gate_pct)]
    for i, (title, table) in enumerate(tables):
        panels.append(table_panel(f"diff-{i}", title, table, top))
    return panels


def write_diff_page(
    out: Path,
    panels: list[Panel],
    *,
    a: str,
    b: str,
    notes: Sequence[str] = (),
) -> Dashboard:
    """Write the page of `panels` to `out`: A and B in the header, the diff's notes under it."""
    subtitle = " ".join([f"A = `{a}`, B = `{b}`.", *notes])
    text = render_html(panels, title="harness diff", subtitle=subtitle, generator="harness diff")
    size = write_page(out, text)
    return Dashboard(path=out, panels=panels, size_bytes=size)
