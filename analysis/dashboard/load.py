"""Gather what the panels draw: runs from a results store, tables from Nsight Systems exports."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import pandas as pd

from analysis.advice.checks import capture_failures, why_untrusted
from analysis.advice.health import capture_health
from analysis.dashboard.attention import pick_sweep, sweep_ids
from analysis.dashboard.compare import pick_pair
from analysis.dashboard.panel import DashboardData, Profile
from analysis.errors import ExportError, first_line
from analysis.tables import kernels, nvtx, nvtx_gpu, osrt
from analysis.trace.opening import open_trace, require_events
from analysis.trace.trace import Trace
from analysis.views import timeline
from workloads.names import STEP, counted

# The errors that mean "this export lacks that table" (or cannot be read), not a bug.
EXPORT_ERRORS = (LookupError, ExportError)


class RunSource(Protocol):
    """What the dashboard needs from the results store (harness.store.results.ResultsStore has it)."""

    def runs(
        self, *, model: str | None = ..., ids: list[str] | None = ..., last: int | None = ...
    ) -> pd.DataFrame: ...

    def step_timings(self, run_ids: list[str] | None = ...) -> pd.DataFrame: ...

    def agreement(self, run_ids: list[str] | None = ...) -> pd.DataFrame: ...

    def attention_results(self, sweep_id: str | None = ...) -> pd.DataFrame: ...


def _always(prof: Profile) -> bool:
    return True


def _no_kernels(prof: Profile) -> bool:
    return prof.kernels is None or prof.kernels.empty


# Profile attribute, the call building it from an open export, and when it is wanted (in this order).
TABLES: list[tuple[str, Callable[[Trace], pd.DataFrame], Callable[[Profile], bool]]] = [
    ("kernels", kernels.kernel_summary, _always),
    ("nvtx_gpu", lambda e: nvtx_gpu.nvtx_gpu_summary(e, mode="auto"), _always),
    ("nvtx", nvtx.nvtx_summary, _always),
    ("events", lambda e: timeline.step_events(e, step=None), _always),
    # A profile recorded without a GPU: the kernels panel shows its heaviest OS runtime calls instead.
    ("osrt", osrt.osrt_summary, _no_kernels),
]


Window = tuple[float | None, float | None]  # seconds from timeline.time_zero; None: the busiest second


def load_profile(
    path: str | Path,
    label: str | None = None,
    tables: list[str] | None = None,
    *,
    cache: bool = True,
    window: Window | None = None,
    judge: bool = True,
) -> Profile:
    """Read the profile panels' tables from one export. A table that cannot be had is recorded in `missing`;
    with `judge`, the capture's failed health checks in `untrusted` (the panels say so).

    The timeline's events are one step of the harness's `step` ranges; with `window`, or in an export
    without them (one the harness did not record), a window of the capture: the busiest second unless
    `window` names its start and end.

    Opening errors (no such file, not an export) propagate: the caller decides whether that is the user's.
    """
    prof = Profile(label=label or Path(path).name, path=str(path))
    trace = open_trace(path, cache=cache)
    try:
        require_events(trace)  # a memory timeline: one line, not each panel missing for the same reason
        for name, build, when in TABLES:
            if (tables is not None and name not in tables) or not when(prof):
                continue
            if name == "events" and window is not None:
                continue
            try:
                setattr(prof, name, build(trace))
            except EXPORT_ERRORS as e:
                prof.missing[name] = first_line(e)
        no_steps = "events" in prof.missing  # no `step` ranges (or no NVTX at all): not the harness's
        if (tables is None or "events" in tables) and (window is not None or no_steps):
            why = (
                "asked for"
                if window is not None
                else f"no '{STEP}' NVTX ranges (not recorded by the harness)"
            )
            try:
                _window(prof, trace, window or (None, None), why)
            except EXPORT_ERRORS as e:
                if window is not None or not no_steps:
                    prof.missing["events"] = first_line(e)  # else the step's reason stands
        if judge:
            _judge(prof, trace)
    finally:
        trace.close()
    return prof


def _judge(prof: Profile, trace: Trace) -> None:
    """The capture's health, as `harness health` and a run's `degraded` judge it: a panel drawn from a
    capture that failed it must say so."""
    try:
        checks = capture_health(trace).checks
    except EXPORT_ERRORS as e:
        prof.untrusted = f"its health could not be checked ({first_line(e)})"
        prof.failed_checks = ["health"]
        return
    failed = capture_failures(checks)
    if failed:
        prof.untrusted = why_untrusted(checks)
        prof.failed_checks = [c.name for c in failed]


def _window(prof: Profile, trace: Trace, window: Window, why: str) -> None:
    """The timeline's events from a window of the capture (seconds from timeline.time_zero, as `health` says
    times; None: the busiest second)."""
    t0 = timeline.time_zero(trace)
    prof.origin = timeline.zero_words(trace)
    start, end = window
    if start is None and end is None:
        lo, hi = timeline.busiest_window(trace)
        if hi - lo < timeline.WINDOW_NS:
            why += "; the capture's activity is shorter than a second"
    else:
        lo = t0 + round((start or 0.0) * 1e9)
        hi = t0 + round(end * 1e9) if end is not None else lo + timeline.WINDOW_NS
        if hi <= lo:
            raise ExportError(f"the window {start}…{end} s is empty: --end must be after --start")
    prof.events = timeline.window_events(trace, lo, hi)
    if prof.events.empty and window != (None, None):  # say where the events are, as `timeline` does
        prof.span = timeline.span_words(trace)
    prof.missing.pop("events", None)
    prof.window = (lo - t0, hi - t0)
    prof.window_why = why


def _export_of(runs: pd.DataFrame, run_id: str) -> str | None:
    row = runs[runs["run_id"] == run_id]
    if row.empty or "nsys_sqlite" not in row:
        return None
    path = row["nsys_sqlite"].iloc[0]
    return str(path) if isinstance(path, str) and path else None


def profile_for_runs(runs: pd.DataFrame) -> Profile | None:
    """The newest profiled run's profile; a profile with everything missing if its export is gone."""
    if runs.empty or "nsys_sqlite" not in runs:
        return None
    profiled = runs[runs["nsys_sqlite"].notna() & (runs["status"] == "ok")]
    if profiled.empty:
        return None
    for row in reversed(list(profiled.itertuples(index=False))):
        if Path(row.nsys_sqlite).is_file():
            try:
                return load_profile(row.nsys_sqlite, label=row.run_id)
            except EXPORT_ERRORS as e:  # a corrupt export costs its panels, not the page
                why = f"cannot read {row.nsys_sqlite}: {first_line(e)}"
                return Profile(label=row.run_id, path=row.nsys_sqlite, missing={t[0]: why for t in TABLES})
    row = profiled.iloc[-1]
    gone = f"the export {row['nsys_sqlite']} of run {row['run_id']} no longer exists: rerun it with --nsys"
    return Profile(label=row["run_id"], path=row["nsys_sqlite"], missing={t[0]: gone for t in TABLES})


def collect(
    store: RunSource,
    *,
    ids: list[str] | None = None,
    last: int | None = None,
    model: str | None = None,
    compare: tuple[str, str] | None = None,
    source: str = "",
    sweep: str | None = None,
) -> DashboardData:
    """Runs (by ids, newest `last`, or one model), their steps and agreement, the newest profile, a pair,
    and the attention sweep `sweep` (id or unique start; the newest when None)."""
    cells = store.attention_results(asked=sweep)
    runs = store.runs(ids=ids, last=last, model=model, steps=True)  # its phases are drawn from them
    run_ids = list(runs["run_id"])
    data = DashboardData(
        runs=runs,
        steps=store.step_timings(run_ids),
        agreement=store.agreement(run_ids),
        profile=profile_for_runs(runs),
        compare=compare,
        source=source or counted(len(runs), "run"),
        attention=pick_sweep(cells, sweep),
        attention_sweeps=sweep_ids(cells),
    )
    if hasattr(store, "block_timings"):  # a store from before per-block times has none
        data.blocks = store.block_timings(run_ids)
    if compare:  # the comparison panel's alone: the filters chose the runs of every other panel
        data.compare_runs = store.runs(ids=list(compare))
        data.compare_steps = store.step_timings(list(compare))
    pair = compare or pick_pair(runs)
    if pair:
        paths = [_export_of(runs if data.compare_runs is None else data.compare_runs, r) for r in pair]
        if all(p and Path(p).is_file() for p in paths):
            try:
                ka, kb = (load_profile(p, tables=["kernels"], judge=False).kernels for p in paths if p)
            except EXPORT_ERRORS:
                ka = kb = None  # the comparison panel then notes that per-kernel differences are missing
            data.compare_kernels = (ka, kb)
    return data


def collect_export(
    path: str | Path, *, cache: bool = True, window: Window | None = None, given: str | Path | None = None
) -> DashboardData:
    """The profile panels' data for one export given on the command line (`window`: its timeline's);
    `given`: the file the user named, where `path` is the export made of it (a report's, in the cache
    folder), so that the page and the commands it suggests name the user's file."""
    given = Path(given or path)
    profile = load_profile(path, label=given.name, cache=cache, window=window)
    profile.path = str(given)
    profile.missing = {k: why.replace(str(path), str(given)) for k, why in profile.missing.items()}
    source = f"export {path}" if given == Path(path) else f"report {given}"
    return DashboardData(profile=profile, source=source)
