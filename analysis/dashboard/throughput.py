"""Panel 5: tokens/s and, where known, achieved TFLOP/s and MFU per configuration."""

from __future__ import annotations

import pandas as pd

from analysis.dashboard.panel import DashboardData, Panel
from analysis.dashboard.runs import latest_per_config, model_order, setting_order, with_labels
from analysis.dashboard.style import PALETTE, TEMPLATE, hover
from analysis.names import MEASURED_STATUSES

# column, subplot title, scale to the unit shown, hover format
METRICS = (
    ("tokens_per_s", "tokens/s", 1.0, ",.1f"),
    ("achieved_flops", "achieved TFLOP/s", 1e-12, ",.3f"),
    ("mfu", "MFU (%)", 100.0, ".2f"),
)


def throughput_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Newest successful run per configuration: model, setting, run_id and the three metrics (raw units)."""
    cols = ["model", "setting", "run_id", *(m[0] for m in METRICS)]
    if runs.empty:
        return pd.DataFrame(columns=cols)
    ok = runs[runs["status"].isin(MEASURED_STATUSES)]
    if ok.empty:
        return pd.DataFrame(columns=cols)
    return with_labels(latest_per_config(ok))[cols].reset_index(drop=True)


def throughput_figure(table: pd.DataFrame, models: list[str] | None = None):
    """One subplot per metric with data; bars per model, one colour per setting."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    metrics = [m for m in METRICS if m[0] in table and table[m[0]].notna().any()]
    settings = setting_order(table["setting"])
    models = models or list(dict.fromkeys(table["model"]))
    fig = make_subplots(rows=1, cols=len(metrics), subplot_titles=[m[1] for m in metrics])
    for col, (name, title, scale, fmt) in enumerate(metrics, start=1):
        for i, setting in enumerate(settings):
            part = table[(table["setting"] == setting) & table[name].notna()]
            if part.empty:
                continue
            fig.add_trace(
                go.Bar(
                    name=setting,
                    legendgroup=setting,
                    showlegend=col == 1,
                    x=part["model"],
                    y=part[name].astype(float) * scale,
                    marker_color=PALETTE[i % len(PALETTE)],
                    customdata=part[["run_id", name]].to_numpy(),
                    hovertemplate=hover(
                        f"%{{x}} · {setting}",
                        f"{title}: %{{y:{fmt}}}",
                        "raw: %{customdata[1]}",
                        "run %{customdata[0]}",
                    ),
                ),
                row=1,
                col=col,
            )
        fig.update_yaxes(title_text=title, row=1, col=col)
        fig.update_xaxes(categoryorder="array", categoryarray=models, title_text="model", row=1, col=col)
    fig.update_layout(template=TEMPLATE, barmode="group", height=420, legend_title_text="setting")
    return fig


def throughput_panel(data: DashboardData) -> Panel:
    table = throughput_table(data.runs)
    if table.empty or table["tokens_per_s"].isna().all():
        return Panel(missing="no successful runs with throughput: run `harness run tiny --device cpu`")
    notes = []
    if table["mfu"].isna().all():
        notes.append("MFU needs the device's peak FLOP/s, which is not known here (CPU runs have none).")
    return Panel(figure=throughput_figure(table, model_order(data.runs)), notes=notes)
