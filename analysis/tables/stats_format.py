"""Which `nsys stats` format a table follows: nsys changed its reports' rows and names between releases, and
each table prints those of the nsys a user has (`chosen` resolves `auto`: HARNESS_STATS_FORMAT, else the nsys
in use, whose version the harness gives, else the nsys that wrote the export).

What changed, found by comparing every report of nsys 2022.4.2.1 (`../shared/fixtures/nsys/*/expected/`)
with those of 2023.4.4 (`tests/oracles/nsys-2023.4/`, same exports) cell by cell:

- from 2023.1, gpukernsum (now cuda_gpu_kern_sum) has one row per kernel name and no GridXYZ/BlockXYZ
  columns: the rows per launch shape moved to cuda_gpu_kern_gb_sum;
- from 2023.3, gpumemtimesum and gpumemsizesum (cuda_gpu_mem_time_sum, cuda_gpu_mem_size_sum) name copies
  `[CUDA memcpy Host-to-Device]`, `[CUDA memcpy Device-to-Device]`, … (2022.4: `HtoD`, `DtoD`).

Every other report's rows are equal in both (the reports were renamed: nvtxsum → nvtx_sum, cudaapisum →
cuda_api_sum, kernexecsum → cuda_kern_exec_sum, nvtxkernsum → nvtx_kern_sum, nvtxpptrace →
nvtx_pushpop_trace, nvtxgpuproj → nvtx_gpu_proj_trace, osrtsum → osrt_sum); 2023.4 prints NULL as an empty
field where 2022.4 printed `None`, which reads back the same. The release each change came with is NVIDIA's
(2023.1, 2023.3); the two releases compared here bracket both. Two differences are not followed: 2023.4's
nvtx_gpu_proj_trace adds a row for the GPU operations launched outside any range, with the PID and TID of
whichever operation SQLite's grouping met (a LEFT JOIN of its query), and its memory reports refuse exports
older than schema 3 (no ENUM_CUDA_MEMCPY_OPER table), which the tables here read as they read any other.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from analysis.errors import OptionsError
from analysis.tables.table import Option

# the formats a user names (`--stats-format`); a table takes any release, or EXPORT
FORMATS = ("2022.4", "2023.4")
AUTO = "auto"  # what a user names for the format of the nsys in use (`chosen`)
EXPORT = "export"  # the format of the nsys that wrote the export
NEWEST = FORMATS[-1]  # where nothing says which (a Kineto trace, an export without a producer version)
ENV = "HARNESS_STATS_FORMAT"  # the format a user keeps for every command
DEFAULT = "2022.4"  # the library's default: what the tables printed before formats were followed

KERNELS_BY_NAME_FROM = (2023, 1)
LONG_COPY_NAMES_FROM = (2023, 3)
RENAMED_FROM = (2023, 1)  # 2022.4 prints the old names, 2023.4 the new: taken with the kernel rows' change

# each report as 2022.4 names it -> as 2023.4 does (the file names of tests/oracles/nsys-2023.4/)
REPORT_NAMES = {
    "gpukernsum": "cuda_gpu_kern_sum", "nvtxsum": "nvtx_sum", "nvtxkernsum": "nvtx_kern_sum",
    "cudaapisum": "cuda_api_sum", "gpumemtimesum": "cuda_gpu_mem_time_sum",
    "gpumemsizesum": "cuda_gpu_mem_size_sum", "kernexecsum": "cuda_kern_exec_sum", "osrtsum": "osrt_sum",
    "nvtxpptrace": "nvtx_pushpop_trace", "nvtxgpuproj": "nvtx_gpu_proj_trace",
}  # fmt: skip

# the option of every table whose rows differ between formats
STATS_FORMAT = Option(
    "stats_format", "--stats-format",
    "Rows and names as `nsys stats` of this release prints them: 2022.4 (gpukernsum: a row per kernel and "
    "launch shape; [CUDA memcpy HtoD]) or 2023.4 (cuda_gpu_kern_sum: a row per kernel; [CUDA memcpy "
    "Host-to-Device]). auto: HARNESS_STATS_FORMAT, else the nsys in use, else the nsys that wrote the "
    "export.",
    str, AUTO, choices=(AUTO, *FORMATS),
)  # fmt: skip

# CUDA_MEMCPY_KIND (ENUM_CUDA_MEMCPY_OPER in exports): the name 2022.4 printed, the label 2023.3+ prints
COPY_KINDS = {
    0: ("Unknown", "Unknown"), 1: ("HtoD", "Host-to-Device"), 2: ("DtoH", "Device-to-Host"),
    3: ("HtoA", "Host-to-Array"), 4: ("AtoH", "Array-to-Host"), 5: ("AtoA", "Array-to-Array"),
    6: ("AtoD", "Array-to-Device"), 7: ("DtoA", "Device-to-Array"), 8: ("DtoD", "Device-to-Device"),
    9: ("HtoH", "Host-to-Host"), 10: ("PtoP", "Peer-to-Peer"), 11: ("Unified HtoD", "Unified Host-to-Device"),
    12: ("Unified DtoH", "Unified Device-to-Host"), 13: ("Unified DtoD", "Unified Device-to-Device"),
}  # fmt: skip


def release(version: str | None) -> tuple[int, int] | None:
    """(2023, 4) of "2023.4.4.54" (or of "2023.4"); None when it names no release."""
    found = re.match(r"\s*(\d{4})\.(\d+)", version or "")
    return (int(found[1]), int(found[2])) if found else None


def check(value: str) -> str:
    """`value` if it names a format (a release like 2023.4, or EXPORT), else ValueError."""
    if value == EXPORT or release(value) is not None:
        return value
    raise ValueError(f"not a stats format: {value!r} (one of {', '.join(FORMATS)}, or auto)")


def chosen(choice: str | None, nsys_version: str | Callable[[], str | None] | None) -> str:
    """The format to print: `choice` when it names one; for auto (or None), HARNESS_STATS_FORMAT, else the
    release of the nsys in use (`nsys_version`, or what it returns, asked only then: the harness runs nsys),
    else EXPORT (the nsys that wrote each export). OptionsError says where a value that names no format
    came from."""
    named = choice if choice and choice != AUTO else os.environ.get(ENV, AUTO) or AUTO
    if named != AUTO:
        try:
            return check(named)
        except ValueError as e:
            where = f"{ENV}={named}" if choice in (None, AUTO) else f"--stats-format {named}"
            raise OptionsError(f"{where}: {e}") from None
    found = release(nsys_version() if callable(nsys_version) else nsys_version)
    return f"{found[0]}.{found[1]}" if found else EXPORT


def resolve(value: str | None, producer: str | None = None) -> tuple[int, int]:
    """The release whose format to print: `value` (a release), or with EXPORT (or None) the release of the
    nsys that wrote the export (`producer`), or the newest format where that is unknown."""
    if value is None or value == EXPORT:
        return release(producer) or release(NEWEST)  # type: ignore[return-value]
    found = release(value)
    if found is None:
        raise ValueError(f"not a stats format: {value!r}")
    return found


def kernels_by_name(value: str | None, producer: str | None = None) -> bool:
    """Whether the kernel summary has one row per name (cuda_gpu_kern_sum) rather than one per name and
    launch shape (gpukernsum, with GridXYZ and BlockXYZ)."""
    return resolve(value, producer) >= KERNELS_BY_NAME_FROM


def copy_label(kind: int, value: str | None = DEFAULT, producer: str | None = None) -> str:
    """`[CUDA memcpy HtoD]` (2022.4) or `[CUDA memcpy Host-to-Device]` (2023.3 and later)."""
    names = COPY_KINDS.get(int(kind))
    if names is None:
        return f"[CUDA memcpy kind {kind}]"
    return f"[CUDA memcpy {names[names_copies_long(value, producer)]}]"


def long_copy_names() -> dict[str, str]:
    """Each copy name of 2022.4 (`[CUDA memcpy HtoD]`) -> the name 2023.3 and later print for it."""
    return {f"[CUDA memcpy {short}]": f"[CUDA memcpy {long}]" for short, long in COPY_KINDS.values()}


def names_copies_long(value: str | None, producer: str | None = None) -> bool:
    """Whether copies are named as 2023.3 and later name them in the format `value` resolves to."""
    return resolve(value, producer) >= LONG_COPY_NAMES_FROM


def report_name(report: str, value: str | None = DEFAULT, producer: str | None = None) -> str:
    """The name of `report` (as 2022.4 names it: gpukernsum) in the format `value` resolves to
    (cuda_gpu_kern_sum from 2023.1 on)."""
    return REPORT_NAMES.get(report, report) if resolve(value, producer) >= RENAMED_FROM else report


def producer(trace: Any) -> str | None:
    """The version of the nsys that wrote the trace's export; None for other traces (Kineto)."""
    return producer_of(getattr(trace, "meta", {}) or {})


def producer_of(meta: Mapping[str, Any]) -> str | None:
    """`producer` of a trace's metadata (what a worker sends back of the export it read)."""
    if meta.get("producer") != "Nsight Systems":
        return None
    return meta.get("producer_version")
