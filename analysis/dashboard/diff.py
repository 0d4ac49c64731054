"""A figure of a `harness diff` table: the largest changes in total time, B − A, as horizontal bars.

Not registered as a panel of its own: the dashboard's compare panel (analysis.dashboard.compare) already
shows two runs side by side; this figure draws any table of analysis.diff (kernels, NVTX ranges,
operators, a profiler step), for pages or reports that hold one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from analysis.dashboard.style import KERNEL_COLOR, MS, OOM_COLOR, TEMPLATE, shorten

if TYPE_CHECKING:
    import plotly.graph_objects as go

TOP = 15


def diff_figure(table: pd.DataFrame, title: str = "Largest changes (B − A)", top: int = TOP) -> go.Figure:
    """Bars of Δ Total Time (ms) for the `top` rows of an analysis.diff table (already sorted by impact):
    red where B is slower, teal where faster."""
    import plotly.graph_objects as go

    rows = table.head(top).iloc[::-1]  # largest at the top
    delta = rows["Δ Total Time (ns)"]
    fig = go.Figure(
        go.Bar(
            orientation="h",
            y=[shorten(str(s), 50) for s in rows["Name"]],
            x=delta / MS,
            marker_color=[OOM_COLOR if d > 0 else KERNEL_COLOR for d in delta],
            customdata=rows[["Change", "Instances A", "Instances B", "Δ Total Time (%)"]].to_numpy(),
            hovertemplate="%{y}<br>Δ %{x:.3f} ms (%{customdata[3]:+.1f}%)<br>%{customdata[0]}: "
            "%{customdata[1]} → %{customdata[2]} instances<extra></extra>",
        )
    )
    fig.update_layout(
        template=TEMPLATE, title=title, xaxis_title="Δ total time (ms)", height=120 + 24 * len(rows)
    )
    return fig
