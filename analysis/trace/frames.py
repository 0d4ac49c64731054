"""The frames a trace holds and their columns, and which of their rows cannot be right.

Frames and their columns (times in ns on the source's clock, ids as int64, NULL as the `NULL` sentinel):

- kernels: start, end, duration, correlation_id, global_pid, device_id, stream_id, grid, block (launch
  dimensions packed, see analysis.tables.kernels), name_id, short_name_id, mangled_name_id, context_id
- runtime (CUDA runtime and driver calls): start, end, duration, correlation_id, global_tid, name_id
- memcpy: start, end, duration, copy_kind, bytes, stream_id, correlation_id, global_pid, device_id, src_kind,
  dst_kind (CUPTI's copy and memory kinds: copy_kind 1 is HtoD, memory kind 1 pageable, 3 device),
  context_id, src_device, dst_device (the devices a copy reads and writes; NULL where not recorded),
  green_context_id (NULL before schema 3.x)
- memset: start, end, duration, bytes, stream_id, correlation_id, global_pid, device_id, mem_kind, context_id,
  green_context_id
- osrt (OS runtime calls): start, end, duration, global_tid, name_id

`duration` is end - start, NULL where the row cannot be right, 2**63-1 where its start or end lies past ±2**62
ns: a table that needs only durations reads one column, not two, and leaves out the rows the start and end
would.
- nvtx (ranges): range_id, start, end, global_tid, pushpop (bool), payload (Int64), name, domain
- syncs (CUDA synchronization as the GPU records it: stream waits, stream/context/event syncs): start, end,
  stream_id, correlation_id, global_pid, device_id, name_id
- cpu_ops (framework operators, e.g. PyTorch's aten:: ops): start, end, global_tid, name_id, external_id,
  shapes_id (the operator's input sizes with record_shapes, "" without)
- threads: global_tid, name
- strings: id, value (what the *name_id columns point at)
- overhead (nsys's own time, PROFILER_OVERHEAD): start, end, duration, global_tid, name_id
- diagnostics (nsys's messages, DIAGNOSTIC_EVENT): timestamp, global_pid, severity, source, text
- contexts (the CUDA contexts GPU work ran in): global_pid, device_id, context_id

A reader fills the frames its format has; the others are empty (nsys exports: no syncs, no cpu_ops;
Kineto traces: no overhead, diagnostics or contexts).

global_tid / global_pid follow nsys: the process id in bits 24-47, the thread id in bits 0-23.
Rows that cannot be right (no start or end, end before start, a name id with no string) are left out
when a frame is handed out, and `notes` says how many.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from analysis.readers import NULL

if TYPE_CHECKING:
    import pandas as pd

FRAMES: dict[str, tuple[str, ...]] = {
    "kernels": ("start", "end", "duration", "correlation_id", "global_pid", "device_id", "stream_id", "grid",
                "block",
                "name_id", "short_name_id", "mangled_name_id", "context_id"),
    "runtime": ("start", "end", "duration", "correlation_id", "global_tid", "name_id"),
    "memcpy": ("start", "end", "duration", "copy_kind", "bytes", "stream_id", "correlation_id", "global_pid",
               "device_id", "src_kind", "dst_kind", "context_id", "src_device", "dst_device",
               "green_context_id"),
    "memset": ("start", "end", "duration", "bytes", "stream_id", "correlation_id", "global_pid", "device_id",
               "mem_kind", "context_id", "green_context_id"),
    "osrt": ("start", "end", "duration", "global_tid", "name_id"),
    "nvtx": ("range_id", "start", "end", "global_tid", "pushpop", "payload", "name", "domain"),
    "syncs": ("start", "end", "stream_id", "correlation_id", "global_pid", "device_id", "name_id"),
    "cpu_ops": ("start", "end", "global_tid", "name_id", "external_id", "shapes_id"),
    "threads": ("global_tid", "name"),
    "strings": ("id", "value"),
    "overhead": ("start", "end", "duration", "global_tid", "name_id"),
    "diagnostics": ("timestamp", "global_pid", "severity", "source", "text"),
    "contexts": ("global_pid", "device_id", "context_id"),
}  # fmt: skip
WHOLE = frozenset({"threads", "strings", "diagnostics", "contexts"})  # read in one piece
TYPED = frozenset({"nvtx", "threads", "strings", "diagnostics", "contexts"})  # the reader types them
TIMED = frozenset({"kernels", "runtime", "memcpy", "memset", "osrt", "nvtx", "syncs", "cpu_ops", "overhead"})
GPU_WORK = ("kernels", "memcpy", "memset")  # the frames of work a GPU does: kernels, copies, sets
NAMES_OF = {"kernels": "kernels", "runtime": "CUDA API calls", "memcpy": "memory copies",
            "memset": "memory sets", "osrt": "OS runtime calls", "nvtx": "NVTX ranges",
            "syncs": "CUDA synchronization events", "cpu_ops": "CPU operators",
            "overhead": "profiler overhead events"}  # fmt: skip
MAX_TIME = 2**62  # ns; a start or end past ±this is left out
BLOCK_ROWS = 1 << 18  # rows per block of `Trace.blocks`
# the kernels' name column of each name style (mangled falls back to demangled where none was recorded)
NAME_COLUMN = {"demangled": "name_id", "base": "short_name_id", "mangled": "mangled_name_id"}


def _wrong_and_wild(check: list[str], data: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(the rows that cannot be right, the rows with a time past ±2**62 ns) by `check`'s columns: past it
    (146 years) no time is right, and end - start would wrap round int64."""
    if check == ["duration"]:
        duration = np.asarray(data["duration"])
        wrong = duration == NULL
        return wrong, ~wrong & (duration > MAX_TIME)  # its start or end past ±2**61 at least
    start, end = np.asarray(data["start"]), np.asarray(data["end"])
    wrong = (start == NULL) | (end == NULL) | (end < start)
    return wrong, ~wrong & ((start < -MAX_TIME) | (end > MAX_TIME))


def _left_out(frame: str, check: list[str], n: int, wild: int, bad: int) -> list[str]:
    """The notes on the rows `_wrong_and_wild` left out of `n`."""
    notes = []
    if wild:
        what = "a duration past 2**62" if check == ["duration"] else "a start or end past ±2**62"
        notes.append(f"left out {wild:,} of {n:,} {NAMES_OF[frame]} with {what} ns (146 years): not a time")
    if bad:
        notes.append(
            f"left out {bad:,} of {n:,} {NAMES_OF[frame]} that cannot be right "
            "(no start or end, or an end before the start)"
        )
    return notes


def rows_of(values: Any, lo: int, hi: int) -> Any:
    """Rows lo..hi of a column held in memory: a numpy array, or a pandas column's own array where its
    type is pandas' (names as a Categorical, nvtx's payload as an IntegerArray: numpy would make the one
    objects and the other floats)."""
    part = values[lo:hi]
    if isinstance(part, np.ndarray) or isinstance(part.dtype, np.dtype):
        return np.asarray(part)
    return part.array


def empty_frame(columns: Sequence[str]) -> pd.DataFrame:
    """A frame with no rows and these (integer) columns."""
    import pandas as pd

    return pd.DataFrame({c: np.empty(0, dtype=np.int64) for c in columns})
