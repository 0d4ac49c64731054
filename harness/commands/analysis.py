"""Tables from an Nsight Systems export: `harness kernels`, `nvtx`, `nvtx-gpu`, `api`, `memops`, `launch`,
`osrt` and `summary`. Each parses its arguments, calls one analysis function and renders what it returns.

No torch or plotly here (start-up time counts): pandas and the analysis modules load inside the commands.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from harness.commands.common import FormatOpt, WideOpt, cli_errors
from harness.errors import ExportError, NsysError, UsageError
from harness.output import Format

if TYPE_CHECKING:
    import pandas as pd

    from analysis.export import Export

ReportArg = Annotated[
    Path, typer.Argument(help="An nsys export (.sqlite), or a report (.nsys-rep), exported first.")
]
TopOpt = Annotated[
    int | None, typer.Option("--top", min=1, metavar="<n>", help="Show only the first N rows.")
]
# kernexecsum: the latencies first (total, API, queue, kernel); the API name is nearly always cudaLaunchKernel
LAUNCH_PRIORITY = ["Kernel Name", "TAvg (ns)", "AAvg (ns)", "QAvg (ns)", "KAvg (ns)", "Count", "QCount"]


class By(StrEnum):
    shape = "shape"
    name = "name"


class GpuMode(StrEnum):
    auto = "auto"
    phase = "phase"
    thread = "thread"


def sqlite_for(report: Path) -> Path:
    """The SQLite export of `report`: itself, or for a .nsys-rep an export cached beside it (made with the
    nsys the harness finds, reused while it is newer than the report)."""
    if report.suffix != ".nsys-rep":
        return report
    if not report.is_file():
        raise ExportError(f"no such report: {report}")
    for cached in (report.with_suffix(".sqlite"), report.with_name(f"{report.stem}.harness.sqlite")):
        if cached.is_file() and cached.stat().st_mtime >= report.stat().st_mtime:
            return cached
    target = report.with_suffix(".sqlite")
    if target.exists():  # an older export of another run: leave it, write our own
        target = report.with_name(f"{report.stem}.harness.sqlite")
    from harness.nsys import export_sqlite

    try:
        return export_sqlite(report, target)
    except NsysError as e:
        raise NsysError(f"cannot export {report} to SQLite: {e}") from None


def open_report(report: Path) -> Export:
    from analysis.export import open_export

    return open_export(sqlite_for(report))


def _show(df: pd.DataFrame, fmt: Format, title: str, top: int | None = None, wide: bool = False) -> None:
    from harness.output import emit

    notes = df.attrs.get("notes", [])
    emit(df.head(top) if top else df, fmt, title=title, notes=notes, wide=wide)


@cli_errors
def kernels_cmd(
    report: ReportArg,
    top: TopOpt = None,
    base: Annotated[
        bool, typer.Option("--base", help="Kernel base names (no arguments, templates).")
    ] = False,
    mangled: Annotated[bool, typer.Option("--mangled", help="Mangled kernel names, where recorded.")] = False,
    by: Annotated[
        By, typer.Option("--by", help="shape: one row per name and launch shape; name: merge shapes.")
    ] = By.shape,
    range_name: Annotated[
        str | None,
        typer.Option(
            "--range", metavar="<name>", help="Only kernels launched inside NVTX ranges of this name."
        ),
    ] = None,
    format: FormatOpt = Format.table,
    wide: WideOpt = False,
) -> None:
    """GPU time per CUDA kernel, like `nsys stats -r gpukernsum`."""
    from analysis.kernels import kernel_summary

    if base and mangled:
        raise UsageError("--base and --mangled exclude each other: pick one")
    names = "base" if base else "mangled" if mangled else "demangled"
    df = kernel_summary(open_report(report), names=names, by=by.value, range_name=range_name)
    _show(df, format, f"CUDA kernels in {report.name}", top, wide)


@cli_errors
def nvtx_cmd(
    report: ReportArg,
    trace: Annotated[
        bool, typer.Option("--trace", help="One row per push/pop range instance (like nvtxpptrace).")
    ] = False,
    top: TopOpt = None,
    format: FormatOpt = Format.table,
    wide: WideOpt = False,
) -> None:
    """Time per NVTX range, like `nsys stats -r nvtxsum`."""
    from analysis.nvtx import nvtx_summary, nvtx_trace

    export = open_report(report)
    df = nvtx_trace(export) if trace else nvtx_summary(export)
    _show(df, format, f"NVTX ranges in {report.name}", top, wide)


@cli_errors
def nvtx_gpu_cmd(
    report: ReportArg,
    mode: Annotated[
        GpuMode,
        typer.Option(
            "--mode",
            help="phase: kernels to the harness phase open on any thread of the process; thread: to the "
            "innermost range on the launching thread (nvtxkernsum); auto: phase when the export has phases.",
        ),
    ] = GpuMode.auto,
    kernels: Annotated[
        bool, typer.Option("--kernels", help="One row per range and kernel (the nvtxkernsum table).")
    ] = False,
    phases: Annotated[
        str, typer.Option(metavar="<list>", help="Phase range names, comma separated.")
    ] = "forward,backward,optimizer",
    top: Annotated[
        int | None,
        typer.Option("--top", min=1, metavar="<n>", help="With --kernels: top N kernels per range."),
    ] = None,
    format: FormatOpt = Format.table,
    wide: WideOpt = False,
) -> None:
    """GPU time per NVTX range (kernels tied to ranges through their launch calls), like nvtxkernsum."""
    from analysis.nvtx_gpu import nvtx_gpu_kernels, nvtx_gpu_summary, phase_check
    from harness.output import emit_many

    export = open_report(report)
    names = tuple(p.strip() for p in phases.split(",") if p.strip())
    if kernels:
        df = nvtx_gpu_kernels(export, mode=mode.value, phases=names, top=top)
        _show(df, format, f"kernels per NVTX range ({df.attrs['mode']} mode) in {report.name}", wide=wide)
        return
    per_range = nvtx_gpu_summary(export, mode=mode.value, phases=names)
    chosen = per_range.attrs["mode"]
    tables = [(f"GPU time per NVTX range ({chosen} mode) in {report.name}", per_range)]
    if chosen == "phase":
        tables.append(("Do the phases add up? (measured steps)", phase_check(export, names)))
    emit_many(tables, format, notes=per_range.attrs.get("notes", []), wide=wide)


@cli_errors
def api_cmd(
    report: ReportArg, top: TopOpt = None, format: FormatOpt = Format.table, wide: WideOpt = False
) -> None:
    """Time in CUDA API calls, like `nsys stats -r cudaapisum` (each call counted once)."""
    from analysis.cuda_api import cuda_api_summary

    _show(cuda_api_summary(open_report(report)), format, f"CUDA API calls in {report.name}", top, wide)


@cli_errors
def memops_cmd(report: ReportArg, format: FormatOpt = Format.table, wide: WideOpt = False) -> None:
    """GPU memory copies and sets by time and by size, like gpumemtimesum and gpumemsizesum."""
    from analysis.memops import memops_size, memops_time
    from harness.output import emit_many

    export = open_report(report)
    emit_many(
        [("GPU memory operations by time", memops_time(export)), ("by size (MB)", memops_size(export))],
        format,
        wide=wide,
    )


@cli_errors
def launch_cmd(
    report: ReportArg, top: TopOpt = None, format: FormatOpt = Format.table, wide: WideOpt = False
) -> None:
    """API, queue and kernel time per launched kernel, like `nsys stats -r kernexecsum`."""
    from analysis.launch import launch_summary

    df = launch_summary(open_report(report))
    df.attrs["priority"] = LAUNCH_PRIORITY
    _show(df, format, f"kernel launch latency in {report.name}", top, wide)


@cli_errors
def osrt_cmd(
    report: ReportArg, top: TopOpt = None, format: FormatOpt = Format.table, wide: WideOpt = False
) -> None:
    """Time in OS runtime calls, like `nsys stats -r osrtsum`."""
    from analysis.osrt import osrt_summary

    _show(osrt_summary(open_report(report)), format, f"OS runtime calls in {report.name}", top, wide)


@cli_errors
def summary_cmd(
    report: ReportArg, top: TopOpt = None, format: FormatOpt = Format.table, wide: WideOpt = False
) -> None:
    """Every table the export has data for, in one report."""
    from analysis.summary import summary
    from harness.commands.common import warn
    from harness.output import emit_many

    result = summary(open_report(report))
    if not result.tables:
        raise ExportError(
            f"nothing to report in {report}: " + "; ".join(dict.fromkeys(result.skipped.values()))
        )
    tables = [(title, df.head(top) if top else df) for title, df in result.tables]
    for title, df in tables:
        if "kernexecsum" in title:
            df.attrs["priority"] = LAUNCH_PRIORITY
    emit_many(tables, format, notes=result.notes, skipped=result.skipped, wide=wide)
    if format is Format.table:
        by_reason: dict[str, list[str]] = {}
        for title, why in result.skipped.items():
            by_reason.setdefault(why, []).append(title.split(" (")[0])
        for why, titles in by_reason.items():
            warn(f"skipped {', '.join(titles)}: {why}")


def register(app: typer.Typer) -> None:
    # short help: one line each in `harness -h` at 80 columns
    app.command("kernels", short_help="GPU time per CUDA kernel (nsys stats -r gpukernsum).")(kernels_cmd)
    app.command("nvtx", short_help="Time per NVTX range (nvtxsum).")(nvtx_cmd)
    app.command("nvtx-gpu", short_help="GPU time per NVTX range, through kernel launches (nvtxkernsum).")(
        nvtx_gpu_cmd
    )
    app.command("api", short_help="Time in CUDA API calls, each counted once (cudaapisum).")(api_cmd)
    app.command("memops", short_help="GPU memory copies and sets by time and by size (gpumem*sum).")(
        memops_cmd
    )
    app.command("launch", short_help="API, queue and kernel time per launched kernel (kernexecsum).")(
        launch_cmd
    )
    app.command("osrt", short_help="Time in OS runtime calls (osrtsum).")(osrt_cmd)
    app.command("summary", short_help="Every table the export has data for, in one report.")(summary_cmd)
