"""Energy panel: FLOPs per joule (= FLOP/s per watt), tokens per joule and average power against batch size,
one line per model and setting: the shape of a batch-size sweep run with --power.

Reads the run-level energy columns of the runs frame (analysis.energy.RUN_ENERGY_FIELDS, from
analysis.energy.run_summary). Runs without them are left out, never drawn as zero.
"""

from __future__ import annotations

import pandas as pd

from analysis.dashboard.panel import DashboardData, Panel
from analysis.dashboard.runs import model_order, setting_order, with_labels
from analysis.dashboard.style import PALETTE, TEMPLATE, hover

# column, subplot title, scale to the unit shown, hover format
METRICS = (
    ("flops_per_j", "GFLOP per joule (GFLOP/s per W)", 1e-9, ",.3f"),
    ("tokens_per_j", "tokens per joule", 1.0, ",.2f"),
    ("avg_power_w", "average power (W)", 1.0, ",.1f"),
)
SWEEP_KEYS = ["model", "mode", "precision", "compile", "device", "batch_size"]


def energy_sweep_table(runs: pd.DataFrame) -> pd.DataFrame:
    """The newest successful run with energy figures per model, setting and batch size, in batch order.

    Columns: model, setting, batch_size, run_id and the METRICS columns (raw units).
    """
    cols = ["model", "setting", "batch_size", "run_id", *(m[0] for m in METRICS)]
    if runs.empty or not {"batch_size", *(m[0] for m in METRICS)} <= set(runs):
        return pd.DataFrame(columns=cols)
    ok = runs[(runs["status"] == "ok") & runs[[m[0] for m in METRICS]].notna().any(axis=1)]
    if ok.empty:
        return pd.DataFrame(columns=cols)
    keys = [k for k in SWEEP_KEYS if k in ok]
    newest = ok.assign(_order=range(len(ok))).sort_values("_order").groupby(keys, dropna=False).tail(1)
    table = with_labels(newest)[cols]
    return table.sort_values(["model", "setting", "batch_size"], ignore_index=True)


def energy_figure(table: pd.DataFrame, models: list[str] | None = None):
    """One subplot per metric with data; x is the batch size (log 2), one line per model · setting."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    metrics = [m for m in METRICS if table[m[0]].notna().any()]
    models = models or list(dict.fromkeys(table["model"]))
    settings = setting_order(table["setting"])
    fig = make_subplots(rows=1, cols=len(metrics), subplot_titles=[m[1] for m in metrics])
    batches = sorted(table["batch_size"].dropna().astype(int).unique())
    line = 0
    for model in models:
        for setting in settings:
            part = table[(table["model"] == model) & (table["setting"] == setting)]
            if part.empty:
                continue
            name = f"{model} · {setting}"
            color = PALETTE[line % len(PALETTE)]
            line += 1
            for col, (metric, title, scale, fmt) in enumerate(metrics, start=1):
                points = part[part[metric].notna()]
                fig.add_trace(
                    go.Scatter(
                        name=name,
                        legendgroup=name,
                        showlegend=col == 1,
                        x=points["batch_size"],
                        y=points[metric].astype(float) * scale,
                        mode="lines+markers",
                        line={"color": color},
                        customdata=points[["run_id", metric]].to_numpy(),
                        hovertemplate=hover(
                            f"{name} · batch %{{x}}",
                            f"{title}: %{{y:{fmt}}}",
                            "raw: %{customdata[1]}",
                            "run %{customdata[0]}",
                        ),
                    ),
                    row=1,
                    col=col,
                )
    for col, (_, title, _, _) in enumerate(metrics, start=1):
        fig.update_xaxes(type="log", tickvals=batches, title_text="batch size", row=1, col=col)
        fig.update_yaxes(title_text=title, rangemode="tozero", row=1, col=col)
    fig.update_layout(template=TEMPLATE, height=420, legend_title_text="model · setting")
    return fig


def energy_panel(data: DashboardData) -> Panel:
    table = energy_sweep_table(data.runs)
    if table.empty:
        return Panel(
            missing="no runs with energy figures: `harness run tiny --device cuda --power` on a machine with "
            "NVML (GPU) or readable RAPL (CPU); sweep batch sizes for the FLOPs-per-watt curve"
        )
    notes = []
    if table["batch_size"].nunique() < 2:
        notes.append("one batch size so far: sweep batch sizes (same model and setting) to see the curve.")
    if table["flops_per_j"].isna().all():
        notes.append("FLOPs per joule needs the run's analytic FLOPs; these runs have energy only.")
    return Panel(figure=energy_figure(table, model_order(data.runs)), notes=notes)
