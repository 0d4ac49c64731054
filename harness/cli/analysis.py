"""Tables from an Nsight Systems export or a Kineto trace: `harness kernels`, `nvtx`, `nvtx-gpu`, `api`,
`memops`, `launch`, `osrt` and `summary`, made from the registry of tables (analysis.tables.tables), plus
`breakdown` and `cache`. Each command parses the options only it has, takes the options every analysis
command shares as one `Reading`, and hands both to `show_table`.
"""

from __future__ import annotations

import datetime as dt
import shutil
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from analysis.errors import ExportError
from harness.cli.common import FormatOpt, cli_errors, note
from harness.cli.nvtx_options import NvtxBy, grouping
from harness.cli.operator_options import AS_TORCH_SORTS, OperatorView, operator_options
from harness.cli.output import Format, emit, emit_many
from harness.cli.reading import (
    AS_GIVEN,
    REPORT_HELP,
    Reading,
    ReportArg,
    StatsFormat,
    StatsFormatOpt,
    TopOpt,
    reading_options,
    show_table,
    stats_format,
)
from harness.core.errors import UsageError

if TYPE_CHECKING:
    import pandas as pd

    from analysis.trace.cache import Cache

from analysis.trace import cache as trace_cache

HTA_HELP = (
    "Apply Holistic Trace Analysis's load rules first (drop the last ProfilerStep, round float µs "
    "timestamps inward), so the numbers equal HTA's."
)


class By(StrEnum):
    shape = "shape"
    name = "name"


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


class GpuMode(StrEnum):
    auto = "auto"
    phase = "phase"
    thread = "thread"


# --- the commands: each parses its own options ---------------------------------------------------------


@cli_errors
@reading_options()
def kernels_cmd(
    report: ReportArg,
    top: TopOpt = None,
    base: Annotated[
        bool, typer.Option("--base", help="Kernel base names (no arguments, templates).")
    ] = False,
    mangled: Annotated[bool, typer.Option("--mangled", help="Mangled kernel names, where recorded.")] = False,
    by: Annotated[
        By | None,
        typer.Option(
            "--by",
            help="shape: one row per name and launch shape (gpukernsum, cuda_gpu_kern_gb_sum); name: merge "
            "shapes (cuda_gpu_kern_sum). Default: as --stats-format does.",
            show_default=False,
        ),
    ] = None,
    range_name: Annotated[
        str | None,
        typer.Option(
            "--range", metavar="<name>", help="Only kernels launched inside NVTX ranges of this name."
        ),
    ] = None,
    hta: Annotated[bool, typer.Option("--hta", help=HTA_HELP)] = False,
    stats: StatsFormatOpt = StatsFormat.auto,
    reading: Reading = AS_GIVEN,
) -> None:
    """GPU time per CUDA kernel, like `nsys stats -r cuda_gpu_kern_sum` (2022.4: gpukernsum)."""
    if base and mangled:
        raise UsageError("--base and --mangled exclude each other: pick one")
    names = "base" if base else "mangled" if mangled else "demangled"
    show_table("kernels", report, reading, top, names=names, by=by.value if by else None,
               range_name=range_name, hta=hta, stats_format=stats_format(stats))  # fmt: skip


@cli_errors
@reading_options()
def nvtx_cmd(
    report: ReportArg,
    trace: Annotated[
        bool, typer.Option("--trace", help="One row per push/pop range instance (like nvtxpptrace).")
    ] = False,
    by: NvtxByOpt = NvtxBy.op,
    raw_names: RawNamesOpt = False,
    top: TopOpt = None,
    reading: Reading = AS_GIVEN,
) -> None:
    """Time per NVTX range, like `nsys stats -r nvtxsum` (with --raw-names: the same rows). PyTorch's
    ranges are grouped by operator."""
    show_table("nvtx", report, reading, top, trace_rows=trace, by=grouping(by, raw_names))


@cli_errors
@reading_options()
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
    reading: Reading = AS_GIVEN,
) -> None:
    """GPU time per NVTX range (kernels tied to ranges through their launch calls), like nvtxkernsum.
    Several exports: each rank's rows, one block per rank (the rows are per process already)."""
    view = "projection" if projection else "kernels" if kernels else "summary"
    names = tuple(p.strip() for p in phases.split(",") if p.strip())
    show_table("nvtx-gpu", report, reading, top, view=view, mode=mode.value, phases=names,
               exclusive=exclusive, by=grouping(by, raw_names))  # fmt: skip


@cli_errors
@reading_options()
def api_cmd(report: ReportArg, top: TopOpt = None, reading: Reading = AS_GIVEN) -> None:
    """Time in CUDA API calls, like `nsys stats -r cudaapisum` (each call counted once)."""
    show_table("api", report, reading, top)


@cli_errors
@reading_options()
def memops_cmd(
    report: ReportArg, stats: StatsFormatOpt = StatsFormat.auto, reading: Reading = AS_GIVEN
) -> None:
    """GPU memory copies and sets by time and by size, like cuda_gpu_mem_time_sum and _size_sum (2022.4:
    gpumemtimesum, gpumemsizesum)."""
    show_table("memops", report, reading, stats_format=stats_format(stats))


@cli_errors
@reading_options()
def launch_cmd(report: ReportArg, top: TopOpt = None, reading: Reading = AS_GIVEN) -> None:
    """API, queue and kernel time per launched kernel, like `nsys stats -r kernexecsum`. Several exports:
    each rank's rows, one block per rank (the rows are per process and thread already)."""
    show_table("launch", report, reading, top)


@cli_errors
@reading_options()
def osrt_cmd(report: ReportArg, top: TopOpt = None, reading: Reading = AS_GIVEN) -> None:
    """Time in OS runtime calls, like `nsys stats -r osrtsum`."""
    show_table("osrt", report, reading, top)


@cli_errors
@operator_options()
@reading_options()
def operators_cmd(
    report: ReportArg,
    view: OperatorView = AS_TORCH_SORTS,
    shapes: Annotated[
        bool,
        typer.Option(
            "--group-by-input-shape",
            help="One row per operator and input shapes (traces recorded with record_shapes=True).",
        ),
    ] = False,
    range_name: Annotated[
        str | None,
        typer.Option(
            "--range", metavar="<name>", help="Only operators that start inside ranges of this name."
        ),
    ] = None,
    reading: Reading = AS_GIVEN,
) -> None:
    """Framework operators (aten:: …) of a torch.profiler trace, with the columns of torch.profiler's
    key_averages() table: self and total CPU and CUDA time with their %, averages, calls."""
    show_table(
        "operators", report, reading, view.top, sort=view.sort, group_by_input_shape=shapes, within=range_name
    )


@cli_errors
@reading_options()
def summary_cmd(
    report: ReportArg,
    by: NvtxByOpt = NvtxBy.op,
    raw_names: RawNamesOpt = False,
    top: TopOpt = None,
    stats: StatsFormatOpt = StatsFormat.auto,
    reading: Reading = AS_GIVEN,
) -> None:
    """Every table the export has data for, in one report. Several exports: the summaries combine like the
    single commands' (GPU time per NVTX range is left to `harness nvtx-gpu`)."""
    show_table("summary", report, reading, top, by=grouping(by, raw_names), stats_format=stats_format(stats))


TABLE_COMMANDS = {
    "kernels": kernels_cmd,
    "nvtx": nvtx_cmd,
    "nvtx-gpu": nvtx_gpu_cmd,
    "api": api_cmd,
    "memops": memops_cmd,
    "launch": launch_cmd,
    "osrt": osrt_cmd,
    "operators": operators_cmd,
    "summary": summary_cmd,
}


def register(app: typer.Typer) -> None:
    for name, command in TABLE_COMMANDS.items():
        app.command(name, epilog=REPORT_HELP)(command)
    app.command("cache")(cache_cmd)
    app.command("breakdown")(breakdown_cmd)


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
    from harness.experiments import opening  # here: the table commands of this module need no numpy
    # pyarrow, pandas: only for this command

    cache = trace_cache.Cache()
    if max_size is not None:
        try:
            limit = trace_cache.parse_size(max_size)
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
            shutil.rmtree(opening.exports_dir(), ignore_errors=True)
        note(f"removed {removed} cache entries ({freed:,} bytes) from {cache.root}")
        return
    emit(cache_table(cache), format, title=f"trace cache in {cache.root} (limit {cache.limit:,} bytes)")


def cache_table(cache: Cache) -> pd.DataFrame:
    import pandas as pd

    entries = cache.entries()
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
@reading_options(omit=("by_rank", "jobs", "dask"))
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
    reading: Reading = AS_GIVEN,
) -> None:
    """Where GPU time goes, per rank: idle, compute and non-compute time (HTA's temporal breakdown), time
    per kernel type, and idle time per stream by cause."""
    # imported here: the table commands of this module read a cached export without pandas
    from analysis.hta import breakdown
    from harness.experiments import opening
    # pandas: only once a table is asked for

    paths: list[Path] = []
    for path in reports:
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith(TRACE_SUFFIXES))
            if not found:
                raise ExportError(f"no .json or .json.gz traces in the folder {path}")
            paths += found
        else:
            paths.append(path)
    traces = [opening.open_report(p, cache=not reading.no_cache) for p in paths]
    rules = {"hta_rules": hta}
    name = paths[0].name if len(paths) == 1 else f"{len(paths)} traces"
    tables = [
        (
            f"GPU time per rank in {name}: idle, compute, non-compute",
            breakdown.temporal_breakdown(traces, **rules),
        ),
        (
            "GPU time per kernel type (overlaps split out)",
            breakdown.kernel_type_breakdown(traces, **rules),
        ),
        ("Idle time per stream, by cause", breakdown.idle_time_breakdown(traces, **rules)),
    ]
    if all_tables:
        tables += [
            (
                "GPU time per kernel (10 per type, then others)",
                breakdown.kernel_breakdown(traces, **rules),
            ),
            ("Idle gaps per stream and cause", breakdown.idle_interval_stats(traces, **rules)),
            ("Communication overlapped by computation", breakdown.comm_comp_overlap(traces, **rules)),
        ]
        if all(t.has("runtime") for t in traces):
            tables.append(("Queue length per stream", breakdown.queue_length_summary(traces, **rules)))
    notes = list(dict.fromkeys(n for _, df in tables for n in df.attrs.get("notes", [])))
    if not hta:  # say where the oracle's numbers differ, and why
        notes += breakdown.hta_difference(traces, tables[0][1])
    emit_many(tables, reading.format, notes=notes, wide=reading.wide, limit=reading.limit)
