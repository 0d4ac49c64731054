"""Every table an export has data for, in one report (`harness summary`).

Each source table is scanned once. With a cache, the columns every table reads go there first (a chunk at
a time where the reader reads in chunks) and the tables are built one after another from it, each one's
frames let go before the next: the peak is the largest table's, not the sum of all (1M kernels: ~950 MB
when every column was held for all nine tables). Without a cache, every column is held from the start.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd

from analysis.errors import ExportError
from analysis.tables.cuda_api import cuda_api_summary
from analysis.tables.kernels import kernel_summary
from analysis.tables.launch import launch_summary
from analysis.tables.memops import memops_size, memops_time
from analysis.tables.nvtx import any_named, nvtx_summary
from analysis.tables.nvtx_gpu import nvtx_gpu_summary, phase_check
from analysis.tables.osrt import osrt_summary
from analysis.tables.stats_format import DEFAULT as DEFAULT_FORMAT
from analysis.trace.frames import FRAMES
from analysis.trace.trace import Trace
from workloads.names import STEP, TRAIN_PHASES

# The columns the tables below read, loaded together so that each source table is scanned once.
NEEDS = {
    "kernels": (
        "start",
        "end",
        "duration",
        "name_id",
        "grid",
        "block",
        "correlation_id",
        "global_pid",
        "device_id",
    ),
    "runtime": ("start", "end", "correlation_id", "global_tid", "name_id"),
    "memcpy": ("start", "end", "copy_kind", "bytes", "stream_id", "correlation_id", "global_pid"),
    "memset": ("start", "end", "bytes", "stream_id", "correlation_id", "global_pid"),
    "osrt": ("duration", "name_id"),
    "nvtx": FRAMES["nvtx"],
    "strings": (),
}


NO_PHASES = (
    "the export has no harness phase ranges (forward, backward, optimizer, step): the tables cover the "
    "whole capture"
)


def has_phase_ranges(trace: Trace) -> bool:
    """Whether the trace holds any of the harness's phase ranges (forward, backward, optimizer, step)."""
    if not trace.has("nvtx"):
        return False
    # the names alone, not the 1.8M ranges' nesting that all_ranges builds; the rows all_ranges keeps
    # (those with a start and an end) are only asked for where a phase name is there at all
    wanted = [*TRAIN_PHASES, STEP]
    if not any_named(trace, wanted):
        return False
    names = trace.frame("nvtx", ["start", "end", "name"], keep=False)["name"]
    return bool(names.isin(wanted).any())


@dataclass
class Report:
    """Titled tables, the notes their functions left, and why each missing table is missing."""

    tables: list[tuple[str, pd.DataFrame]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)


def _builders(
    by: str = "op", stats_format: str = DEFAULT_FORMAT
) -> list[tuple[str, Callable[[Trace], pd.DataFrame]]]:
    def gpu_per_range(trace: Trace) -> pd.DataFrame:
        # phase mode has rows only where a range is named after a phase: else not built (a whole join)
        if trace.has("nvtx") and any_named(trace, list(TRAIN_PHASES)):
            out = nvtx_gpu_summary(trace, mode="phase", by=by)
            if len(out):
                return out
        return nvtx_gpu_summary(trace, mode="thread", by=by)

    def phases_add_up(trace: Trace) -> pd.DataFrame:
        if not has_phase_ranges(trace):
            raise ExportError(NO_PHASES)
        out = phase_check(trace)
        if out["Kernels"].iloc[:-2].sum() == 0:
            raise ExportError("no kernels in the harness's phase ranges")
        return out

    return [
        ("CUDA kernels (gpukernsum)", lambda trace: kernel_summary(trace, stats_format=stats_format)),
        ("NVTX ranges (nvtxsum)", lambda trace: nvtx_summary(trace, by)),
        ("GPU time per NVTX range (nvtxkernsum)", gpu_per_range),
        ("Do the phases add up?", phases_add_up),
        ("CUDA API (cudaapisum)", cuda_api_summary),
        ("GPU memory time (gpumemtimesum)", lambda trace: memops_time(trace, stats_format)),
        ("GPU memory size (gpumemsizesum)", lambda trace: memops_size(trace, stats_format)),
        ("Launch latency (kernexecsum)", launch_summary),
        ("OS runtime (osrtsum)", osrt_summary),
    ]


def summary(trace: Trace, by: str = "op", stats_format: str = DEFAULT_FORMAT) -> Report:
    """Build every table; a table without data is skipped and the reason kept in `skipped`. NVTX names
    are grouped as `by` says (analysis.nvtx_names; "raw": as nsys stats prints them); kernels and memory
    operations as `nsys stats` of `stats_format` prints them (analysis.tables.stats_format)."""
    report = Report()
    staged = trace.stage(NEEDS)  # into the cache, scanned once; else held, scanned once
    if not staged:
        trace.load(NEEDS)
    for title, build in _builders(by, stats_format):
        try:
            table = build(trace)
        except ExportError as e:
            report.skipped[title] = str(e)
            continue
        finally:
            if staged:  # the next table reads its columns from the cache: one table's frames at a time
                trace.release()
        if table.empty:
            report.skipped[title] = "no rows"
            continue
        report.tables.append((title, table))
        for note in table.attrs.get("notes", []):
            if note not in report.notes:
                report.notes.append(note)
    return report
