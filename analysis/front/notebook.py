"""The harness from a notebook or a script: an export or trace opened once, its tables, its health, its
findings and its figures, through the same front door as `harness` (analysis.front.reading).

    from analysis import front

    report = front.open("report.sqlite")        # or several: ["rank0.sqlite", "rank1.sqlite"], a folder
    kernels = report.table("kernels")            # a pandas DataFrame, as `harness kernels` prints it
    report.table("kernels", by="name", top=10)   # a table's options by name (its computing function's)
    report.health()                              # ok / warn / fail per check, as `harness health`
    report.findings()                            # what to fix first, as `harness advise`
    report.figure("kernels")                     # a plotly figure, the dashboard's panel

Tables are served from the cache where a table is kept there, else computed, and kept. A table's options
are those its module's functions take (analysis/tables/<name>.py: kernels takes names, by, range_name,
stats_format, ...; the command line's flags are turned into them by each table's `prepare`), with the
library's defaults (stats_format: analysis.tables.stats_format.DEFAULT). Times are nanoseconds, as in
`--format csv`. An nsys report (.nsys-rep) is read through the export beside it where that is newer (said in
the frames' notes), else needs `export=`, a function that writes its SQLite export at the path it is given
(analysis.trace.exports: the export is made once, into the cache folder); `harness` passes its own, which
runs `nsys export`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from analysis.advice.checks import capture_failures
from analysis.advice.findings import Thresholds, findings, findings_table
from analysis.advice.health import capture_health
from analysis.dashboard.load import load_profile
from analysis.dashboard.panel import DashboardData
from analysis.dashboard.registry import PANELS
from analysis.errors import AnalysisError, ExportError, OptionsError
from analysis.front.reading import read_tables
from analysis.trace.exports import Exporter, open_source, sqlite_for
from analysis.trace.opening import require_events

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go

    from analysis.trace.trace import Trace

# A figure's name → the profile tables its dashboard panel draws (analysis.dashboard.load.TABLES).
FIGURES: dict[str, tuple[str, ...]] = {
    "kernels": ("kernels", "osrt"),  # top kernels; a capture without a GPU: its OS runtime calls
    "nvtx": ("nvtx_gpu", "nvtx"),  # GPU time per NVTX range (the harness's phases among them)
    "timeline": ("events",),  # one step (`step`, or ProfilerStep#N), else the busiest second
}


class UntrustedCapture(AnalysisError):
    """The capture failed health checks that make its findings' times untrustworthy."""


@dataclass(frozen=True)
class Report:
    """Sources opened for reading, and how: through the cache, split by rank, on how many processes."""

    sources: tuple[Path, ...]
    cache: bool = True
    by_rank: bool = False
    jobs: int | None = None
    dask: str | None = None
    export: Exporter | None = None

    def tables(self, kind: str, *, top: int | None = None, **options: Any) -> dict[str, pd.DataFrame]:
        """The titled tables of `kind` (a table's name: `analysis.tables.names()`), title -> DataFrame;
        each frame's attrs hold the notes printed with them ("notes"), the tables left out for want of
        data, with why ("skipped"), and the warnings printed with them ("warnings": a capture that failed its
        health checks when they last ran)."""
        try:
            result = read_tables(kind, self.sources, options, top=top, by_rank=self.by_rank, jobs=self.jobs,
                                 dask=self.dask, cache=self.cache, export=self.export)  # fmt: skip
        except TypeError as e:  # a keyword its functions lack: said as the table's, not as a helper's
            unknown = [name for name in options if f"argument '{name}'" in str(e)]
            if "unexpected keyword argument" not in str(e) or not unknown:
                raise
            raise OptionsError(
                f"{kind} takes no option {unknown[0]!r}: its options are the parameters of its functions "
                f"(analysis/tables/{kind.replace('-', '_')}.py)"
            ) from None
        out = {}
        for title, df in result.tables:
            frame = df if hasattr(df, "iloc") else df.frame()  # Rows: computed or served without pandas
            frame.attrs.update(notes=list(result.notes), skipped=dict(result.skipped or {}),
                               warnings=list(result.warnings))  # fmt: skip
            out[title] = frame
        return out

    def table(self, kind: str, *, top: int | None = None, **options: Any) -> pd.DataFrame:
        """The first table of `kind` (most have one), as `tables` gives it."""
        return next(iter(self.tables(kind, top=top, **options).values()))

    def health(self) -> pd.DataFrame:
        """Can this capture be trusted? A row per check: Check, Status (ok, warn or fail), Evidence and
        What to do, as `harness health` prints them. attrs: "worst" (the worst status), "line" (the
        health in one sentence) and "notes" (what reading it said). One export or trace."""
        with self._trace("health") as trace:
            health = capture_health(trace)
            notes = list(trace.notes)
        table = health.table()
        table.attrs.update(worst=health.worst, line=health.line(), notes=notes)
        return table

    def findings(self, *, ignore_health: bool = False, **thresholds: float) -> pd.DataFrame:
        """What to fix first: a row per finding (Rule, Time at stake (ns), Where, Evidence, Fix, ...),
        largest time at stake first, as `harness advise` prints them. `thresholds` change when a rule
        fires, by name (analysis.advice.findings.Thresholds: host_wait_share=0.05, ...).

        A capture that failed its health checks gives no ranking (UntrustedCapture, naming the checks):
        its time at stake would come from what is left of it. With `ignore_health` the findings come all
        the same, and attrs["untrusted"] names the failed checks. One export or trace."""
        limits = Thresholds().with_options([f"{k}={v}" for k, v in thresholds.items()])
        with self._trace("findings") as trace:
            require_events(trace)  # a memory timeline: said as `harness advise` says it
            failed = capture_failures(capture_health(trace).checks)
            if failed and not ignore_health:
                raise UntrustedCapture(
                    f"no findings ranked for {trace.path.name}: its capture failed "
                    + "; ".join(f"{c.name} ({c.evidence})" for c in failed)
                    + ". report.health() says more; ignore_health=True gives the findings anyway"
                )
            table = findings_table(findings(trace, limits))
        table.attrs["untrusted"] = [c.name for c in failed]
        return table

    def figure(self, name: str = "kernels") -> go.Figure:
        """The dashboard's panel `name` for this export as a plotly figure: "kernels" (top kernels by GPU
        time; a capture without a GPU: its OS runtime calls), "nvtx" (GPU time per NVTX range) or
        "timeline" (one step: the harness's, or a ProfilerStep#N; else the capture's busiest second). A
        panel without data raises AnalysisError saying what is missing. One export or trace."""
        if name not in FIGURES:
            raise AnalysisError(f"no figure {name!r}: one of {', '.join(FIGURES)}")
        path = sqlite_for(self._one("figure"), self.export, cache=self.cache)
        profile = load_profile(path, label=self._one("figure").name, tables=list(FIGURES[name]),
                               cache=self.cache)  # fmt: skip
        spec = next(p for p in PANELS if p.key == name)
        panel = spec(DashboardData(profile=profile, source=f"export {path}"))
        if panel.figure is None:
            raise AnalysisError(f"no {name} figure for {path.name}: {panel.missing}")
        if not panel.figure.layout.title.text:
            panel.figure.update_layout(title=panel.title)
        return panel.figure

    def _one(self, what: str) -> Path:
        """The one file a report of one capture reads (health, findings, a figure)."""
        if len(self.sources) == 1:
            source = self.sources[0]
            if source.is_file():
                return source
            if source.is_dir():
                raise AnalysisError(f"{what} reads one export or trace, not the folder {source}: open one")
            if not source.exists() and not any(c in source.name for c in "*?["):  # not a glob pattern
                raise ExportError(f"no such export: {source}")
        named = ", ".join(str(s) for s in self.sources)
        raise AnalysisError(f"{what} reads one export or trace, not {named}: open it alone")

    @contextmanager
    def _trace(self, what: str) -> Iterator[Trace]:
        with open_source(self._one(what), self.export, cache=self.cache) as trace:
            yield trace


def open(
    sources: str | Path | Sequence[str | Path],
    *,
    cache: bool = True,
    by_rank: bool = False,
    jobs: int | None = None,
    dask: str | None = None,
    export: Exporter | None = None,
) -> Report:
    """The exports, traces or reports at `sources` (one path, or several, a folder, a glob pattern), read
    through the Parquet cache unless `cache` is off; several give one table over all (`by_rank`: per
    rank; one export with `by_rank`: split by process)."""
    paths = (sources,) if isinstance(sources, str | Path) else tuple(sources)
    if not paths:
        raise AnalysisError("open() needs an export, a trace or a report: it was given none")
    return Report(tuple(Path(p) for p in paths), cache, by_rank, jobs, dask, export)
