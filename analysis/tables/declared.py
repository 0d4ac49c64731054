"""Each analysis table declared once, in what a command reads before it computes anything (`DECLARED`).

A `Declared` names the command, its heading over several exports, the report it mirrors, its deciding
columns (the last a narrow terminal gives up), and how the command serves it: kept in the export's cache
entry and served from there again (analysis.trace.results), whether it takes --top itself, and a way to
one export's tables without pandas. This module imports neither pandas nor numpy: `harness kernels` on a
cached export reads it and the kept table, and nothing else. How each table is computed (with pandas, from
one export or several) is its `Table` in analysis.tables.tables, made from these declarations.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from analysis.trace.results import Rows
    from analysis.trace.trace import Trace


@dataclass
class Tables:
    """One command's titled tables from one trace (DataFrames, or Rows where no pandas was needed), the
    notes to print with them, the tables it has no data for (title -> why), and whether they print as a
    titled list even when there is one."""

    tables: list[tuple[str, pd.DataFrame | Rows]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: dict[str, str] | None = None
    titled: bool = False


@dataclass(frozen=True)
class Declared:
    """One analysis command's tables, declared once."""

    name: str  # the command: `harness NAME`
    title: str  # its heading over several exports
    mirrors: str  # the nsys stats report or HTA call whose rows it equals
    deciding: tuple[str, ...] = ()  # columns never dropped to fit the terminal (its `priority`)
    headings: Mapping[str, str] = field(default_factory=dict)  # piece -> heading, over several exports
    parts: Mapping[str, str] = field(default_factory=dict)  # a table's title -> the command it stands for
    served_from_cache: bool = False  # kept in the export's cache entry, served from it without pandas
    takes_top: bool = False  # the table takes `top` itself (else --top keeps the first N rows of each)
    one_without_pandas: Callable[..., Tables] | None = None  # (trace, source, **options): `one`, no pandas

    def deciding_of(self, title: str) -> tuple[str, ...]:
        """The deciding columns of this command's table titled `title`: a part that stands for another
        command (a summary's) keeps that command's."""
        part = DECLARED.get(self.parts.get(title, ""))
        return part.deciding if part is not None else self.deciding


def _kernels_without_pandas(trace: Trace, source: str, **options: Any) -> Tables:
    """`kernels` of one export as Rows (analysis.tables.kernels.kernel_table): a table not asked for
    before on a cached export imports pyarrow and numpy, not pandas (issue 24 §3)."""
    # imported here: it loads numpy, which a table served from the cache never needs
    from analysis.tables import kernels

    rows = kernels.kernel_table(trace, **options)
    return Tables([(kernels.title(source), rows)], notes=list(rows.attrs.get("notes", [])))


KERNEL_DECIDING = ("Name", "Total Time (ns)", "Time (%)", "Instances")
CALL_DECIDING = ("Name", "Total Time (ns)", "Time (%)", "Num Calls")
# kernexecsum: the latencies first (total, API, queue, kernel); the API name is nearly always cudaLaunchKernel
LAUNCH_DECIDING = ("Kernel Name", "TAvg (ns)", "AAvg (ns)", "QAvg (ns)", "KAvg (ns)", "Count", "QCount")
GPU_HEADINGS = {
    "ranges": "GPU time per NVTX range",
    "check": "Do the phases add up? (measured steps)",
    "kernels": "kernels per NVTX range",
    "projection": "NVTX ranges projected onto the GPU",
}
SUMMARY_TITLES = {
    "kernels": "CUDA kernels (gpukernsum)",
    "nvtx": "NVTX ranges (nvtxsum)",
    "api": "CUDA API (cudaapisum)",
    "memops": "GPU memory time (gpumemtimesum)",
    "memops_size": "GPU memory size (gpumemsizesum)",
    "launch": "Launch latency (kernexecsum)",
    "osrt": "OS runtime (osrtsum)",
}

KERNELS = Declared(
    "kernels", "CUDA kernels", "nsys stats -r gpukernsum; HTA get_gpu_kernel_breakdown",
    deciding=KERNEL_DECIDING, served_from_cache=True, one_without_pandas=_kernels_without_pandas,
)  # fmt: skip
NVTX = Declared(
    "nvtx", "NVTX ranges", "nsys stats -r nvtxsum (with --trace: nvtxpptrace)",
    deciding=("Range", "Total Time (ns)", "Time (%)", "Instances"),
)  # fmt: skip
NVTX_GPU = Declared(
    "nvtx-gpu", "GPU time per NVTX range", "nsys stats -r nvtxkernsum (--projection: nvtxgpuproj)",
    deciding=("Range", "Total Time (ns)"), headings=GPU_HEADINGS, served_from_cache=True, takes_top=True,
)  # fmt: skip
API = Declared("api", "CUDA API calls", "nsys stats -r cudaapisum", deciding=CALL_DECIDING)
MEMOPS = Declared(
    "memops", "", "nsys stats -r gpumemtimesum, gpumemsizesum",
    deciding=("Operation", "Total Time (ns)", "Total (MB)", "Count"),
    headings={"by time": "GPU memory operations by time", "by size": "by size (MB)"},
)  # fmt: skip
LAUNCH = Declared("launch", "kernel launch latency", "nsys stats -r kernexecsum", deciding=LAUNCH_DECIDING)
OSRT = Declared("osrt", "OS runtime calls", "nsys stats -r osrtsum", deciding=CALL_DECIDING)
OPERATORS = Declared(
    "operators", "framework operators", "torch.profiler key_averages().table()", deciding=("Name", "Calls")
)
SUMMARY = Declared(
    "summary", "", "the nsys stats reports above, in one run",
    parts={title: name for name, title in SUMMARY_TITLES.items()}, served_from_cache=True,
)  # fmt: skip

DECLARED: dict[str, Declared] = {
    d.name: d for d in (KERNELS, NVTX, NVTX_GPU, API, MEMOPS, LAUNCH, OSRT, OPERATORS, SUMMARY)
}
