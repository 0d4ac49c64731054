"""What a panel is, and the data every panel is built from."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import pandas as pd

from analysis.dashboard.style import plain_figure
from analysis.runs.roofline import Roofs

if TYPE_CHECKING:
    import plotly.graph_objects as go


@dataclass
class Panel:
    """One section of the page: a figure, or a line saying what is missing and how to get it."""

    figure: go.Figure | None = None
    missing: str | None = None
    notes: list[str] = field(default_factory=list)
    failed: bool = False  # the builder raised; `missing` holds the error
    key: str = ""  # set from the registry entry
    title: str = ""  # the registry entry's title unless the builder names a more precise one


@dataclass
class Profile:
    """The tables of one Nsight Systems export that the profile panels draw.

    A table is None when it could not be read; `missing[name]` then says why and what to do.
    """

    label: str  # run id, or the export's file name
    path: str
    kernels: pd.DataFrame | None = None  # gpukernsum columns
    nvtx_gpu: pd.DataFrame | None = None  # GPU time per NVTX range
    nvtx: pd.DataFrame | None = None  # nvtxsum columns (CPU time per range)
    events: pd.DataFrame | None = None  # one step: kind, name, start_ns, end_ns, lane
    osrt: pd.DataFrame | None = None  # osrtsum columns; read only when the export has no kernels
    # `events` is a window of the capture, not a step: (start, end) ns from `origin` (timeline.time_zero), why
    window: tuple[int, int] | None = None
    origin: str = "the session's start"  # timeline.zero_words
    window_why: str = ""
    span: str = ""  # where a window asked for holds nothing: the span of the capture's events (`0..2.5 s`)
    missing: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # the failed health checks of its capture, in one sentence (analysis.advice.checks.why_untrusted): its
    # panels are drawn, and say that their numbers are not sound
    untrusted: str | None = None
    failed_checks: list[str] = field(default_factory=list)  # their names


def empty_runs() -> pd.DataFrame:
    return pd.DataFrame(columns=["run_id", "model", "precision", "compile", "status", "profiler"])


@dataclass
class DashboardData:
    """Everything the panels read. Runs, steps and agreement have the results store's columns."""

    runs: pd.DataFrame = field(default_factory=empty_runs)
    unmatched: str | None = None  # the filters matched no run of those stored: what they were, in words
    steps: pd.DataFrame = field(
        default_factory=lambda: pd.DataFrame(columns=["run_id", "step", "phase", "duration_ns", "warmup"])
    )
    agreement: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=["run_id", "phase"]))
    profile: Profile | None = None
    compare: tuple[str, str] | None = None  # run ids: baseline, other
    # the --compare pair's runs and steps (the store's columns), for the comparison panel alone: a run named
    # there joins no other panel; None where no pair was named (the panel picks one of `runs`)
    compare_runs: pd.DataFrame | None = None
    compare_steps: pd.DataFrame | None = None
    compare_kernels: tuple[pd.DataFrame | None, pd.DataFrame | None] = (None, None)
    # cells of the attention sweep drawn (the newest, or --sweep's): the results store's attention columns
    attention: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=["sweep_id", "impl"]))
    # every stored attention sweep's id, newest first
    attention_sweeps: list[str] = field(default_factory=list)
    # per-block times (--nvtx-detail) of the runs: the results store's block_timings columns
    blocks: pd.DataFrame = field(
        default_factory=lambda: pd.DataFrame(
            columns=["run_id", "step", "layer", "block", "phase", "duration_ns", "calls", "source"]
        )
    )
    # the roofline of the newest run the blocks panel draws (runs.block_runs): its table, roofs and title,
    # made by the harness (the analytic FLOPs and bytes are the workloads')
    roofline: RunRoofline | None = None
    # per-rank phase ranges (analysis.ranks.ranks.RanksReport.phases): rank, phase, step, duration_ns,
    # start_ns,
    # end_ns on the common clock; None outside `harness ranks --html`
    ranks: pd.DataFrame | None = None
    source: str = ""  # where the data came from, for the page header


@dataclass
class RunRoofline:
    """A run's sub-blocks on the roofline: analysis.runs.roofline.roofline_table with times, and its roofs."""

    run_id: str
    table: pd.DataFrame
    roofs: Roofs | None
    title: str
    notes: list[str] = field(default_factory=list)


Scope = Literal["runs", "profile", "ranks"]


@dataclass(frozen=True)
class PanelSpec:
    """A registry entry. `scope` "profile" panels are the ones `harness dashboard REPORT.sqlite` shows;
    "ranks" panels only `harness ranks --html` (they draw several exports). The text its figure's traces
    carry is escaped for plotly (style.plain_figure) unless `escapes`: the builder escapes it itself (where
    its labels hold markup of its own)."""

    key: str
    title: str
    build: Callable[[DashboardData], Panel]
    scope: Scope = "runs"
    escapes: bool = False

    def __call__(self, data: DashboardData) -> Panel:
        panel = self.build(data)
        panel.key, panel.title = self.key, panel.title or self.title
        if panel.figure is not None and not self.escapes:
            plain_figure(panel.figure)
        return panel
