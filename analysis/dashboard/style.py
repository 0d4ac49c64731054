"""Colours, units and hover text shared by every panel, so a phase looks the same everywhere; the legend
groups and the subplots per metric that several panels draw alike."""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    import plotly.graph_objects as go

# One colour per phase, used by every panel (bars, boxes, timeline ranges).
PHASE_COLORS: dict[str, str] = {
    "forward": "#4C78A8",
    "backward": "#F58518",
    "optimizer": "#54A24B",
    "prefill": "#B279A2",
    "decode": "#E45756",
    "step": "#BAB0AC",
}
PHASE_ORDER = (
    "forward",
    "backward",
    "allreduce",
    "optimizer",
    "prefill",
    "decode",
)  # allreduce: across ranks
KERNEL_COLOR = "#72B7B2"
MEMCPY_COLOR = "#EECA3B"
OSRT_COLOR = "#9D755D"
OOM_COLOR = "#D62728"
# Colours for things that are not phases (other NVTX ranges, settings, runs), assigned in order.
PALETTE = ("#9D755D", "#FF9DA6", "#79706E", "#D67195", "#EECA3B", "#72B7B2", "#B6992D", "#499894")

MS = 1e6  # nanoseconds per millisecond
TEMPLATE = "plotly_white"


def phase_color(name: str, fallback_index: int = 0) -> str:
    """The phase's colour; names like `attn.qkv` or `blocks.3.mlp` take a palette colour."""
    return PHASE_COLORS.get(name, PALETTE[fallback_index % len(PALETTE)])


def ordered_phases(names: Iterable[str]) -> list[str]:
    """Known phases in their canonical order, then anything else in first-seen order."""
    seen = list(dict.fromkeys(names))
    return [p for p in PHASE_ORDER if p in seen] + [n for n in seen if n not in PHASE_ORDER]


def ms(values: pd.Series | float) -> pd.Series | float:
    return values / MS


def hover(title: str, *lines: str) -> str:
    """A hovertemplate: bold title, one line each, no secondary box."""
    return "<br>".join([f"<b>{title}</b>", *lines]) + "<extra></extra>"


def ns_ms(label: str, ms_ref: str, ns_ref: str) -> str:
    """`label: 1.234 ms (1,234,000 ns)` from hovertemplate references to the same time in ms and in ns."""
    return f"{label}: %{{{ms_ref}:,.3f}} ms (%{{{ns_ref}:,.0f}} ns)"


def fmt_ns(value: float) -> str:
    """Exact ns and ms as text, for hover text built in Python."""
    return f"{value / MS:,.3f} ms ({value:,.0f} ns)"


def shorten(text: str, width: int = 60) -> str:
    if len(text) <= width:
        return text
    head = (width - 1) * 2 // 3
    return f"{text[:head]}…{text[-(width - 1 - head) :]}"


def plain(text: str) -> str:
    """Outside text (a kernel, range or thread name) as plotly shows it: plotly reads `<b>`, `<br>`,
    `<a href>` and entities in every label, legend and hover, so `<`, `>` and `&` are escaped to show as
    they are written in the export."""
    return html.escape(str(text), quote=False)


# what a trace carries that may hold outside text (a model name, a run id): its data and its names; its
# templates are the panel's own words and markup
TRACE_TEXT = ("x", "y", "text", "hovertext", "customdata", "labels", "name")


def _plain_values(values: Any) -> Any:
    """`values` (a string, or an array of any depth) with every string in it escaped as plain() does."""
    if values is None or isinstance(values, int | float):
        return values
    if isinstance(values, str):
        return plain(values)
    array = values if isinstance(values, np.ndarray) else np.asarray(values, dtype=object)
    if array.dtype.kind not in "OUS" or not any(isinstance(v, str) for v in array.flat):
        return values  # numbers and times: nothing to escape (and kept in plotly's compact encoding)
    return np.vectorize(lambda v: plain(v) if isinstance(v, str) else v, otypes=[object])(array).tolist()


def plain_figure(fig: go.Figure) -> go.Figure:
    """`fig` with the outside text of its traces (TRACE_TEXT) and of its axes' category lists and tick labels
    escaped for plotly, as plain() escapes one name: a model or run named `<b>x</b>` is shown as written,
    not in bold (hover templates, titles and notes are the panel's own words, left as they are)."""
    for trace in fig.data:
        for key in TRACE_TEXT:
            if key in trace and trace[key] is not None:
                trace[key] = _plain_values(trace[key])
    for axis in [*fig.select_xaxes(), *fig.select_yaxes()]:
        for key in ("categoryarray", "ticktext"):
            if axis[key] is not None:
                axis[key] = _plain_values(axis[key])
    return fig


def plain_short(text: str, width: int = 60) -> str:
    """`text` shortened to `width` characters, then escaped for plotly (escaping first could cut an
    entity in two)."""
    return plain(shorten(str(text), width))


def setting_label(precision: str, compile: bool) -> str:
    """How a precision × compile setting is named in facets and legends: fp32, bf16, bf16+compile."""
    return f"{precision}+compile" if compile else str(precision)


def legend_once(shown: set[str], group: str) -> dict[str, Any]:
    """A trace's legend group, named in the legend by the group's first trace only (`shown`: the groups
    named so far, to which `group` is added)."""
    first = group not in shown
    shown.add(group)
    return {"legendgroup": group, "showlegend": first}


def grouped_bars(
    fig: go.Figure, height: int, legend: str, *, x: str | None = None, y: str | None = None
) -> go.Figure:
    """`fig` laid out as the grouped bar panels are: the dashboard's template, the bars of one x side by
    side, `legend` over the legend and the axes titled `x` and `y` (where given)."""
    axes = {key: title for key, title in (("yaxis_title", y), ("xaxis_title", x)) if title is not None}
    fig.update_layout(template=TEMPLATE, barmode="group", height=height, **axes, legend_title_text=legend)
    return fig


class Metric(NamedTuple):
    """A figure of the runs drawn in a subplot of its own (throughput, energy)."""

    column: str
    title: str  # the subplot's
    scale: float  # to the unit shown
    fmt: str  # the hover's format of the value shown


def metric_subplots(table: pd.DataFrame, metrics: Sequence[Metric]) -> tuple[go.Figure, list[Metric]]:
    """A row of subplots, one per metric with data in `table`, and those metrics (subplot 1 first)."""
    from plotly.subplots import make_subplots

    shown = [m for m in metrics if m.column in table and table[m.column].notna().any()]
    return make_subplots(rows=1, cols=len(shown), subplot_titles=[m.title for m in shown]), shown


def metric_trace(
    metric: Metric, part: pd.DataFrame, name: str, col: int, title: str, *more: str
) -> dict[str, Any]:
    """What a trace of `metric` in subplot `col` takes from it: `name` in the legend once (from subplot 1),
    the values in the unit shown, a hover of `title`, the value, the raw value (customdata[1]) and `more`."""
    return {
        "name": name,
        "legendgroup": name,
        "showlegend": col == 1,
        "y": part[metric.column].astype(float) * metric.scale,
        "hovertemplate": hover(title, f"{metric.title}: %{{y:{metric.fmt}}}", "raw: %{customdata[1]}", *more),
    }
