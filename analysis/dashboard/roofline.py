"""Roofline figure: sub-blocks on log-log axes of intensity (FLOP/byte) and TFLOP/s under the device's roofs.

Built from analysis.runs.roofline.roofline_table. A sub-block with a measured time is a filled marker at its
achieved TFLOP/s; without one, a hollow marker on the roof at its attainable TFLOP/s (where it would sit at
100% of the roof), so the analytic table can be drawn before any per-block timing exists.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.dashboard.panel import DashboardData, Panel
from analysis.dashboard.style import TEMPLATE, hover, phase_color
from analysis.runs.roofline import Roofs

ROOF_COLOR = "#444444"
NO_ROOFLINE = (
    "no run with per-block times: run `harness run tiny --device cpu --nvtx-detail "
    "--steps 3`; `harness roofline RUN --measure --html FILE` also measures a CPU's roofs"
)


def roofline_figure(table: pd.DataFrame, roofs: Roofs | None, title: str = ""):
    """Log-log roofline; one colour per pass (forward, backward, optimizer), names beside the markers."""
    import plotly.graph_objects as go

    fig = go.Figure()
    drawn = table["achieved TFLOP/s"].notna() | table["attainable TFLOP/s"].notna()
    intensity = table["intensity"].astype(float)[drawn]
    positive = intensity[intensity > 0]
    lo = float(positive.min()) / 2 if len(positive) else 0.01
    hi = float(positive.max()) * 2 if len(positive) else 1000.0
    if roofs and roofs.ridge:
        lo, hi = min(lo, roofs.ridge / 10), max(hi, roofs.ridge * 10)
        xs = np.array([lo, roofs.ridge, hi])
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=np.asarray(roofs.attainable(xs)) / 1e12,
                mode="lines",
                name="roof",
                line={"color": ROOF_COLOR, "width": 2},
                hovertemplate=hover(
                    roofs.label,
                    f"peak {roofs.peak_flops / 1e12:,.2f} TFLOP/s",
                    f"bandwidth {roofs.bandwidth / 1e9:,.1f} GB/s",
                    f"ridge {roofs.ridge:,.1f} FLOP/byte",
                ),
            )
        )
    for i, (phase, part) in enumerate(table.groupby("pass", sort=False)):
        part = part[part["intensity"] > 0]
        measured = part["achieved TFLOP/s"].notna()
        for is_measured, rows in ((True, part[measured]), (False, part[~measured])):
            y = rows["achieved TFLOP/s"] if is_measured else rows["attainable TFLOP/s"]
            if rows.empty or y.isna().all():
                continue
            fig.add_trace(
                go.Scatter(
                    x=rows["intensity"],
                    y=y,
                    mode="markers+text",
                    name=f"{phase}" + ("" if is_measured else " (on the roof: no time yet)"),
                    text=rows["sub-block"],
                    textposition="top center",
                    marker={
                        "color": phase_color(str(phase), i),
                        "size": 10,
                        "symbol": "circle" if is_measured else "circle-open",
                        "line": {"width": 2, "color": phase_color(str(phase), i)},
                    },
                    customdata=rows[["flops", "bytes", "of roof (%)"]].to_numpy(),
                    hovertemplate=hover(
                        f"%{{text}} · {phase}",
                        "intensity: %{x:,.2f} FLOP/byte",
                        ("achieved" if is_measured else "attainable") + ": %{y:,.4f} TFLOP/s",
                        "FLOPs: %{customdata[0]:,.0f}",
                        "bytes: %{customdata[1]:,.0f}",
                        "of roof: %{customdata[2]:.1f}%",
                    ),
                )
            )
    fig.update_xaxes(
        type="log", title_text="arithmetic intensity (FLOP/byte)", range=[np.log10(lo), np.log10(hi)]
    )
    fig.update_yaxes(type="log", title_text="TFLOP/s")
    fig.update_layout(template=TEMPLATE, height=520, title=title or (roofs.label if roofs else "roofline"))
    return fig


def roofline_panel(data: DashboardData) -> Panel:
    """The newest run the blocks panel draws (block_runs): each timed sub-block at its achieved TFLOP/s and
    intensity."""
    found = data.roofline
    if found is None:
        return Panel(missing=NO_ROOFLINE)
    title = f"Roofline: {found.title}" + (f" · against {found.roofs.label}" if found.roofs else "")
    return Panel(
        figure=roofline_figure(found.table, found.roofs, found.title), notes=found.notes, title=title
    )
