"""Panel 5: tokens/s and, where known, achieved TFLOP/s and MFU per configuration."""

from __future__ import annotations

import pandas as pd

from analysis.dashboard.panel import DashboardData, Panel
from analysis.dashboard.runs import latest_per_config, model_order, setting_order, with_labels
from analysis.dashboard.style import PALETTE, Metric, grouped_bars, metric_subplots, metric_trace
from workloads.names import MEASURED_STATUSES

METRICS = (
    Metric("tokens_per_s", "tokens/s", 1.0, ",.1f"),
    Metric("achieved_flops", "achieved TFLOP/s", 1e-12, ",.3f"),
    Metric("mfu", "MFU (%)", 100.0, ".2f"),
)


def throughput_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Newest successful run per configuration: model, setting, run_id and the three metrics (raw units)."""
    cols = ["model", "setting", "run_id", *(m.column for m in METRICS)]
    if runs.empty:
        return pd.DataFrame(columns=cols)
    ok = runs[runs["status"].isin(MEASURED_STATUSES)]
    if ok.empty:
        return pd.DataFrame(columns=cols)
    return with_labels(latest_per_config(ok))[cols].reset_index(drop=True)


def throughput_figure(table: pd.DataFrame, models: list[str] | None = None):
    """One subplot per metric with data; bars per model, one colour per setting."""
    import plotly.graph_objects as go

    settings = setting_order(table["setting"])
    models = models or list(dict.fromkeys(table["model"]))
    fig, metrics = metric_subplots(table, METRICS)
    for col, metric in enumerate(metrics, start=1):
        for i, setting in enumerate(settings):
            part = table[(table["setting"] == setting) & table[metric.column].notna()]
            if part.empty:
                continue
            fig.add_trace(
                go.Bar(
                    **metric_trace(metric, part, setting, col, f"%{{x}} · {setting}", "run %{customdata[0]}"),
                    x=part["model"],
                    marker_color=PALETTE[i % len(PALETTE)],
                    customdata=part[["run_id", metric.column]].to_numpy(),
                ),
                row=1,
                col=col,
            )
        fig.update_yaxes(title_text=metric.title, row=1, col=col)
        fig.update_xaxes(categoryorder="array", categoryarray=models, title_text="model", row=1, col=col)
    return grouped_bars(fig, 420, "setting")


def throughput_panel(data: DashboardData) -> Panel:
    table = throughput_table(data.runs)
    if table.empty or table["tokens_per_s"].isna().all():
        return Panel(missing="no successful runs with throughput: run `harness run tiny --device cpu`")
    notes = []
    if table["mfu"].isna().all():
        notes.append("MFU needs the device's peak FLOP/s, which is not known here (CPU runs have none).")
    return Panel(figure=throughput_figure(table, model_order(data.runs)), notes=notes)
