"""Energy panel: FLOPs per joule (= FLOP/s per watt), tokens per joule and average power against batch size,
one line per model, precision and device: the plot of `harness sweep --batch-sizes 1,2,4,8 --power`.

Reads the run-level energy columns of the runs frame (workloads.names.RUN_ENERGY_FIELDS, from
analysis.runs.energy.run_summary) and `power_notes` (what a --power run found, or why nothing). Only what was
measured is drawn: a run without energy figures is left out, never drawn as zero, and the panel says why
those asked for with --power have none (no NVML GPU, no readable RAPL).
"""

from __future__ import annotations

import itertools

import pandas as pd

from analysis.dashboard.panel import DashboardData, Panel
from analysis.dashboard.runs import model_order, setting_order, with_labels
from analysis.dashboard.style import PALETTE, TEMPLATE, Metric, metric_subplots, metric_trace
from workloads.names import MEASURED_STATUSES

METRICS = (
    Metric("flops_per_j", "GFLOP per joule (GFLOP/s per W)", 1e-9, ",.3f"),
    Metric("tokens_per_j", "tokens per joule", 1.0, ",.2f"),
    Metric("avg_power_w", "average power (W)", 1.0, ",.1f"),
)
SWEEP_KEYS = ["model", "mode", "precision", "compile", "device", "batch_size"]


def energy_sweep_table(runs: pd.DataFrame) -> pd.DataFrame:
    """The newest successful run with energy figures per model, setting and batch size, in batch order.

    Columns: model, setting (precision, compile, and the mode where runs hold several), device,
    batch_size, experiment, run_id and the METRICS columns (raw units).
    """
    metrics = [m.column for m in METRICS]
    cols = ["model", "setting", "device", "batch_size", "experiment", "run_id", *metrics]
    if runs.empty or not {"batch_size", *metrics} <= set(runs):
        return pd.DataFrame(columns=cols)
    ok = runs[runs["status"].isin(MEASURED_STATUSES) & runs[metrics].notna().any(axis=1)]
    if ok.empty:
        return pd.DataFrame(columns=cols)
    keys = [k for k in SWEEP_KEYS if k in ok]
    newest = ok.assign(_order=range(len(ok))).sort_values("_order").groupby(keys, dropna=False).tail(1)
    # the device is a column of its own here, always named in the line, and the batch size is the x axis:
    # neither is part of the setting
    labelled = with_labels(newest.drop(columns=["device", "batch_size"], errors="ignore")).assign(
        device=newest.get("device", ""), batch_size=newest["batch_size"]
    )
    labelled = labelled.reindex(columns=cols)
    return labelled.sort_values(["model", "setting", "device", "batch_size"], ignore_index=True)


def unmeasured(runs: pd.DataFrame) -> pd.DataFrame:
    """Successful runs that asked for energy (--power: they have power_notes) and got none."""
    metrics = [m.column for m in METRICS]
    if runs.empty or "power_notes" not in runs or not set(metrics) <= set(runs):
        return runs.iloc[0:0]
    asked = runs[runs["status"].isin(MEASURED_STATUSES) & runs["power_notes"].notna()]
    return asked[asked[metrics].isna().all(axis=1)]


def _reasons(runs: pd.DataFrame) -> str:
    """The distinct power-note lines of `runs`, joined."""
    lines = dict.fromkeys(line for notes in runs["power_notes"] for line in str(notes).splitlines() if line)
    return "; ".join(lines) or "no reason recorded"


def energy_figure(table: pd.DataFrame, models: list[str] | None = None):
    """One subplot per metric with data; x is the batch size (log 2), one line per model · setting."""
    import plotly.graph_objects as go

    models = models or list(dict.fromkeys(table["model"]))
    settings = setting_order(table["setting"])
    devices = list(dict.fromkeys(table["device"]))
    fig, metrics = metric_subplots(table, METRICS)
    batches = sorted(table["batch_size"].dropna().astype(int).unique())
    line = 0
    for model, setting, device in itertools.product(models, settings, devices):
        part = table[(table["model"] == model) & (table["setting"] == setting) & (table["device"] == device)]
        if part.empty:
            continue
        name = f"{model} · {setting} · {device}"
        color = PALETTE[line % len(PALETTE)]
        line += 1
        hovers = (f"{name} · batch %{{x}}", "run %{customdata[0]} %{customdata[2]}")
        for col, metric in enumerate(metrics, start=1):
            points = part[part[metric.column].notna()]
            shown = points[["run_id", metric.column, "experiment"]].astype(object).fillna("")
            fig.add_trace(
                go.Scatter(
                    **metric_trace(metric, points, name, col, *hovers),
                    x=points["batch_size"],
                    mode="lines+markers",
                    line={"color": color},
                    customdata=shown.to_numpy(),
                ),
                row=1,
                col=col,
            )
    for col, metric in enumerate(metrics, start=1):
        fig.update_xaxes(type="log", tickvals=batches, title_text="batch size", row=1, col=col)
        fig.update_yaxes(title_text=metric.title, rangemode="tozero", row=1, col=col)
    fig.update_layout(template=TEMPLATE, height=420, legend_title_text="model · setting · device")
    return fig


def energy_panel(data: DashboardData) -> Panel:
    table = energy_sweep_table(data.runs)
    without = unmeasured(data.runs)
    if table.empty and not without.empty:
        return Panel(
            missing=f"no energy was measured: {len(without)} run(s) asked for it with --power and found no "
            f"power source ({_reasons(without)}). Nothing is drawn rather than made-up numbers: run "
            "`harness sweep --batch-sizes 1,2,4,8 --power` on a machine with an NVIDIA GPU (NVML) or "
            "readable RAPL"
        )
    if table.empty:
        return Panel(
            missing="no runs with energy figures: `harness sweep --models tiny --device cuda --batch-sizes "
            "1,2,4,8 --power` on a machine with NVML (GPU) or readable RAPL (CPU) draws the FLOPs-per-watt "
            "curve"
        )
    notes = []
    if not without.empty:
        notes.append(
            f"{len(without)} run(s) with --power measured no energy and are not drawn: {_reasons(without)}."
        )
    if table["batch_size"].nunique() < 2:
        notes.append("one batch size so far: sweep batch sizes (same model and setting) to see the curve.")
    if table["flops_per_j"].isna().all():
        notes.append("FLOPs per joule needs the run's analytic FLOPs; these runs have energy only.")
    return Panel(figure=energy_figure(table, model_order(data.runs)), notes=notes)
