"""Eager against torch.compile: median time per phase of the same configuration, side by side, with the
speed-up over each pair and the compile time (the compiled run's first step beyond its median) noted."""

from __future__ import annotations

import pandas as pd

from analysis.compare.compile import COMPILE, STEP, compile_comparison
from analysis.dashboard.panel import DashboardData, Panel
from analysis.dashboard.style import MS, PALETTE, fmt_ns, grouped_bars, hover, ns_ms, plain

NO_PAIRS = (
    "no configuration run both eager and compiled: run `harness run tiny --device cpu --steps 3` and "
    "`harness run tiny --device cpu --steps 3 --compile`"
)
# a configuration's sizes in its label: two configurations of a model never share one
SIZES = (("batch_size", "batch"), ("context_length", "context"), ("new_tokens", "new tokens"))
SIDES = (("eager", "eager (ns)", PALETTE[2]), ("compiled", "compiled (ns)", PALETTE[5]))


def _config(row: dict) -> str:
    sizes = [f"{w} {int(row[k])}" for k, w in SIZES if k in row and pd.notna(row[k])]
    parts = [row["model"], row["mode"], row["precision"], row["device"], *sizes]
    return " · ".join(str(p) for p in parts if p is not None and p == p)


def compile_figure(table: pd.DataFrame):
    """Grouped bars: per configuration and phase (x), eager and compiled median (ms); speed-up on top."""
    import plotly.graph_objects as go

    # the label's line break is markup of its own: the model's name and the run ids are escaped here
    t = table.assign(x=[f"{plain(_config(r))}<br>{plain(r['phase'])}" for r in table.to_dict("records")])
    fig = go.Figure()
    for name, col, color in SIDES:
        fig.add_trace(
            go.Bar(
                name=name,
                x=t["x"],
                y=t[col] / MS,
                marker_color=color,
                text=[f"×{s:.2f}" if name == "compiled" and s == s else "" for s in t["speed-up"]],
                textposition="outside",
                customdata=pd.DataFrame({"ns": t[col], "run": t[f"{name} run"].map(plain)}).to_numpy(),
                hovertemplate=hover(
                    f"%{{x}} · {name}", ns_ms("median", "y", "customdata[0]"), "run %{customdata[1]}"
                ),
            )
        )
    legend = "torch.compile (label: speed-up)"
    y = "median time of the measured steps (ms)"
    return grouped_bars(fig, 440, legend, x="configuration and phase", y=y)


def compile_panel(data: DashboardData) -> Panel:
    table = compile_comparison(data.runs, data.steps)
    if table.empty:
        return Panel(missing=NO_PAIRS)
    notes = [
        "Median of the measured steps of the newest eager and compiled run of each configuration (runs "
        "without a profiler); the label over a compiled bar is the speed-up (eager / compiled)."
    ]
    for row in table[table["phase"] == STEP].to_dict("records"):
        c = row[COMPILE]
        if c is not None and c == c:
            notes.append(
                f"{_config(row)}: compile (first step) {fmt_ns(c)}, that is "
                f"{c / row['compiled (ns)']:,.0f} compiled steps."
            )
    return Panel(figure=compile_figure(table), notes=notes)
