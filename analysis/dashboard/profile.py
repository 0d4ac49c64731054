"""Panel 4: one profile's top kernels, GPU time per NVTX range, and a timeline of one step."""

from __future__ import annotations

import functools
import shlex
from collections.abc import Callable

import pandas as pd

from analysis.dashboard.panel import DashboardData, Panel, Profile
from analysis.dashboard.style import (
    KERNEL_COLOR,
    MEMCPY_COLOR,
    MS,
    OSRT_COLOR,
    PALETTE,
    PHASE_COLORS,
    TEMPLATE,
    hover,
    ns_ms,
    phase_color,
    plain,
    plain_short,
    shorten,
)

TOP_KERNELS = 20
MAX_TIMELINE_KERNELS = 5000  # longest kept; the rest are counted in a note
NO_PROFILE = (
    "no profiled run among the selected runs: run `harness run tiny --nsys`, "
    "or open one export with `harness dashboard REPORT.sqlite`"
)


def profile_panel(build: Callable[[Profile], Panel]) -> Callable[[DashboardData], Panel]:
    """A panel of the dashboard's profile: none without one (NO_PROFILE); one drawn from a capture that
    failed its health checks says so, in its title and its first note: its numbers are drawn, not vouched
    for."""

    @functools.wraps(build)
    def panel(data: DashboardData) -> Panel:
        p = data.profile
        if p is None:
            return Panel(missing=NO_PROFILE)
        out = build(p)
        if p.untrusted and out.figure is not None:
            out.title = f"{out.title or ''} (its capture failed its health checks)".lstrip()
            out.notes.insert(
                0,
                f"Not sound: drawn from a capture that failed its health checks ({p.untrusted}); "
                f"`harness health {p.path}` says more.",
            )
        return out

    return panel


def range_base(name: str) -> str:
    """NVTX push/pop ranges are listed as `:name` by nsys stats; colour by the bare name."""
    return name.removeprefix(":")


# --- top kernels -------------------------------------------------------------------------------------


def top_kernels(kernels: pd.DataFrame, n: int = TOP_KERNELS) -> pd.DataFrame:
    return (
        kernels.sort_values("Total Time (ns)", ascending=False, kind="stable").head(n).reset_index(drop=True)
    )


def kernels_figure(kernels: pd.DataFrame, n: int = TOP_KERNELS):
    """Horizontal bars of total GPU time (ms) for the top-n kernels, largest on top; full name on hover."""
    return top_bars(kernels, n, trace="kernel total GPU time", count="Instances", of="kernel time")


def osrt_figure(osrt: pd.DataFrame, n: int = TOP_KERNELS):
    """The same bars for OS runtime calls (osrtsum columns): what a profile without a GPU has to show."""
    return top_bars(
        osrt, n, trace="OS runtime call total time", count="Num Calls", of="OS runtime call time",
        axis="total time in the call (ms)", color=OSRT_COLOR,
    )  # fmt: skip


def top_bars(
    table: pd.DataFrame,
    n: int,
    *,
    trace: str,
    count: str,
    of: str,
    axis: str = "total GPU time (ms)",
    color: str = KERNEL_COLOR,
):
    import plotly.graph_objects as go

    top = top_kernels(table, n).iloc[::-1]
    extra = {
        c: top[c] if c in top else pd.Series(float("nan"), index=top.index)
        for c in (count, "Avg (ns)", "Time (%)")
    }
    fig = go.Figure(
        go.Bar(
            name=trace,
            orientation="h",
            y=[f"{i + 1}. {plain_short(s, 70)}" for i, s in reversed(list(enumerate(top["Name"][::-1])))],
            x=top["Total Time (ns)"] / MS,
            marker_color=color,
            customdata=pd.DataFrame(
                {
                    "total": top["Total Time (ns)"],
                    "n": extra[count],
                    "avg": extra["Avg (ns)"],
                    "avg_ms": extra["Avg (ns)"] / MS,
                    "pct": extra["Time (%)"],
                    "name": top["Name"].map(lambda s: plain_short(s, 300)),
                }
            ).to_numpy(),
            hovertemplate=hover(
                "%{customdata[5]}",
                ns_ms("total", "x", "customdata[0]"),
                f"%{{customdata[4]:.1f}} % of {of}",
                "%{customdata[1]:,} " + ("instances" if count == "Instances" else "calls"),
                ns_ms("avg", "customdata[3]", "customdata[2]"),
            ),
        )
    )
    fig.update_layout(
        template=TEMPLATE,
        height=max(300, 60 + 24 * len(top)),
        xaxis_title=axis,
        yaxis={"automargin": True},
        showlegend=False,
        margin={"l": 10},
    )
    return fig


@profile_panel
def kernels_panel(p: Profile) -> Panel:
    if p.kernels is not None and not p.kernels.empty:
        notes = []
        if len(p.kernels) > TOP_KERNELS:
            notes.append(f"Top {TOP_KERNELS} of {len(p.kernels):,} kernel names by total GPU time.")
        return Panel(
            figure=kernels_figure(p.kernels), title=f"Top kernels by total GPU time: {p.label}", notes=notes
        )
    # Recorded without a GPU: say so, and show the heaviest OS runtime calls when the profile has them.
    if p.kernels is None:
        why = p.missing.get("kernels", f"kernels could not be read from {p.path}")
    else:
        why = (
            f"no GPU kernels in {p.label} (recorded without a GPU): profile on CUDA with "
            "`harness run tiny --device cuda --nsys`"
        )
    if p.osrt is None or p.osrt.empty:
        return Panel(missing=why)
    return Panel(
        figure=osrt_figure(p.osrt),
        title=f"Top OS runtime calls by total time: {p.label} (no GPU kernels)",
        notes=[f"{why}. Until then, the heaviest OS runtime calls of this profile."],
    )


# --- time per NVTX range -----------------------------------------------------------------------------


def _column(df: pd.DataFrame, *names: str) -> str | None:
    return next((c for c in names if c in df), None)


# The harness's ranges that enclose the phases: drawn apart, so their totals are not read as a phase's.
ENCLOSING = ("step", "measured")


def range_totals(table: pd.DataFrame) -> pd.DataFrame:
    """name, total, n, enclosing: per NVTX range (rows per range and kernel summed), largest first, top 30."""
    name_col = _column(table, "Range", "NVTX Range", "Name", "range", "name")
    total_col = _column(table, "Total Time (ns)", "Total GPU Time (ns)", "total_ns")
    if name_col is None or total_col is None:
        raise ValueError(f"range table lacks a name or total column: {list(table.columns)}")
    inst_col = _column(table, "Instances", "NVTX Inst", "Range Instances")
    g = table.groupby(name_col, sort=False)
    t = pd.DataFrame(
        {"total": g[total_col].sum(), "n": g[inst_col].max() if inst_col else float("nan")}
    ).reset_index()
    t = t.rename(columns={name_col: "name"}).sort_values("total", ascending=False, kind="stable").head(30)
    t["name"] = t["name"].astype(str)
    t["enclosing"] = t["name"].map(range_base).isin(ENCLOSING)
    return t.reset_index(drop=True)


def _range_bar(t: pd.DataFrame, axis_title: str, offset: int = 0):
    import plotly.graph_objects as go

    return go.Bar(
        name=axis_title,
        x=t["name"].map(plain),
        y=t["total"] / MS,
        marker_color=[phase_color(range_base(n), offset + i) for i, n in enumerate(t["name"])],
        customdata=t[["total", "n"]].to_numpy(),
        hovertemplate=hover("%{x}", ns_ms("total", "y", "customdata[0]"), "%{customdata[1]:,} instances"),
    )


def ranges_figure(table: pd.DataFrame, axis_title: str, groups: pd.DataFrame | None = None):
    """Bars of total time (ms) per NVTX range, coloured by phase (other ranges from the palette).

    The enclosing `step` and `measured` ranges get a subplot of their own beside the ranges they contain;
    `groups` (attention vs MLP, from detail_groups) another.
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    t = range_totals(table)
    inner, outer = t[~t["enclosing"]], t[t["enclosing"]]
    parts = [("phases and ranges inside them", inner, _range_bar(inner, axis_title))] if len(inner) else []
    if len(outer):
        bar = _range_bar(outer, axis_title, len(inner))
        parts.append(("enclosing ranges (contain the others)", outer, bar))
    if groups is not None and not groups.empty:
        bar = go.Bar(
            name="attention vs MLP",
            x=groups["group"],
            y=groups["total_ns"] / MS,
            marker_color=[PALETTE[1], PALETTE[7]],
            customdata=groups[["total_ns", "ranges"]].assign(ranges=groups["ranges"].map(plain)).to_numpy(),
            hovertemplate=hover("%{x}", ns_ms("total", "y", "customdata[0]"), "ranges: %{customdata[1]}"),
        )
        parts.append(("attention vs MLP", groups, bar))
    widths = [max(len(p[1]), 1) + 1 for p in parts]
    fig = make_subplots(
        rows=1,
        cols=len(parts),
        column_widths=[w / sum(widths) for w in widths],
        subplot_titles=[p[0] for p in parts] if len(parts) > 1 else None,
        horizontal_spacing=0.08,
    )
    for col, (_, _, bar) in enumerate(parts, start=1):
        fig.add_trace(bar, row=1, col=col)
        fig.update_yaxes(title_text=f"{axis_title} (ms)" if col == 1 else None, row=1, col=col)
    fig.update_xaxes(title_text="NVTX range", row=1, col=1)
    fig.update_layout(template=TEMPLATE, height=420, showlegend=False)
    return fig


# --nvtx-detail ranges grouped into attention and MLP; a range named like the group itself wins over its parts
DETAIL_GROUPS = {
    "attention": (
        ("attn", "attention", "self_attn"),
        ("attn", "qkv", "scores", "softmax", "out_proj", "sdpa"),
    ),
    "MLP": (
        ("mlp", "ffn", "feed_forward"),
        ("mlp", "ffn", "up_proj", "down_proj", "gate_proj", "gelu", "swiglu"),
    ),
}


def detail_groups(table: pd.DataFrame) -> pd.DataFrame:
    """group, total_ns, ranges: attention vs MLP time from a range table; empty unless both are present."""
    name_col = _column(table, "Range", "NVTX Range", "Name", "range", "name")
    total_col = _column(table, "Total Time (ns)", "Total GPU Time (ns)", "total_ns")
    if name_col is None or total_col is None:
        return pd.DataFrame(columns=["group", "total_ns", "ranges"])
    totals = table.groupby(name_col)[total_col].sum()
    bare = {str(n): range_base(str(n)).lower() for n in totals.index}
    rows = []
    for group, (whole, parts) in DETAIL_GROUPS.items():
        names = [n for n, b in bare.items() if b in whole or b.rsplit(".", 1)[-1] in whole]
        if not names:
            names = [n for n, b in bare.items() if any(p in b for p in parts)]
        if names:
            rows.append(
                {"group": group, "total_ns": float(totals[names].sum()), "ranges": ", ".join(sorted(names))}
            )
    out = pd.DataFrame(rows, columns=["group", "total_ns", "ranges"])
    return out if len(out) == len(DETAIL_GROUPS) else out.iloc[0:0]


def _ranges_with_detail(table: pd.DataFrame, axis_title: str):
    return ranges_figure(table, axis_title, detail_groups(table))


@profile_panel
def nvtx_gpu_panel(p: Profile) -> Panel:
    if p.nvtx_gpu is not None and not p.nvtx_gpu.empty:
        return Panel(
            figure=_ranges_with_detail(p.nvtx_gpu, "total GPU time"),
            title=f"GPU time per NVTX range: {p.label}",
        )
    if p.nvtx is not None and not p.nvtx.empty:
        why = p.missing.get("nvtx_gpu", "this export has no GPU kernels")
        return Panel(
            figure=_ranges_with_detail(p.nvtx, "total CPU time"),
            title=f"CPU time per NVTX range: {p.label}",
            notes=[f"No GPU time per range ({why}); showing the ranges' own duration on the CPU thread."],
        )
    # the cause of an empty panel is the lack of NVTX ranges; a lack of kernels alone leaves the CPU times
    return Panel(missing=p.missing.get("nvtx") or f"no NVTX ranges in {p.label}")


# --- timeline of one step ----------------------------------------------------------------------------


def timeline_rows(events: pd.DataFrame, max_kernels: int = MAX_TIMELINE_KERNELS) -> tuple[pd.DataFrame, int]:
    """Events with a `row` (lane, plus nesting depth for NVTX ranges) and times relative to the first start.

    Keeps the `max_kernels` longest kernels; returns how many were dropped.
    """
    ev = events.copy()
    ev["duration_ns"] = ev["end_ns"] - ev["start_ns"]
    kernels = ev["kind"] == "kernel"
    dropped = max(0, int(kernels.sum()) - max_kernels)
    if dropped:
        keep = ev[kernels].nlargest(max_kernels, "duration_ns").index
        ev = ev[~kernels | ev.index.isin(keep)]
    t0 = ev["start_ns"].min() if len(ev) else 0
    ev["rel_start_ns"] = ev["start_ns"] - t0
    ev = ev.sort_values(["lane", "start_ns", "end_ns"], ascending=[True, True, False], kind="stable")
    ev["depth"] = 0
    nvtx = ev[ev["kind"] == "nvtx"]
    depth: list[int] = []
    stacks: dict[str, list[int]] = {}  # per lane: end times of the open ranges
    for lane, start, end in zip(nvtx["lane"], nvtx["start_ns"], nvtx["end_ns"], strict=True):
        stack = stacks.setdefault(lane, [])
        while stack and stack[-1] <= start:
            stack.pop()
        depth.append(len(stack))
        stack.append(end)
    ev.loc[nvtx.index, "depth"] = depth
    ev["row"] = row_labels(ev)
    return ev.reset_index(drop=True), dropped


def row_labels(ev: pd.DataFrame) -> list[str]:
    """A row per thread and nesting depth, named by the thread and the ranges on it:
    `python (main thread): step`, `python (main thread): forward, backward, optimizer`; GPU lanes
    `GPU stream 7`."""
    nvtx = ev["kind"] == "nvtx"
    names: dict[tuple[str, int], list[str]] = {}
    for lane, d, name in zip(ev.loc[nvtx, "lane"], ev.loc[nvtx, "depth"], ev.loc[nvtx, "name"], strict=True):
        seen = names.setdefault((str(lane), int(d)), [])
        if range_base(str(name)) not in seen:
            seen.append(range_base(str(name)))

    labels = {}
    for (lane, d), seen in names.items():
        shown = ", ".join(shorten(n, 24) for n in seen[:3]) + (", …" if len(seen) > 3 else "")
        labels[lane, d] = f"{lane}: {shown}"
    taken = pd.Series(list(labels.values()))
    for key, text in labels.items():
        if (taken == text).sum() > 1:  # the same names at two depths: keep the rows apart
            labels[key] = f"{text} (level {key[1]})"

    def label(kind: str, lane: str, d: int) -> str:
        if kind != "nvtx":
            return f"GPU {lane}" if lane.startswith("stream") else lane
        return labels[lane, d]

    return [
        label(k, str(lane), int(d)) for k, lane, d in zip(ev["kind"], ev["lane"], ev["depth"], strict=True)
    ]


def _row_order(ev: pd.DataFrame) -> list[str]:
    """NVTX rows first (outer ranges above inner), then kernel and memcpy lanes."""
    kind_rank = ev["kind"].map({"nvtx": 0, "kernel": 1, "memcpy": 2}).fillna(3)
    keyed = ev.assign(_k=kind_rank).sort_values(["_k", "lane", "depth"], kind="stable")
    return list(dict.fromkeys(keyed["row"]))


def timeline_figure(ev: pd.DataFrame):
    """Horizontal bars from start to end (ms from the step's start); rows are threads, depths and streams."""
    import plotly.graph_objects as go

    groups: list[tuple[str, pd.DataFrame, str]] = []
    nvtx = ev[ev["kind"] == "nvtx"]
    bare = nvtx["name"].map(range_base)
    for phase, color in PHASE_COLORS.items():
        part = nvtx[bare == phase]
        if not part.empty:
            groups.append((phase, part, color))
    other = nvtx[~bare.isin(list(PHASE_COLORS))]
    if not other.empty:
        groups.append(("other NVTX range", other, PALETTE[0]))
    for kind, label, color in (
        ("kernel", "kernel", KERNEL_COLOR),
        ("memcpy", "memcpy / memset", MEMCPY_COLOR),
    ):
        part = ev[ev["kind"] == kind]
        if not part.empty:
            groups.append((label, part, color))
    fig = go.Figure()
    for label, part, color in groups:
        fig.add_trace(
            go.Bar(
                name=label,
                orientation="h",
                y=part["row"].map(plain),
                base=part["rel_start_ns"] / MS,
                x=part["duration_ns"] / MS,
                marker={"color": color, "line": {"width": 0.5, "color": "white"}},
                customdata=pd.DataFrame(
                    {
                        "name": part["name"].map(lambda s: plain_short(s, 200)),
                        "ns": part["duration_ns"],
                        "start": part["rel_start_ns"],
                        "start_ms": part["rel_start_ns"] / MS,
                    }
                ).to_numpy(),
                hovertemplate=hover(
                    "%{customdata[0]}",
                    ns_ms("duration", "x", "customdata[1]"),
                    ns_ms("starts at", "customdata[3]", "customdata[2]"),
                    "%{y}",
                ),
            )
        )
    rows = [plain(r) for r in _row_order(ev)]
    fig.update_layout(
        template=TEMPLATE,
        barmode="overlay",
        height=max(260, 90 + 34 * len(rows)),
        xaxis_title="time since the step began (ms); drag to zoom, double-click to reset",
        yaxis={"categoryorder": "array", "categoryarray": rows, "autorange": "reversed", "automargin": True},
        legend_title_text="what ran",
        bargap=0.15,
    )
    return fig


@profile_panel
def timeline_panel(p: Profile) -> Panel:
    if p.events is None:
        return Panel(missing=p.missing.get("events", f"events could not be read from {p.path}"))
    if p.events.empty:
        what = "this window" if p.window else p.label
        if p.window and p.span:  # a window asked for, beside the capture: where its events are
            lo, hi = (t / 1e9 for t in p.window)
            what = f"{lo:g}..{hi:g} s from {p.origin} (its events span {p.span})"
        return Panel(missing=f"no NVTX ranges or kernels to draw in {what}")
    ev, dropped = timeline_rows(p.events)
    notes = list(p.notes)
    title = f"Timeline of one step: {p.label}"
    origin = "the step began"
    if p.window is not None:
        lo, hi = (t / 1e9 for t in p.window)
        span = f"{lo:,.3f}–{hi:,.3f} s from {p.origin}"
        title = f"Timeline of {span}: {p.label}"
        origin = "the window began"
        chosen = (
            "the window asked for" if p.window_why == "asked for" else "the busiest second (most kernel time)"
        )
        if "shorter than a second" in p.window_why:
            chosen = "all of it"
        notes.append(
            f"{p.window_why[0].upper()}{p.window_why[1:]}: showing {chosen}, {span}; "
            f"`harness dashboard {shlex.quote(p.path)} --start S --end S` shows another window (seconds)."
        )
    if dropped:
        notes.append(
            f"Showing the {MAX_TIMELINE_KERNELS:,} longest of {dropped + MAX_TIMELINE_KERNELS:,} kernels."
        )
    if not (ev["kind"] == "kernel").any():
        where = "this window" if p.window else "this step"
        notes.append(f"No kernels in {where} (recorded without a GPU): only the CPU thread's NVTX ranges.")
    figure = timeline_figure(ev)
    figure.update_layout(xaxis_title=f"time since {origin} (ms); drag to zoom, double-click to reset")
    return Panel(figure=figure, title=title, notes=notes)
