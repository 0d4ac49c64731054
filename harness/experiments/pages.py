"""The files the harness writes to be looked at in a browser, from the stored runs or from one export: the
dashboard (analysis.dashboard: one self-contained HTML page of plotly panels) and an export's Chrome trace
for Perfetto UI (analysis.views.chrome_trace). Neither is written over a file it reads."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

from analysis import dashboard
from analysis.advice.verdict import failed_captures
from analysis.dashboard.runs import ALTERED
from analysis.errors import ExportError
from analysis.outputs import refuse_inputs, shown, utf8_text
from analysis.trace.exports import files_read, open_source, said_on_error, sqlite_for
from analysis.trace.opening import require_events
from analysis.views import chrome_trace, timeline
from harness.core.errors import HarnessError, os_reason
from harness.core.signals import sigterm_raises
from harness.execution.compiled import with_setup
from harness.execution.nsys import export_report
from harness.experiments import roofline
from harness.store.results import ResultsStore, describe_url
from workloads.names import counted
from workloads.plants.catalogue import CONTROL

if TYPE_CHECKING:
    import pandas as pd

    from analysis.dashboard import Dashboard, DashboardData, Panel
    from analysis.dashboard.load import Window
    from analysis.views.chrome_trace import Written

OUT = "--out"  # the option that names the file written, in the refusals


def export_dashboard(
    report: Path, out: Path, *, cache: bool = True, window: Window | None = None
) -> Dashboard:
    """The profile panels of one export (or of a report, exported as the analysis commands export it:
    into the cache folder), written to `out`; `window` (seconds from the session's start, as
    `health` says times) is its timeline's."""
    if window is not None:
        timeline.check_window(start=window[0], end=window[1])  # before the export is looked for
    if not report.exists():
        raise ExportError(f"{report} does not exist; pass an nsys export (.sqlite) or report (.nsys-rep)")
    beside: list[str] = []  # the report read through the export lying beside it
    export = sqlite_for(report, export_report, notes=beside)
    refuse_inputs(out, [*files_read(report), export], OUT)
    with said_on_error(beside):
        data = dashboard.collect_export(export, cache=cache, window=window, given=report)
    page = _written(data, out, scope="profile", title=f"harness dashboard: {report.name}")
    page.notes[:0] = beside
    return page


def runs_dashboard(
    store: ResultsStore,
    out: Path,
    *,
    ids: list[str] | None = None,
    last: int | None = None,
    model: str | None = None,
    compare: tuple[str, str] | None = None,
    asked: str = "",
    sweep: str | None = None,
) -> tuple[Dashboard, int, str | None]:
    """The panels of the stored runs (`ids`, else the `last` N, of `model`; `compare`: the two runs of the
    comparison panel), the attention sweep `sweep` (the newest when None) and the roofline of the newest run
    that has block times, written to `out`; how many runs
    it holds; and, where `asked` (the filters as given) matched no run, the sentence that says so (the
    phases panel's, made once: it counts the stored runs), else None."""
    data = dashboard.collect(store, ids=ids, last=last, model=model, compare=compare, sweep=sweep)
    if asked and data.runs.empty:
        data.unmatched = store.unmatched(asked)
    data.runs = with_setup(store, data.runs)  # the compile panel pairs runs of one setup, as compare-compile
    for runs in (data.runs, data.compare_runs):
        if runs is not None:
            configs = store.configs(list(runs["run_id"]))
            runs[ALTERED] = [altered(configs.get(r, {})) for r in runs["run_id"]]
    data.source = f"{counted(len(data.runs), 'run')} from {describe_url(store.url)}"
    data.roofline = roofline.dashboard_roofline(store, data.runs, data.blocks)
    pair = data.compare_runs if data.compare_runs is not None else data.runs.iloc[:0]
    refuse_inputs(out, [store.file, *run_files(data.runs), *run_files(pair)], OUT)
    return _written(data, out, scope="all", title="harness dashboard"), len(data.runs), data.unmatched


def altered(config: dict) -> str:
    """What slowed a run's steps beyond its phases (analysis.dashboard.runs.ALTERED), as its options say it:
    block timers synchronised around every block, a memory recording, a planted cause (`clean` plants
    nothing); "" for none."""
    plant = config.get("plant")
    said = [
        *(["--nvtx-detail"] if config.get("nvtx_detail") else []),
        *(["--memory"] if config.get("memory") else []),
        *([f"--plant {plant}"] if plant and plant != CONTROL else []),
    ]
    return " ".join(said)


def _written(data: DashboardData, out: Path, *, scope: Literal["all", "profile"], title: str) -> Dashboard:
    try:
        return dashboard.write_dashboard(data, out, scope=scope, title=title)
    except BrokenPipeError:
        raise  # `-o - | head`: ended quietly, as a table piped to head is
    except OSError as e:
        raise HarnessError(
            f"cannot write {shown(out)}: {os_reason(out, e)}; pass --out to a writable path"
        ) from None


def run_files(runs: pd.DataFrame) -> list[str]:
    """The exports and reports the runs' panels may read."""
    columns = [c for c in ("nsys_sqlite", "nsys_rep") if c in runs]
    return [str(v) for c in columns for v in runs[c].dropna()]


def panel_table(panels: list[Panel]) -> pd.DataFrame:
    """What the page holds: each panel, drawn or not, its title or what it lacked."""
    import pandas as pd

    out = pd.DataFrame(
        {
            "Panel": [p.key for p in panels],
            "Drawn": [p.figure is not None for p in panels],
            # a file name that is not UTF-8 as the page writes it: no string column takes its surrogates
            "Title or what is missing": [
                utf8_text(p.missing or "" if p.figure is None else p.title) for p in panels
            ],
        }
    )
    out.attrs["wrap"] = ["Title or what is missing"]  # a sentence: wrap it, never cut it
    return out


def chrome_trace_of(
    report: Path,
    target: Path,
    *,
    cache: bool = True,
    step: int | None = None,
    phase: str | None = None,
    start: float | None = None,
    end: float | None = None,
) -> Written:
    """`report` (an export, a report exported first, or a PyTorch profiler trace) written to `target` as a
    Chrome trace: all of it, or the harness's step `step` (its phase `phase`), or the window start..end
    (seconds from timeline.time_zero, as the dashboard's and `health`'s times); what it holds. A window
    that holds no event is refused, nothing written, with the capture's span."""
    timeline.check_window(step, phase, start, end)  # before a report is exported or an export read
    refuse_inputs(target, files_read(report), OUT)
    with open_source(report, export_report, cache=cache) as trace:  # closed: its private copy goes
        refuse_inputs(target, [trace.path], OUT)
        require_events(trace)  # a memory timeline: it would make an empty page
        window = timeline.window_of(trace, step=step, phase=phase, start=start, end=end)
        try:
            with sigterm_raises():  # as Ctrl-C: the half-written file is removed, not left beside the output
                written = chrome_trace.write_chrome_trace(trace, target, window)
            written.warnings = failed_captures([report], cache=cache)  # as every table of an export says
            return written
        except chrome_trace.EmptyWindow:
            edges = (("--start", start), ("--end", end))
            given = " ".join(f"{flag} {edge:g}" for flag, edge in edges if edge is not None)
            span = f"{timeline.span_words(trace)} from {timeline.zero_words(trace)}"
            raise ExportError(
                f"{given} holds no event of {report.name} (its events span {span}): nothing written"
            ) from None
