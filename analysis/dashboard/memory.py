"""Memory timeline of a `--memory` run on CUDA: allocated bytes after each allocator event over the
measured steps, drawn from the run's snapshot (analysis.runs.memory), the phases shaded behind it."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from analysis.dashboard.panel import DashboardData, Panel
from analysis.dashboard.style import MS, PHASE_COLORS, TEMPLATE, hover, phase_color
from analysis.errors import AnalysisError, first_line
from analysis.runs.memory import memory_timeline, phase_peaks, read_snapshot

NO_SNAPSHOT = (
    "no run with a memory snapshot: run `harness run tiny --device cuda --memory` on a GPU "
    "(on the CPU, --memory prints torch.profiler's memory table instead)"
)
MIB = 2**20


def snapshot_run(runs: pd.DataFrame) -> dict | None:
    """The newest run whose artifacts hold a memory snapshot."""
    if runs.empty or "artifacts" not in runs:
        return None
    for row in reversed(runs.to_dict("records")):
        files = row.get("artifacts")
        if isinstance(files, dict) and files.get("memory_snapshot"):
            return row
    return None


def load_timeline(snapshot: str | Path, phases: str | Path | None) -> pd.DataFrame:
    intervals = None
    if phases and Path(phases).is_file():
        intervals = pd.DataFrame(json.loads(Path(phases).read_text()))
    return memory_timeline(read_snapshot(snapshot), intervals)


def memory_figure(timeline: pd.DataFrame):
    """Allocated MiB against time (ms from the first event) per device; phases shaded by colour."""
    import plotly.graph_objects as go

    t = timeline.copy()
    timed = t["time_ns"].notna().all()
    origin = float(t["time_ns"].min()) if timed else 0.0
    t["x"] = (t["time_ns"].astype(float) - origin) / MS if timed else t["event"]
    fig = go.Figure()
    for device, part in t.groupby("device"):
        fig.add_trace(
            go.Scatter(
                name=f"cuda:{device}",
                x=part["x"],
                y=part["allocated_bytes"] / MIB,
                mode="lines",
                line={"shape": "hv", "color": "#333333"},
                customdata=part[["action", "size", "phase"]].fillna("").to_numpy(),
                hovertemplate=hover(
                    "%{customdata[2]}",
                    "allocated: %{y:,.1f} MiB",
                    "%{customdata[0]} of %{customdata[1]:,} bytes",
                ),
            )
        )
    if timed:
        spans = t[t["phase"].notna()].groupby(["step", "phase"], sort=False)["x"].agg(["min", "max"])
        seen: set[str] = set()
        for i, ((_, phase), span) in enumerate(spans.iterrows()):
            fig.add_vrect(
                x0=span["min"], x1=span["max"], fillcolor=phase_color(phase, i), opacity=0.18, line_width=0
            )
            if phase not in seen:  # a legend entry per phase
                seen.add(phase)
                fig.add_trace(
                    go.Scatter(
                        x=[None], y=[None], mode="markers", name=phase,
                        marker={"color": PHASE_COLORS.get(phase, phase_color(phase, i)), "symbol": "square"},
                    )
                )  # fmt: skip
    fig.update_layout(
        template=TEMPLATE,
        height=420,
        xaxis_title="time since the first recorded event (ms)" if timed else "allocator event",
        yaxis_title="allocated (MiB)",
        legend_title_text="device / phase",
    )
    return fig


def memory_panel(data: DashboardData) -> Panel:
    run = snapshot_run(data.runs)
    if run is None:
        return Panel(missing=NO_SNAPSHOT)
    files = run["artifacts"]
    try:
        timeline = load_timeline(files["memory_snapshot"], files.get("memory_phases"))
    except (AnalysisError, OSError, ValueError) as e:
        return Panel(missing=f"run {run['run_id']}: {first_line(e)}")
    if timeline.empty:
        return Panel(missing=f"run {run['run_id']}: its snapshot holds no allocations")
    notes = [f"Run {run['run_id']}: {len(timeline):,} allocations and frees over the measured steps."]
    for p in phase_peaks(timeline).to_dict("records"):
        peak, net = p["peak_bytes"] / MIB, p["net_bytes"] / MIB
        notes.append(f"{p['phase']}: peak {peak:,.1f} MiB allocated, net {net:+,.1f} MiB.")
    where = run.get("device_name") or run.get("device")
    title = f"Memory timeline: {run['model']} {run.get('mode', '')} on {where}"
    return Panel(figure=memory_figure(timeline), title=title, notes=notes)
