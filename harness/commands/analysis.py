"""Tables from an Nsight Systems export: `harness kernels`, `nvtx`, `nvtx-gpu`, `api`, `memops`, `launch`,
`osrt` and `summary`. Each parses its arguments, calls one analysis function and renders what it returns.

No torch or plotly here (start-up time counts): pandas and the analysis modules load inside the commands.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from harness.commands.common import FormatOpt, LimitOpt, WideOpt, cli_errors
from harness.errors import ExportError, UsageError
from harness.output import Format

if TYPE_CHECKING:
    import pandas as pd

    from analysis.results import Kept
    from analysis.trace import Trace

REPORT_HELP = (
    "REPORT: an nsys export (.sqlite), a report (.nsys-rep, .qdrep; exported first) or a PyTorch "
    "profiler (Kineto) trace (.json, .json.gz). Several, a glob pattern or a folder: one table over all "
    "of them (ranks from rank<R> in the file names), read in parallel."
)
# hidden: Typer would print the argument's type as <list[Path]>; REPORT_HELP (the epilog) describes it
ReportArg = Annotated[list[Path], typer.Argument(show_default=False, metavar="REPORT", hidden=True)]
ByRankOpt = Annotated[
    bool,
    typer.Option(
        "--by-rank",
        help="Several exports: one block of rows per rank (or file). One export of several ranks (one "
        "nsys around torchrun): split by process, each process that launched kernels a rank.",
    ),
]
JobsOpt = Annotated[
    int | None,
    typer.Option("--jobs", "-j", min=1, metavar="<n>", help="Several exports: at most N local processes."),
]
DaskOpt = Annotated[
    str | None,
    typer.Option(
        "--dask",
        metavar="<address>",
        help="Several exports: read them on this Dask scheduler (tcp://host:8786) instead of local "
        "processes. Needs pip install 'harness[dask]'.",
    ),
]
NoCacheOpt = Annotated[
    bool,
    typer.Option("--no-cache", help="Read the export itself: neither read nor fill the Parquet cache."),
]
TopOpt = Annotated[
    int | None, typer.Option("--top", min=1, metavar="<n>", help="Show only the first N rows.")
]
# kernexecsum: the latencies first (total, API, queue, kernel); the API name is nearly always cudaLaunchKernel
LAUNCH_PRIORITY = ["Kernel Name", "TAvg (ns)", "AAvg (ns)", "QAvg (ns)", "KAvg (ns)", "Count", "QCount"]
HTA_HELP = (
    "Apply Holistic Trace Analysis's load rules first (drop the last ProfilerStep, round float µs "
    "timestamps inward), so the numbers equal HTA's."
)


class By(StrEnum):
    shape = "shape"
    name = "name"


class NvtxBy(StrEnum):
    op = "op"
    shape = "shape"


NvtxByOpt = Annotated[
    NvtxBy,
    typer.Option(
        "--by",
        help="PyTorch's NVTX ranges (`aten::to, seq = N, op_id = N`): op groups them by operator (as "
        "torch.profiler's key_averages()), shape by operator and input sizes.",
    ),
]
RawNamesOpt = Annotated[
    bool,
    typer.Option("--raw-names", help="NVTX names as recorded, one row each (what nsys stats prints)."),
]


def grouping(by: NvtxBy, raw_names: bool) -> str:
    """The NVTX grouping of analysis.nvtx_names the options name."""
    return "raw" if raw_names else by.value


class GpuMode(StrEnum):
    auto = "auto"
    phase = "phase"
    thread = "thread"


def open_report(report: Path, no_cache: bool = False) -> Trace:
    from harness.reports import open_report as open_it

    return open_it(report, cache=not no_cache)


def _served(report: list[Path], name: str, options: dict, no_cache: bool, by_rank: bool) -> Kept | None:
    """What command `name` printed before for this one export with these options, kept in the cache and
    read back without pandas (analysis/results.py); None when it has to be computed."""
    if len(report) != 1 or by_rank or no_cache or not report[0].is_file():
        return None
    from analysis.results import cached

    return cached(report[0], name, {**options, "file": report[0].name})


def _keep(trace: Trace, name: str, options: dict, report: Path, tables: list, notes: Sequence[str] = (),
          skipped: dict[str, str] | None = None) -> None:  # fmt: skip
    """Keep what the command prints in the trace's cache entry, for `_served`."""
    from analysis.results import keep

    keep(trace, name, {**options, "file": report.name}, tables, notes, skipped)


def _show(df: pd.DataFrame, fmt: Format, title: str, top: int | None = None, wide: bool = False,
          limit: int | None = None) -> None:  # fmt: skip
    from harness.output import emit

    notes = df.attrs.get("notes", [])
    emit(df.head(top) if top else df, fmt, title=title, notes=notes, wide=wide, limit=limit)


def _inputs(reports: list[Path]) -> list[Path]:
    """The exports named: files, folders and glob patterns expanded (analysis.multi.expand)."""
    from analysis.multi import expand

    return expand(reports)


def _many(kind: str, paths: list[Path], options: dict, by_rank: bool, jobs: int | None, dask: str | None,
          no_cache: bool, fmt: Format, title: str, top: int | None, wide: bool,
          titles: dict[str, str] | None = None, limit: int | None = None) -> None:  # fmt: skip
    """Several exports: the combined tables (harness.reports.analyse_many), rendered."""
    from harness.output import emit, emit_many
    from harness.reports import analyse_many

    result = analyse_many(kind, paths, options, by_rank=by_rank, jobs=jobs, dask=dask, cache=not no_cache)
    sources = result.sources
    labels = sources.labels if sources is not None else []
    label = sources.column if sources is not None else "Source"
    first, last = (labels[0], labels[-1]) if labels else ("", "")
    what = f"{len(paths)} exports" if len(paths) > 1 else paths[0].name
    what += f" (ranks {first}-{last})" if label == "Rank" else ""
    tables = []
    for name, df in result.tables:
        if top and label in df.columns:
            df = df.groupby(label, sort=False, group_keys=False).head(top)
        elif top:
            df = df.head(top)
        heading = (titles or {}).get(name, name)
        tables.append((f"{heading} in {what}" if len(result.tables) > 1 else f"{title} in {what}", df))
    notes = list(dict.fromkeys([*result.notes, *(n for _, df in tables for n in df.attrs.get("notes", []))]))
    if len(tables) == 1 and not result.skipped:
        emit(tables[0][1], fmt, title=tables[0][0], notes=notes, wide=wide, limit=limit)
        return
    emit_many(tables, fmt, notes=notes, skipped=result.skipped or None, wide=wide, limit=limit)
    if fmt is Format.table and result.skipped:
        from harness.commands.common import warn

        for title_, why in result.skipped.items():
            warn(f"skipped {title_.split(' (')[0]}: {why}")


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
    hta: Annotated[bool, typer.Option("--hta", help=HTA_HELP)] = False,
    by_rank: ByRankOpt = False,
    jobs: JobsOpt = None,
    dask: DaskOpt = None,
    no_cache: NoCacheOpt = False,
    format: FormatOpt = Format.table,
    wide: WideOpt = False,
    limit: LimitOpt = None,
) -> None:
    """GPU time per CUDA kernel, like `nsys stats -r gpukernsum`."""
    if base and mangled:
        raise UsageError("--base and --mangled exclude each other: pick one")
    names = "base" if base else "mangled" if mangled else "demangled"
    kept = {"names": names, "by": by.value, "range_name": range_name}
    served = None if hta else _served(report, "kernels", kept, no_cache, by_rank)
    if served is not None:  # printed before: no pandas, no pyarrow
        _show(served.tables[0][1], format, served.tables[0][0], top, wide, limit)  # type: ignore[arg-type]
        return
    from analysis.kernels import kernel_table

    single = len(report) == 1 and report[0].is_file()  # expand() is analysis.multi's, which imports pandas
    paths = [report[0]] if single else _inputs(report)
    if len(paths) > 1 or by_rank:
        options = {"names": names, "by": by.value, "range_name": range_name, "hta": hta}
        _many(
            "kernels",
            paths,
            options,
            by_rank,
            jobs,
            dask,
            no_cache,
            format,
            "CUDA kernels",
            top,
            wide,
            limit=limit,
        )
        return
    report = paths[0]
    trace = open_report(report, no_cache)
    if hta:
        from analysis.hta_rules import hta_view

        trace = hta_view(trace)
    table = kernel_table(trace, names=names, by=by.value, range_name=range_name)  # no pandas from the cache
    title = f"CUDA kernels in {report.name}"
    if not hta:
        _keep(trace, "kernels", kept, report, [(title, table)])
    _show(table, format, title, top, wide, limit)  # type: ignore[arg-type]


@cli_errors
def nvtx_cmd(
    report: ReportArg,
    trace: Annotated[
        bool, typer.Option("--trace", help="One row per push/pop range instance (like nvtxpptrace).")
    ] = False,
    by: NvtxByOpt = NvtxBy.op,
    raw_names: RawNamesOpt = False,
    top: TopOpt = None,
    by_rank: ByRankOpt = False,
    jobs: JobsOpt = None,
    dask: DaskOpt = None,
    no_cache: NoCacheOpt = False,
    format: FormatOpt = Format.table,
    wide: WideOpt = False,
    limit: LimitOpt = None,
) -> None:
    """Time per NVTX range, like `nsys stats -r nvtxsum` (with --raw-names: the same rows). PyTorch's
    ranges are grouped by operator."""
    from analysis.nvtx import nvtx_summary, nvtx_trace

    group = grouping(by, raw_names)
    paths = _inputs(report)
    if len(paths) > 1 or by_rank:
        options = {"trace_rows": trace, "by": group}
        _many(
            "nvtx",
            paths,
            options,
            by_rank,
            jobs,
            dask,
            no_cache,
            format,
            "NVTX ranges",
            top,
            wide,
            limit=limit,
        )
        return
    report = paths[0]
    tr = open_report(report, no_cache)
    df = nvtx_trace(tr) if trace else nvtx_summary(tr, by=group)
    _show(df, format, f"NVTX ranges in {report.name}", top, wide, limit)


@cli_errors
def nvtx_gpu_cmd(
    report: ReportArg,
    mode: Annotated[
        GpuMode,
        typer.Option(
            "--mode",
            help="phase: kernels to the harness phase open on any thread of the process; thread: to the "
            "ranges open on the launching thread (nvtxkernsum); auto: phase when the export has phases.",
        ),
    ] = GpuMode.auto,
    kernels: Annotated[
        bool, typer.Option("--kernels", help="One row per range and kernel (the nvtxkernsum table).")
    ] = False,
    exclusive: Annotated[
        bool,
        typer.Option(
            "--exclusive",
            help="Thread mode: credit each kernel to the innermost range only, so ranges add up to the "
            "total (default: inclusive, to every enclosing range, like nvtxkernsum).",
        ),
    ] = False,
    phases: Annotated[
        str, typer.Option(metavar="<list>", help="Phase range names, comma separated.")
    ] = "forward,backward,optimizer",
    projection: Annotated[
        bool,
        typer.Option(
            "--projection",
            help="One row per push/pop range projected onto the GPU: first start to last end of the GPU "
            "work launched inside it (like nvtxgpuproj).",
        ),
    ] = False,
    top: Annotated[
        int | None,
        typer.Option("--top", min=1, metavar="<n>", help="With --kernels: top N kernels per range."),
    ] = None,
    by: NvtxByOpt = NvtxBy.op,
    raw_names: RawNamesOpt = False,
    by_rank: ByRankOpt = False,
    jobs: JobsOpt = None,
    dask: DaskOpt = None,
    no_cache: NoCacheOpt = False,
    format: FormatOpt = Format.table,
    wide: WideOpt = False,
    limit: LimitOpt = None,
) -> None:
    """GPU time per NVTX range (kernels tied to ranges through their launch calls), like nvtxkernsum.
    Several exports: each rank's rows, one block per rank (the rows are per process already)."""
    from harness.output import emit_many

    names = tuple(p.strip() for p in phases.split(",") if p.strip())
    group = grouping(by, raw_names)
    paths = [report[0]] if len(report) == 1 and report[0].is_file() else _inputs(report)
    if len(paths) > 1 or by_rank:
        view = "projection" if projection else "kernels" if kernels else "summary"
        options = {"view": view, "mode": mode.value, "phases": names, "exclusive": exclusive, "top": top}
        options["by"] = group
        titles = {
            "ranges": "GPU time per NVTX range",
            "check": "Do the phases add up? (measured steps)",
            "kernels": "kernels per NVTX range",
            "projection": "NVTX ranges projected onto the GPU",
        }
        _many(
            "nvtx-gpu",
            paths,
            options,
            by_rank,
            jobs,
            dask,
            no_cache,
            format,
            titles["projection" if projection else "kernels" if kernels else "ranges"],
            None,
            wide,
            titles,
            limit,
        )
        return
    report = paths[0]
    kept = {"mode": mode.value, "phases": names, "exclusive": exclusive, "by": group, "kernels": kernels,
            "projection": projection, "top": top}  # fmt: skip
    served = _served([report], "nvtx-gpu", kept, no_cache, by_rank)
    if served is not None:  # printed before: no pandas, no pyarrow
        tables, notes = served.tables, served.notes
    else:
        from analysis.nvtx_gpu import nvtx_gpu_kernels, nvtx_gpu_projection, nvtx_gpu_summary, phase_check

        trace = open_report(report, no_cache)
        if projection:
            title = f"NVTX ranges projected onto the GPU in {report.name}"
            tables, notes = [(title, nvtx_gpu_projection(trace))], []
        elif kernels:
            df = nvtx_gpu_kernels(
                trace, mode=mode.value, phases=names, top=top, exclusive=exclusive, by=group
            )
            tables, notes = [(f"kernels per NVTX range ({df.attrs['mode']} mode) in {report.name}", df)], []
        else:
            per_range = nvtx_gpu_summary(trace, mode=mode.value, phases=names, exclusive=exclusive, by=group)
            chosen = per_range.attrs["mode"]
            tables = [(f"GPU time per NVTX range ({chosen} mode) in {report.name}", per_range)]
            if chosen == "phase":
                tables.append(("Do the phases add up? (measured steps)", phase_check(trace, names)))
            notes = per_range.attrs.get("notes", [])
        _keep(trace, "nvtx-gpu", kept, report, tables, notes)
    if projection:
        _show(tables[0][1], format, tables[0][0], top, wide, limit)
    elif kernels:
        _show(tables[0][1], format, tables[0][0], wide=wide, limit=limit)
    else:
        emit_many(tables, format, notes=notes, wide=wide, limit=limit)


@cli_errors
def api_cmd(
    report: ReportArg,
    top: TopOpt = None,
    by_rank: ByRankOpt = False,
    jobs: JobsOpt = None,
    dask: DaskOpt = None,
    no_cache: NoCacheOpt = False,
    format: FormatOpt = Format.table,
    wide: WideOpt = False,
    limit: LimitOpt = None,
) -> None:
    """Time in CUDA API calls, like `nsys stats -r cudaapisum` (each call counted once)."""
    from analysis.cuda_api import cuda_api_summary

    paths = _inputs(report)
    if len(paths) > 1 or by_rank:
        _many(
            "api", paths, {}, by_rank, jobs, dask, no_cache, format, "CUDA API calls", top, wide, limit=limit
        )
        return
    report = paths[0]
    _show(
        cuda_api_summary(open_report(report, no_cache)),
        format,
        f"CUDA API calls in {report.name}",
        top,
        wide,
        limit,
    )


@cli_errors
def memops_cmd(
    report: ReportArg,
    by_rank: ByRankOpt = False,
    jobs: JobsOpt = None,
    dask: DaskOpt = None,
    no_cache: NoCacheOpt = False,
    format: FormatOpt = Format.table,
    wide: WideOpt = False,
    limit: LimitOpt = None,
) -> None:
    """GPU memory copies and sets by time and by size, like gpumemtimesum and gpumemsizesum."""
    from analysis.memops import memops_size, memops_time
    from harness.output import emit_many

    paths = _inputs(report)
    if len(paths) > 1 or by_rank:
        titles = {"by time": "GPU memory operations by time", "by size": "by size (MB)"}
        _many("memops", paths, {}, by_rank, jobs, dask, no_cache, format, "", None, wide, titles, limit)
        return
    report = paths[0]
    trace = open_report(report, no_cache)
    by_time, by_size = memops_time(trace), memops_size(trace)
    emit_many(
        [("GPU memory operations by time", by_time), ("by size (MB)", by_size)],
        format,
        notes=by_time.attrs.get("notes", []),
        wide=wide,
        limit=limit,
    )


@cli_errors
def launch_cmd(
    report: ReportArg,
    top: TopOpt = None,
    by_rank: ByRankOpt = False,
    jobs: JobsOpt = None,
    dask: DaskOpt = None,
    no_cache: NoCacheOpt = False,
    format: FormatOpt = Format.table,
    wide: WideOpt = False,
    limit: LimitOpt = None,
) -> None:
    """API, queue and kernel time per launched kernel, like `nsys stats -r kernexecsum`. Several exports:
    each rank's rows, one block per rank (the rows are per process and thread already)."""
    from analysis.launch import launch_summary

    paths = _inputs(report)
    if len(paths) > 1 or by_rank:
        _many(
            "launch",
            paths,
            {},
            by_rank,
            jobs,
            dask,
            no_cache,
            format,
            "kernel launch latency",
            top,
            wide,
            limit=limit,
        )
        return
    report = paths[0]
    df = launch_summary(open_report(report, no_cache))
    df.attrs["priority"] = LAUNCH_PRIORITY
    _show(df, format, f"kernel launch latency in {report.name}", top, wide, limit)


@cli_errors
def osrt_cmd(
    report: ReportArg,
    top: TopOpt = None,
    by_rank: ByRankOpt = False,
    jobs: JobsOpt = None,
    dask: DaskOpt = None,
    no_cache: NoCacheOpt = False,
    format: FormatOpt = Format.table,
    wide: WideOpt = False,
    limit: LimitOpt = None,
) -> None:
    """Time in OS runtime calls, like `nsys stats -r osrtsum`."""
    from analysis.osrt import osrt_summary

    paths = _inputs(report)
    if len(paths) > 1 or by_rank:
        _many(
            "osrt",
            paths,
            {},
            by_rank,
            jobs,
            dask,
            no_cache,
            format,
            "OS runtime calls",
            top,
            wide,
            limit=limit,
        )
        return
    report = paths[0]
    _show(
        osrt_summary(open_report(report, no_cache)),
        format,
        f"OS runtime calls in {report.name}",
        top,
        wide,
        limit,
    )


@cli_errors
def summary_cmd(
    report: ReportArg,
    by: NvtxByOpt = NvtxBy.op,
    raw_names: RawNamesOpt = False,
    top: TopOpt = None,
    by_rank: ByRankOpt = False,
    jobs: JobsOpt = None,
    dask: DaskOpt = None,
    no_cache: NoCacheOpt = False,
    format: FormatOpt = Format.table,
    wide: WideOpt = False,
    limit: LimitOpt = None,
) -> None:
    """Every table the export has data for, in one report. Several exports: the summaries combine like the
    single commands' (GPU time per NVTX range is left to `harness nvtx-gpu`)."""
    from harness.commands.common import warn
    from harness.output import emit_many

    group = grouping(by, raw_names)
    paths = [report[0]] if len(report) == 1 and report[0].is_file() else _inputs(report)
    if len(paths) > 1 or by_rank:
        _many("summary", paths, {"by": group}, by_rank, jobs, dask, no_cache, format, "", top, wide,
              {t: t for t in ()}, limit)  # fmt: skip
        return
    report = paths[0]
    served = _served([report], "summary", {"by": group}, no_cache, by_rank)
    if served is not None:  # printed before: no pandas, no pyarrow
        whole, notes, skipped = served.tables, served.notes, served.skipped or {}
    else:
        from analysis.summary import summary

        trace = open_report(report, no_cache)
        result = summary(trace, by=group)
        if not result.tables:
            raise ExportError(
                f"nothing to report in {report}: " + "; ".join(dict.fromkeys(result.skipped.values()))
            )
        whole, notes, skipped = result.tables, result.notes, result.skipped
        for title, df in whole:
            if "kernexecsum" in title:
                df.attrs["priority"] = LAUNCH_PRIORITY
        _keep(trace, "summary", {"by": group}, report, whole, notes, skipped)
    tables = [(title, df.head(top) if top else df) for title, df in whole]
    emit_many(tables, format, notes=notes, skipped=skipped, wide=wide, limit=limit)  # type: ignore[arg-type]
    if format is Format.table:
        by_reason: dict[str, list[str]] = {}
        for title, why in skipped.items():
            by_reason.setdefault(why, []).append(title.split(" (")[0])
        for why, titles in by_reason.items():
            warn(f"skipped {', '.join(titles)}: {why}")


def register(app: typer.Typer) -> None:
    # short help: one line each in `harness -h` at 80 columns
    app.command(
        "kernels", epilog=REPORT_HELP, short_help="GPU time per CUDA kernel (nsys stats -r gpukernsum)."
    )(kernels_cmd)
    app.command("nvtx", epilog=REPORT_HELP, short_help="Time per NVTX range (nvtxsum).")(nvtx_cmd)
    app.command(
        "nvtx-gpu",
        epilog=REPORT_HELP,
        short_help="GPU time per NVTX range, through kernel launches (nvtxkernsum).",
    )(nvtx_gpu_cmd)
    app.command(
        "api", epilog=REPORT_HELP, short_help="Time in CUDA API calls, each counted once (cudaapisum)."
    )(api_cmd)
    app.command(
        "memops",
        epilog=REPORT_HELP,
        short_help="GPU memory copies and sets by time and by size (gpumem*sum).",
    )(memops_cmd)
    app.command(
        "launch",
        epilog=REPORT_HELP,
        short_help="API, queue and kernel time per launched kernel (kernexecsum).",
    )(launch_cmd)
    app.command("osrt", epilog=REPORT_HELP, short_help="Time in OS runtime calls (osrtsum).")(osrt_cmd)
    app.command(
        "summary", epilog=REPORT_HELP, short_help="Every table the export has data for, in one report."
    )(summary_cmd)
    app.command("cache", short_help="List, clear or limit the Parquet cache of exports read before.")(
        cache_cmd
    )
    app.command("breakdown", short_help="GPU idle, compute and non-compute time per rank (HTA).")(
        breakdown_cmd
    )


@cli_errors
def cache_cmd(
    clear: Annotated[
        bool, typer.Option("--clear", help="Remove every entry (or, with REPORT, that report's).")
    ] = False,
    report: Annotated[
        Path | None, typer.Option("--report", help="With --clear: only the entries of this export.")
    ] = None,
    max_size: Annotated[
        str | None,
        typer.Option(
            "--max-size",
            help="Keep the cache under this size (e.g. 5GB): least recently used "
            "entries go first. Saved for later commands; HARNESS_CACHE_LIMIT overrides it.",
        ),
    ] = None,
    format: FormatOpt = Format.table,
) -> None:
    """The Parquet cache of exports read before: list its entries with their sizes, clear it, limit it."""
    from analysis.cache import Cache, parse_size
    from harness.commands.common import note
    from harness.output import emit

    cache = Cache()
    if max_size is not None:
        try:
            limit = parse_size(max_size)
        except ValueError as e:
            raise UsageError(str(e)) from None
        try:
            cache.set_limit(limit)
        except OSError as e:
            why = e.strerror or type(e).__name__
            raise UsageError(
                f"cannot save the cache limit in {cache.root}: {why}; make it a writable folder, or set "
                "HARNESS_CACHE_DIR to one (HARNESS_CACHE_LIMIT sets the limit without saving it)"
            ) from None
        freed = cache.evict()
        note(f"cache limit set to {limit:,} bytes" + (f"; evicted {freed:,} bytes" if freed else ""))
    if clear:
        removed, freed = cache.clear(report)
        if report is None:
            import shutil

            from harness.reports import exports_dir

            shutil.rmtree(exports_dir(), ignore_errors=True)
        note(f"removed {removed} cache entries ({freed:,} bytes) from {cache.root}")
        return
    emit(cache_table(cache), format, title=f"trace cache in {cache.root} (limit {cache.limit:,} bytes)")


def cache_table(cache: object) -> pd.DataFrame:
    import datetime as dt

    import pandas as pd

    entries = cache.entries()  # type: ignore[attr-defined]
    return pd.DataFrame(
        {
            "Source": [e.source for e in entries],
            "Format": [e.format for e in entries],
            "Files": [e.files for e in entries],
            "Size (bytes)": [e.size_bytes for e in entries],
            "Last Used": [
                dt.datetime.fromtimestamp(e.last_used).isoformat(timespec="seconds") for e in entries
            ],
            "Source Exists": [e.source_exists for e in entries],
        }
    )


TRACE_SUFFIXES = (".json", ".json.gz")


@cli_errors
def breakdown_cmd(
    reports: Annotated[
        list[Path],
        typer.Argument(
            help="Traces, one per rank: Kineto .json(.gz), nsys exports or reports; a folder stands for "
            "the .json(.gz) traces in it."
        ),
    ],
    hta: Annotated[bool, typer.Option("--hta", help=HTA_HELP)] = False,
    all_tables: Annotated[
        bool,
        typer.Option(
            "--all",
            help="Also the per-kernel breakdown, idle-gap statistics, communication/computation overlap "
            "and queue lengths.",
        ),
    ] = False,
    no_cache: NoCacheOpt = False,
    format: FormatOpt = Format.table,
    wide: WideOpt = False,
    limit: LimitOpt = None,
) -> None:
    """Where GPU time goes, per rank: idle, compute and non-compute time (HTA's temporal breakdown), time
    per kernel type, and idle time per stream by cause."""
    from analysis import breakdown as b
    from harness.output import emit_many

    paths: list[Path] = []
    for path in reports:
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith(TRACE_SUFFIXES))
            if not found:
                raise ExportError(f"no .json or .json.gz traces in the folder {path}")
            paths += found
        else:
            paths.append(path)
    traces = [open_report(p, no_cache) for p in paths]
    rules = {"hta_rules": hta}
    name = paths[0].name if len(paths) == 1 else f"{len(paths)} traces"
    tables = [
        (f"GPU time per rank in {name}: idle, compute, non-compute", b.temporal_breakdown(traces, **rules)),
        ("GPU time per kernel type (overlaps split out)", b.kernel_type_breakdown(traces, **rules)),
        ("Idle time per stream, by cause", b.idle_time_breakdown(traces, **rules)),
    ]
    if all_tables:
        tables += [
            ("GPU time per kernel (10 per type, then others)", b.kernel_breakdown(traces, **rules)),
            ("Idle gaps per stream and cause", b.idle_interval_stats(traces, **rules)),
            ("Communication overlapped by computation", b.comm_comp_overlap(traces, **rules)),
        ]
        if all(t.has("runtime") for t in traces):
            tables.append(("Queue length per stream", b.queue_length_summary(traces, **rules)))
    notes = list(dict.fromkeys(n for _, df in tables for n in df.attrs.get("notes", [])))
    emit_many(tables, format, notes=notes, wide=wide, limit=limit)
