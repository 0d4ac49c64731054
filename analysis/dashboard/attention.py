"""Attention sweeps (`harness attention`): forward+backward time over head dim × seq len, one heatmap per
implementation, on one colour scale (log10 of ms, since time grows with seq_len²), OOM cells marked."""

from __future__ import annotations

import math

import pandas as pd

from analysis.dashboard.panel import DashboardData, Panel
from analysis.dashboard.style import MS, OOM_COLOR, TEMPLATE, hover
from analysis.errors import OptionsError
from workloads.names import ATTENTION_IMPLS, counted


def sweep_ids(cells: pd.DataFrame) -> list[str]:
    """The ids of the sweeps `cells` hold, newest first (by each sweep's first cell)."""
    if cells.empty:
        return []
    first = cells.groupby("sweep_id", sort=False)["created_at"].min()
    return [str(s) for s in first.sort_values(ascending=False, kind="stable").index]


def newest_sweep(cells: pd.DataFrame) -> pd.DataFrame:
    """The cells of the sweep whose first cell is newest (rows in store order)."""
    return pick_sweep(cells, None)


def pick_sweep(cells: pd.DataFrame, sweep: str | None) -> pd.DataFrame:
    """The cells of sweep `sweep` (its id or a unique start of it), the newest sweep's when None.
    OptionsError when no sweep, or more than one, has an id so starting."""
    ids = sweep_ids(cells)
    if sweep is None:
        return cells[cells["sweep_id"] == ids[0]].reset_index(drop=True) if ids else cells
    matches = [s for s in ids if s == sweep] or [s for s in ids if s.startswith(sweep)]
    if not matches:
        held = f"{counted(len(ids), 'sweep')}, the newest {ids[0]}" if ids else "none"
        raise OptionsError(f"no attention sweep {sweep!r}: the results database holds {held}")
    if len(matches) > 1:
        shown = ", ".join(matches[:3]) + (", …" if len(matches) > 3 else "")
        raise OptionsError(
            f"{sweep!r} is the start of {len(matches)} sweeps' ids ({shown}): give more of one"
        )
    return cells[cells["sweep_id"] == matches[0]].reset_index(drop=True)


def attention_grid(cells: pd.DataFrame) -> pd.DataFrame:
    """One row per cell: impl, head_dim, seq_len, status, forward/backward/total ms, peak MiB."""
    out = cells[["impl", "head_dim", "seq_len", "status"]].copy()
    ok = cells["status"] == "ok"
    out["forward_ms"] = cells["forward_mean_ns"].where(ok).astype(float) / MS
    out["backward_ms"] = cells["backward_mean_ns"].where(ok).astype(float) / MS
    out["total_ms"] = out["forward_ms"] + out["backward_ms"]
    out["peak_mib"] = cells["peak_memory_bytes"].where(ok).astype(float) / 2**20
    return out


def _ticks(lo: float, hi: float) -> tuple[list[float], list[str]]:
    """Colour-bar ticks at 1, 2, 5 × 10ⁿ ms between lo and hi (ms), placed on the log10 scale."""
    values = [
        m * 10.0**e
        for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
        for m in (1, 2, 5)
    ]
    values = [v for v in values if lo <= v <= hi] or [lo, hi]
    return [math.log10(v) for v in values], [f"{v:g}" for v in values]


def attention_figure(grid: pd.DataFrame):
    """A heatmap per implementation: x seq_len, y head_dim, colour log10(forward+backward ms)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    impls = [i for i in ATTENTION_IMPLS if i in set(grid["impl"])] + sorted(
        set(grid["impl"]) - set(ATTENTION_IMPLS)
    )
    seq_lens = sorted(set(grid["seq_len"]))
    head_dims = sorted(set(grid["head_dim"]))
    xs, ys = [str(s) for s in seq_lens], [str(h) for h in head_dims]
    timed = grid["total_ms"].dropna()
    timed = timed[timed > 0]
    lo, hi = (timed.min(), timed.max()) if len(timed) else (1.0, 10.0)
    fig = make_subplots(rows=1, cols=len(impls), subplot_titles=impls, shared_yaxes=True)
    for col, impl in enumerate(impls, start=1):
        part = grid[grid["impl"] == impl].set_index(["head_dim", "seq_len"])
        z, text, custom = [], [], []
        for h in head_dims:
            z_row, text_row, custom_row = [], [], []
            for s in seq_lens:
                row = part.loc[(h, s)] if (h, s) in part.index else None
                total = None if row is None else row["total_ms"]
                has_time = total is not None and not math.isnan(total) and total > 0
                z_row.append(math.log10(total) if has_time else None)
                status = "not run" if row is None else row["status"]
                text_row.append(f"{total:.3g}" if has_time else status.upper())
                custom_row.append(
                    [status]
                    + [None if row is None else row[c] for c in ("forward_ms", "backward_ms", "peak_mib")]
                )
            z.append(z_row)
            text.append(text_row)
            custom.append(custom_row)
        fig.add_trace(
            go.Heatmap(
                x=xs,
                y=ys,
                z=z,
                text=text,
                texttemplate="%{text}",
                customdata=custom,
                coloraxis="coloraxis",
                xgap=2,
                ygap=2,
                hovertemplate=hover(
                    f"{impl}: head_dim %{{y}}, seq_len %{{x}}",
                    "status: %{customdata[0]}",
                    "forward: %{customdata[1]:,.3f} ms",
                    "backward: %{customdata[2]:,.3f} ms",
                    "peak memory: %{customdata[3]:,.1f} MiB",
                ),
            ),
            row=1,
            col=col,
        )
        oom = part[part["status"] != "ok"].reset_index()
        if not oom.empty:  # the heatmap leaves these cells blank; say why on top of them
            fig.add_trace(
                go.Scatter(
                    name="OOM / failed",
                    legendgroup="oom",
                    showlegend=col == 1,
                    x=oom["seq_len"].astype(str),
                    y=oom["head_dim"].astype(str),
                    mode="markers",
                    marker={"symbol": "x-thin", "size": 26, "line": {"width": 2, "color": OOM_COLOR}},
                    hovertemplate=hover(f"{impl}: %{{y}} × %{{x}}", "%{text}"),
                    text=oom["status"].str.upper(),
                ),
                row=1,
                col=col,
            )
        fig.update_xaxes(type="category", categoryorder="array", categoryarray=xs, title_text="seq_len",
                         row=1, col=col)  # fmt: skip
        fig.update_yaxes(type="category", categoryorder="array", categoryarray=ys, row=1, col=col)
    fig.update_yaxes(title_text="head_dim", row=1, col=1)
    tickvals, ticktext = _ticks(lo, hi)
    fig.update_layout(
        template=TEMPLATE,
        height=380,
        coloraxis={
            "colorscale": "Viridis",
            "cmin": math.log10(lo),
            "cmax": math.log10(hi) if hi > lo else math.log10(lo) + 1,
            "colorbar": {"title": {"text": "fwd+bwd ms"}, "tickvals": tickvals, "ticktext": ticktext},
        },
        legend={"orientation": "h", "y": -0.25},
    )
    return fig


def attention_panel(data: DashboardData) -> Panel:
    cells = pick_sweep(data.attention, None)  # one sweep: collect's choice
    if cells.empty:
        return Panel(missing="no attention sweeps in the database: run `harness attention --device cpu`")
    first = cells.iloc[0]
    title = (
        f"Attention {first['sweep_id']}: forward + backward ms per head_dim × seq_len "
        f"(batch {first['batch_size']}, {counted(int(first['num_heads']), 'head')}, {first['precision']}, "
        f"{first['device_name'] or first['device']})"
    )
    notes = []
    bad = cells[cells["status"] != "ok"]
    if not bad.empty:
        notes.append(f"{len(bad)} of {len(cells)} cells did not finish (OOM or error): marked ✕, left blank.")
    notes.append(f"peak memory (hover): {first['memory_source']}")
    others = [s for s in data.attention_sweeps if s != first["sweep_id"]]
    if others:
        which = "the newest of" if data.attention_sweeps[0] == first["sweep_id"] else "one of"
        listed = ", ".join(others[:3]) + (", …" if len(others) > 3 else "")
        notes.append(
            f"{which} {len(data.attention_sweeps)} stored sweeps; `harness dashboard --sweep ID` draws "
            f"another ({listed})"
        )
    return Panel(figure=attention_figure(attention_grid(cells)), title=title, notes=notes)
