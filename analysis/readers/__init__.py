"""Readers: one per trace format, each filling the frames of `analysis.trace.frames.FRAMES` from its files.

What every reader shares lives here (readers import nothing else of the trace model).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import platform
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy is imported where it is used: a warm command served from the cache needs none
    import numpy as np

NULL = -9223372036854775807  # stands for a missing value in integer columns
# The readers' versions, here so that finding a cache entry imports no reader (analysis.trace.results; the
# Kineto reader imports pandas). Bump one when what its frames hold changes: cached frames are rebuilt.
NSYS_VERSION = "nsys-8"  # 8: the meta names the GPUs
KINETO_VERSION = "kineto-9"  # 9: the meta names the frames whose every event was unusable (left_out)
REPORT_SUFFIXES = (".nsys-rep", ".qdrep")  # nsys's reports: read through the SQLite export made of them
EXPORT_SUFFIXES = (".sqlite", ".json", ".json.gz")  # what a reader reads: an nsys export, a Kineto trace
# said of a report where its export is wanted (after its name)
A_REPORT = "is an nsys report, not an export: convert it with `nsys export --type sqlite`"
BOM = b"\xef\xbb\xbf"  # UTF-8's byte-order mark, which some editors put before JSON
# what to give a command in place of a file that is no trace (a memory snapshot or timeline)
GIVE_A_TRACE = (
    "give the trace torch.profiler wrote (export_chrome_trace or tensorboard_trace_handler: .json, .json.gz) "
    "or an Nsight Systems export (.sqlite)"
)
# CUPTI's enums, as both readers' frames hold them (Kineto spells them in memcpy/memset names: "Memcpy HtoD
# (Pageable -> Device)"; an nsys export keeps CUPTI's numbers)
COPY_KINDS = {"Unknown": 0, "HtoD": 1, "DtoH": 2, "HtoA": 3, "AtoH": 4, "AtoA": 5, "AtoD": 6, "DtoA": 7,
              "DtoD": 8, "HtoH": 9, "PtoP": 10}  # fmt: skip
MEMORY_KINDS = {"Unknown": 0, "Pageable": 1, "Pinned": 2, "Device": 3, "Array": 4, "Managed": 5,
                "Device Static": 6, "Managed Static": 7}  # fmt: skip


def valid_duration(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """end - start, NULL where either is NULL or the end comes before the start."""
    import numpy as np

    bad = (start == NULL) | (end == NULL) | (end < start)
    return np.where(bad, NULL, end - start)


_M_MMAP_THRESHOLD = -3  # glibc malloc.h


@functools.cache
def return_freed_buffers() -> None:
    """Have glibc serve allocations of 1 MiB and more with mmap, so big freed buffers leave the process:
    peak memory is then what is held at once, not all that was ever read.

    Without it glibc's self-raising mmap threshold and per-thread arenas keep freed column buffers resident
    (scan() parses chunks on worker threads; 1M kernels, `nvtx-gpu`: 430 MB peak, not 370 MB). The
    Parquet cache does the same for pyarrow's own pool (analysis.trace.cache).
    """
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).mallopt(_M_MMAP_THRESHOLD, 1 << 20)


def trim_heap() -> None:
    """Hand the heap's free pages back to the system (glibc's malloc_trim; elsewhere nothing). Buffers under
    the mmap threshold that were freed between ones still held leave pages the heap cannot shrink past: one
    table of `summary` at 1M kernels left ~35 MB resident for the next; the blocks of a Kineto column, freed
    once joined, lay between other columns' (at 2 GB of JSON: +200 MB while the frames were built)."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.malloc_trim  # noqa: B018 (glibc has it; musl does not)
    except (OSError, AttributeError):
        return None
    return libc
