"""The SQL of each column of the frames read from an nsys export: the table a frame comes from and the
expression of each of its columns (analysis.readers.nsys reads them)."""

from __future__ import annotations

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
OSRT = "OSRT_API"
OVERHEAD = "PROFILER_OVERHEAD"
DIAGNOSTIC = "DIAGNOSTIC_EVENT"

# Frame -> source table, and the SQL expression of each column. Grid and block dimensions are packed into
# one integer each (CUDA caps gridY/gridZ at 65535 and block dimensions at 1024 x 1024 x 64), so one value
# keys a launch shape.
TABLE = {"kernels": KERNEL, "runtime": RUNTIME, "memcpy": MEMCPY, "memset": MEMSET, "osrt": OSRT,
         "overhead": OVERHEAD}  # fmt: skip
# a time past ±TIME_LIMIT ns is none (analysis.trace.frames.MAX_TIME). A duration is NULL where the row
# cannot be right, INT64_MAX where a start or end lies past ±TIME_LIMIT (a table of durations then leaves out
# the rows a table of starts and ends does): one column read instead of two
TIME_LIMIT, INT64_MAX = 2**62, 2**63 - 1
DURATION = (
    f"CASE WHEN typeof(start) = 'integer' AND typeof(end) = 'integer' AND end >= start THEN (CASE WHEN "
    f"start >= {-TIME_LIMIT} AND end <= {TIME_LIMIT} THEN end - start ELSE {INT64_MAX} END) END"
)
# The same where neither time column has TEXT affinity (every nsys export), without the two typeof() calls
# a row (0.3 of the 1.7 s of SQLite's CPU in `harness kernels` of 1M kernels): SQLite orders NULL <
# numbers < text < blob, so text or a blob in either column fails one of the two comparisons; a REAL passes
# and makes the difference a REAL, whose text does not parse as an integer, so its chunk is read again with
# `typeof` checks (analysis.readers.nsys_sql.SqlExport.scan).
FAST_DURATION = (
    f"CASE WHEN start >= {-TIME_LIMIT} AND end BETWEEN start AND {TIME_LIMIT} THEN end - start "
    f"WHEN end BETWEEN start AND {INT64_MAX} THEN {INT64_MAX} END"
)
_TIMES = {"start": "start", "end": "end", "duration": DURATION}
_MEMOP = {
    **_TIMES,
    "bytes": "bytes",
    "stream_id": "streamId",
    "correlation_id": "correlationId",
    "global_pid": "globalPid",
    "device_id": "deviceId",
}
EXPRS: dict[str, dict[str, str]] = {
    "kernels": {
        **_TIMES,
        "correlation_id": "correlationId",
        "global_pid": "globalPid",
        "device_id": "deviceId",
        "stream_id": "streamId",
        "grid": "(gridX << 32) + (gridY << 16) + gridZ",
        "block": "(blockX << 22) + (blockY << 11) + blockZ",
        "name_id": "demangledName",
        "short_name_id": "shortName",
        "mangled_name_id": "coalesce(mangledName, demangledName)",
        "context_id": "contextId",
    },
    "runtime": {**_TIMES, "correlation_id": "correlationId", "global_tid": "globalTid", "name_id": "nameId"},
    "memcpy": {
        **_MEMOP,
        "copy_kind": "copyKind",
        "src_kind": "srcKind",
        "dst_kind": "dstKind",
        "context_id": "contextId",
        "src_device": "srcDeviceId",
        "dst_device": "dstDeviceId",
        "green_context_id": "greenContextId",
    },
    "memset": {
        **_MEMOP,
        "mem_kind": "memKind",
        "context_id": "contextId",
        "green_context_id": "greenContextId",
    },
    "osrt": {**_TIMES, "global_tid": "globalTid", "name_id": "nameId"},
    "overhead": {**_TIMES, "global_tid": "globalTid", "name_id": "nameId"},
}
