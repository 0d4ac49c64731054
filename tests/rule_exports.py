"""Exports derived from the shared fixtures, each made to need one condition of an `nsys analyze` rule.

A case is a fixture, the SQL that changes a copy of it, and the rule specs to run on the copy. What
`nsys analyze -r SPEC -f csv` printed for each (Nsight Systems 2022.4.2.1 and 2023.4.4) is kept in
tests/oracles/analyze/VERSION/CASE/SPEC.csv, made by tests/make_rule_oracles.py from these same cases.
The condition each case holds is named in `holds` (docs/advice.md lists them, rule by rule).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from export_data import derive

A100 = "a100-saxpy-mpi"
DLPROF = "ext/dlprof_norelu"
LLAMA = "ext/llama3_realsim"
H100 = "h100-medium"
A100_TID = 302119224788637  # the only thread of the A100 fixture with CUDA calls (pid 1230493 = its tid)
A100_PID = A100_TID >> 24 << 24  # globalPid of its process
OTHER_PROCESS = 1 << 24  # added to a global id: the same thread id in the next process
RUNTIME, MEMCPY, MEMSET = (
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
)
KERNEL, OVERHEAD, NVTX = "CUPTI_ACTIVITY_KIND_KERNEL", "PROFILER_OVERHEAD", "NVTX_EVENTS"
FIRST_NEW_STRING = 5_000_000  # above every StringIds id of the fixtures


@dataclass(frozen=True)
class Case:
    name: str
    source: str  # folder under ../shared/fixtures/nsys
    sql: tuple[str, ...]
    specs: tuple[str, ...]
    holds: str
    versions: tuple[str, ...] = ("2022.4", "2023.4")  # the nsys versions whose output is kept


def build(case: Case, fixtures: Path, dst: Path) -> Path:
    return derive(fixtures / case.source / "report.sqlite", dst, *case.sql)


def oracle_name(spec: str) -> str:
    return spec.replace(":", "_").replace("/", "#") + ".csv"


# --- SQL helpers: each returns statements --------------------------------------------------------------

_strings: dict[str, int] = {}


def _string(value: str) -> int:
    return _strings.setdefault(value, FIRST_NEW_STRING + len(_strings))


def name_calls(where: str, value: str) -> tuple[str, ...]:
    """Give the calls `where` selects the name `value` (a new StringIds row)."""
    sid = _string(value)
    return (
        f"INSERT OR IGNORE INTO StringIds (id, value) VALUES ({sid}, '{value}')",
        f"UPDATE {RUNTIME} SET nameId = {sid} WHERE {where}",
    )


def calls_of(table: str, rowid: int) -> str:
    return f"correlationId = (SELECT correlationId FROM {table} WHERE rowid = {rowid})"


def copy_rows(table: str, where: str, *sets: str) -> tuple[str, ...]:
    """Insert copies of the rows `where` selects, changed by `sets` (SQL assignments)."""
    return (
        f"CREATE TEMP TABLE copied AS SELECT * FROM {table} WHERE {where}",
        *(f"UPDATE copied SET {s}" for s in sets),
        f"INSERT INTO {table} SELECT * FROM copied",
        "DROP TABLE copied",
    )


def set_rows(table: str, rowid: int, assignments: str) -> str:
    return f"UPDATE {table} SET {assignments} WHERE rowid = {rowid}"


def nth_calls(name: str, offset: int, count: int) -> str:
    """The calls named `name`, `count` of them from the `offset`-th, in table order."""
    return (
        f"rowid IN (SELECT r.rowid FROM {RUNTIME} r JOIN StringIds s ON s.id = r.nameId "
        f"WHERE s.value = '{name}' ORDER BY r.rowid LIMIT {count} OFFSET {offset})"
    )


def overhead(start: int, end: int, name: str, tid: int = A100_TID) -> tuple[str, ...]:
    sid = _string(name)
    return (
        f"INSERT OR IGNORE INTO StringIds (id, value) VALUES ({sid}, '{name}')",
        f"INSERT INTO {OVERHEAD} (start, end, globalTid, nameId, returnValue) VALUES ({start}, {end}, {tid}, "
        f"{sid}, 0)",
    )


def kernels_of_new_process(pid_offset: int, *spans: tuple[int, int]) -> tuple[str, ...]:
    """Kernels (copies of the first) of process pid + `pid_offset` at `spans` (start, end)."""
    out: list[str] = []
    for start, end in spans:
        out += copy_rows(
            KERNEL, "rowid = 1", f"globalPid = {A100_PID + pid_offset * OTHER_PROCESS}", f"start = {start}",
            f"end = {end}",
        )  # fmt: skip
    return tuple(out)


def nvtx_range(text: str, domain: int, start: int, end: int) -> tuple[str, ...]:
    """A push/pop range of the A100 fixture's thread (a copy of its first `saxpy`), in domain id `domain`."""
    first = f"rowid = (SELECT min(rowid) FROM {NVTX} WHERE text = 'saxpy')"
    return copy_rows(
        NVTX, first, f"text = '{text}'", f"domainId = {domain}", f"start = {start}", f"end = {end}"
    )


def shift_gpu_work(after: int, by: int) -> tuple[str, ...]:
    return tuple(
        f"UPDATE {t} SET start = start + {by}, end = end + {by} WHERE start >= {after}"
        for t in (KERNEL, MEMCPY)
    )


# The A100 fixture's GPU work (device 0): memcpy rows 1-15 (HtoD 1, 2, 4, 5, 7, 8, ...; DtoH 3, 6, 9, 12,
# 15), each made by two calls (cudaMemcpy and cudaMemcpy_v3020, one correlationId), kernels 1-5. Its gaps:
# copy 3 ends at 962,467,264, copy 4 starts at 1,158,713,065 (196 ms); copy 6 ends 1,233,536,281, copy 7
# starts 1,411,862,588 (178 ms); copy 9 ends 1,486,642,509, copy 10 starts 1,658,937,913; copy 12 ends
# 1,733,690,730, copy 13 starts 1,910,414,401. The span: 887,857,742 (copy 1) to 1,985,185,585 (copy 15).
GAP1_END, GAP2_START, GAP2_END = 1_158_713_065, 1_233_536_281, 1_411_862_588

CASES: list[Case] = [
    Case(
        "sync_api_names",
        A100,
        (
            *name_calls(nth_calls("cudaMalloc", 0, 3), "cudaDeviceSynchronize"),
            *name_calls(nth_calls("cudaMalloc", 3, 3), "cudaStreamSynchronize_v3020"),
            *name_calls(nth_calls("cudaMalloc", 6, 2), "CUDASTREAMSYNCHRONIZE"),
            *name_calls(nth_calls("cudaMalloc", 8, 2), "cudaEventSynchronize"),
            *name_calls(nth_calls("cudaMalloc", 10, 2), "cuStreamSynchronize"),
            *name_calls(nth_calls("cudaMalloc", 12, 2), "xcudaDeviceSynchronize"),
        ),
        ("cuda-sync-api", "cuda-sync-api:rows=4", "cuda-sync-api:start=886000000:end=1500000000"),
        "cuda-sync-api: names like cudaDeviceSynchronize% or cudaStreamSynchronize%, any case; start=, end=",
    ),
    Case(
        "memcpy_small_htod",
        A100,
        (
            set_rows(MEMCPY, 1, "bytes = 64000"),
            set_rows(MEMCPY, 2, "bytes = 64001"),
            set_rows(MEMCPY, 4, "bytes = 65000"),
            set_rows(MEMCPY, 3, "bytes = 1000"),
        ),
        ("cuda-sync-memcpy",),
        "cuda-sync-memcpy: host-to-device copies of 64,000 bytes or less left out (not 65,536; not DtoH)",
    ),
    Case(
        "memcpy_within_device",
        A100,
        (
            set_rows(MEMCPY, 1, "srcDeviceId = 0, dstDeviceId = 0"),
            set_rows(MEMCPY, 2, "srcDeviceId = 0, dstDeviceId = 1"),
            set_rows(MEMCPY, 3, "srcDeviceId = 1, dstDeviceId = 1"),
            set_rows(MEMCPY, 4, "srcDeviceId = 0, dstDeviceId = NULL"),
            set_rows(MEMCPY, 5, "srcDeviceId = NULL, dstDeviceId = 0"),
        ),
        ("cuda-sync-memcpy",),
        "cuda-sync-memcpy: copies within one device left out (srcDeviceId = dstDeviceId; NULL as SQL has it)",
    ),
    Case(
        "memcpy_any_kind",
        A100,
        (
            set_rows(MEMCPY, 1, "srcKind = 1"),
            set_rows(MEMCPY, 2, "srcKind = 2, dstKind = 2"),
            set_rows(MEMCPY, 4, "srcKind = NULL"),
            set_rows(MEMCPY, 5, "srcKind = 7"),
            set_rows(MEMCPY, 6, "start = 1233700000, end = 1253436303"),  # after its call returned
        ),
        ("cuda-sync-memcpy", "cuda-sync-memcpy:start=1233650000"),
        "cuda-sync-memcpy: any memory kind, whenever the GPU ran it; the calls are read whole (start=)",
    ),
    Case(
        "memcpy_names",
        A100,
        (
            *name_calls(calls_of(MEMCPY, 1), "cudaMemcpyAsync"),
            *name_calls(calls_of(MEMCPY, 2), "cuMemcpyHtoD_v2"),
            *name_calls(calls_of(MEMCPY, 3), "CUDAMEMCPY2D"),
            *name_calls(calls_of(MEMCPY, 4), "cudaMemcpyToSymbol"),
            *name_calls(calls_of(MEMCPY, 5), "cudaMemcpyasync_v3020"),
            *name_calls(calls_of(MEMCPY, 7), "cudaMemcpy2DAsync_v3020"),
            *name_calls(calls_of(MEMCPY, 8), "cuMemcpyHtoDAsync_v2"),
        ),
        ("cuda-sync-memcpy", "cuda-async-memcpy"),
        "names: cuda-sync-memcpy's like cudaMemcpy% and not like %Async%, cuda-async-memcpy's like "
        "cudaMemcpy%Async%",
    ),
    Case(
        "memcpy_other_process",
        A100,
        (
            *copy_rows(RUNTIME, calls_of(MEMCPY, 2), f"globalTid = globalTid + {OTHER_PROCESS}"),
            *copy_rows(
                RUNTIME,
                f"rowid = (SELECT min(rowid) FROM {RUNTIME} WHERE {calls_of(MEMCPY, 4)})",
                f"globalTid = globalTid + {OTHER_PROCESS}",
                "nameId = (SELECT id FROM StringIds WHERE value = 'cudaLaunchKernel')",
            ),
            f"UPDATE {RUNTIME} SET globalTid = globalTid + {2 * OTHER_PROCESS} WHERE {calls_of(MEMCPY, 7)}",
        ),
        ("cuda-sync-memcpy",),
        "every copy rule: a copy joins each call with its correlationId, in any process",
    ),
    Case(
        "memcpy_async_pageable",
        DLPROF,
        (
            set_rows(MEMCPY, 1, "srcKind = 1"),
            set_rows(MEMCPY, 2, "srcKind = 2, dstKind = 0"),
            set_rows(MEMCPY, 3, "srcKind = NULL"),
            set_rows(MEMCPY, 4, "srcKind = NULL, dstKind = 0"),
            set_rows(MEMCPY, 6, "srcKind = 4"),
            *copy_rows(RUNTIME, calls_of(MEMCPY, 5), f"globalTid = globalTid + {OTHER_PROCESS}"),
        ),
        ("cuda-async-memcpy",),
        "cuda-async-memcpy: from or to pageable memory (srcKind or dstKind 0; NULL as SQL has it)",
    ),
    Case(
        "memset_sync",
        DLPROF,
        (
            *name_calls(calls_of(MEMSET, 1), "cudaMemset_v3020"),
            set_rows(MEMSET, 1, "memKind = 1"),
            *name_calls(calls_of(MEMSET, 2), "cudaMemset_v3020"),
            set_rows(MEMSET, 2, "memKind = 4"),
            *name_calls(calls_of(MEMSET, 3), "CUDAMEMSET"),
            set_rows(MEMSET, 3, "memKind = 0"),
            *name_calls(calls_of(MEMSET, 4), "cudaMemset2DAsync"),
            set_rows(MEMSET, 4, "memKind = 1"),
            *copy_rows(RUNTIME, calls_of(MEMSET, 1), f"globalTid = globalTid + {OTHER_PROCESS}"),
        ),
        ("cuda-sync-memset",),
        "cuda-sync-memset: names like cudaMemset% and not like %async%; pinned or managed memory only",
    ),
    Case(
        "gpu_start_zero",
        A100,
        (set_rows(MEMCPY, 1, "start = 0, end = 1000"),),
        ("gpu-starv:gap=1", "gpu-low-util"),
        "gpu-starv, gpu-low-util: GPU work with a start of 0 is left out",
    ),
    Case(
        "gpu_overhead",
        A100,
        (
            *overhead(1_000_000_000, 1_010_000_000, "CUDA profiling data flush overhead"),
            *overhead(1_300_000_000, 1_310_000_000, "CUDA profiling stop overhead"),
            *overhead(1_500_000_000, 1_510_000_000, "CUDA profiling overhead"),
            *overhead(1_750_000_000, 1_760_000_000, "CUDA profiling data flush"),
            *overhead(1_800_000_000, 1_810_000_000, "CUDA profiling overhead", A100_TID + OTHER_PROCESS),
            *overhead(887_857_742, 892_857_742, "CUDA profiling overhead"),  # from the span's first ns
        ),
        ("gpu-starv:gap=1", "gpu-low-util:threshold=101"),
        "gpu-starv, gpu-low-util: nsys's CUDA flush overhead of the process, by exact name, strictly inside",
    ),
    Case(
        "gpu_gap_threshold",
        A100,
        (
            *shift_gpu_work(GAP1_END, 500_000_000 - (GAP1_END - 962_467_264)),
            *shift_gpu_work(
                GAP2_END + 500_000_000 - (GAP1_END - 962_467_264), 500_000_001 - (GAP2_END - GAP2_START)
            ),
        ),
        ("gpu-starv", "gpu-starv:gap=499"),
        "gpu-starv: gaps longer than gap= ms (500,000,000 ns is not)",
    ),
    Case(
        "gpu_overlap",
        A100,
        copy_rows(KERNEL, "rowid = 1", "start = 940000000", "end = 1100000000"),
        ("gpu-starv:gap=1",),
        "gpu-starv: the j-th end (sorted) with the next start (sorted), not each end with the next start",
    ),
    Case(
        "gpu_contexts",
        A100,
        (
            set_rows(KERNEL, 1, "contextId = 5"),
            set_rows(MEMCPY, 15, "contextId = 7"),
            set_rows(MEMCPY, 1, "contextId = 9"),
            set_rows(MEMCPY, 3, "contextId = 11"),
            set_rows(MEMCPY, 6, "contextId = 12"),
        ),
        ("gpu-starv:gap=1", "gpu-low-util", "cuda-sync-memcpy"),
        "Context ID: the copy's own; a gap's opening work's; a span's last-ending work's",
    ),
    Case(
        "gpu_devices",
        A100,
        (
            *copy_rows(KERNEL, "1", "deviceId = 1"),
            *copy_rows(MEMCPY, "1", "deviceId = 1"),
            *copy_rows(KERNEL, "deviceId = 0", "deviceId = 2"),
        ),
        ("gpu-low-util", "gpu-starv:gap=1"),
        "gpu-low-util (2022.4): chunks without work merge across devices, into the first device's place",
    ),
    Case(
        "gpu_processes",
        A100,
        copy_rows(KERNEL, "1", f"globalPid = globalPid - {OTHER_PROCESS}"),
        ("gpu-low-util", "gpu-starv:gap=1"),
        "gpu-low-util (2022.4): chunks without work merge across processes, into the first process's place",
    ),
    Case(
        "gpu_util_round",
        A100,
        (
            *kernels_of_new_process(1, (1_000_000, 1_000_100), (1_199_800, 1_200_000)),  # 0.15 %
            *kernels_of_new_process(2, (1_000_000, 1_000_200), (1_199_700, 1_200_000)),  # 0.25 %
        ),
        ("gpu-low-util:chunks=1",),
        "gpu-low-util: In-Use rounded as SQLite's round(x, 1): 0.15 (stored below) and 0.25 up",
    ),
    Case(
        "gpu_util_threshold",
        A100,
        kernels_of_new_process(1, (1_000_000, 1_000_100), (1_000_300, 1_000_400)),  # 50 % in each of 2 chunks
        ("gpu-low-util:chunks=2:threshold=50", "gpu-low-util:chunks=2:threshold=51"),
        "gpu-low-util: chunks below threshold= % (50 % is not below 50)",
    ),
    Case(
        "gpu_util_chunks",
        A100,
        (
            *kernels_of_new_process(1, (1_000_000, 1_000_334), (1_000_900, 1_001_000)),  # span 1000 ns
            *kernels_of_new_process(2, (2_000_000, 2_000_003), (2_000_008, 2_000_010)),  # span 10 ns
        ),
        ("gpu-low-util:chunks=3:threshold=101", "gpu-low-util:chunks=7:threshold=101"),
        "gpu-low-util: chunks of ceil(span / chunks) ns, the last cut at the span's end, none past it",
    ),
    Case(
        "nvtx_thread",
        LLAMA,
        (
            f"UPDATE {NVTX} SET globalTid = globalTid + 1 WHERE text = 'token_0_processing'",
            f"UPDATE {RUNTIME} SET globalTid = globalTid + 1 WHERE start BETWEEN 1398027144 AND 1550461240 "
            "AND rowid % 2 = 1",
        ),
        (
            "cuda-sync-api:nvtx=token_0_processing",
            "cuda-sync-api:nvtx=layer_processing_simulation",
            "gpu-starv:gap=1:nvtx=token_0_processing",
        ),
        "nvtx=: the range's thread in the calls (its process where tid = pid), its process in GPU work",
    ),
    Case(
        "nvtx_domains",
        A100,
        (
            *nvtx_range("copies", 1, 1_150_000_000, 1_240_000_000),  # in nsys's MPI domain
            *nvtx_range("copies", 0, 1_650_000_000, 1_740_000_000),
            *nvtx_range("copies", 0, 1_400_000_000, 1_500_000_000),  # the first by start, not by row
        ),
        (
            "cuda-sync-memcpy:nvtx=copies",
            "cuda-sync-memcpy:nvtx=copies@MPI",
            "gpu-starv:gap=0:nvtx=copies@MPI",
        ),
        "nvtx=TEXT[@DOMAIN]: the first such range by start, its domain by name (none: the default domain)",
    ),
    # the shared exports as they are, with options their expected/analyze/ oracles do not cover
    Case(
        "a100_options",
        A100,
        (),
        (
            "gpu-low-util:rows=2",
            "gpu-low-util:chunks=0",
            "gpu-starv:gap=1:start=1000000000:end=1500000000",
            "gpu-low-util:start=1000000000:end=1500000000",
            "cuda-sync-memcpy:start=1000000000:end=1500000000",
            "cuda-sync-memcpy:rows=0",
        ),
        "gpu-low-util: rows= keeps the first runs, then sorts; start=/end= keep what overlaps",
    ),
    Case(
        "llama3_options",
        LLAMA,
        (),
        (
            "gpu-starv:gap=1:rows=5",
            "cuda-sync-api:rows=-1",
            "gpu-low-util:nvtx=layer_5_token_0:chunks=5:threshold=101",
        ),
        "gpu-starv: rows= keeps the longest; rows=-1 keeps all",
    ),
    Case(
        "h100_medium",
        H100,
        (),
        (
            "cuda-async-memcpy",
            "cuda-sync-api",
            "cuda-sync-memcpy",
            "cuda-sync-memset",
            "gpu-low-util",
            "gpu-starv",
            "gpu-starv:gap=1",
        ),
        "every rule on the project's own H100 capture",
    ),
]

# --- nsys 2023.4's names for the same rules ------------------------------------------------------------

NEW_NAME = {
    "cuda-async-memcpy": "cuda_memcpy_async",
    "cuda-sync-api": "cuda_api_sync",
    "cuda-sync-memcpy": "cuda_memcpy_sync",
    "cuda-sync-memset": "cuda_memset_sync",
    "gpu-low-util": "gpu_time_util",
    "gpu-starv": "gpu_gaps",
}
SHARED = ("a100-saxpy-mpi", "ext/beast1", "ext/dlprof_norelu", "ext/fuser_report1", "ext/llama3_realsim",
          "ext/torchrun_2gpu", "ext/weatherbench2", "h100-medium")  # fmt: skip
# what schema 3.x exports hold and 2022.2 ones lack: the memory kinds' names, a green context per copy/set
SCHEMA_3 = (
    "CREATE TABLE ENUM_CUDA_MEM_KIND (id INTEGER PRIMARY KEY, name TEXT, label TEXT)",
    "INSERT INTO ENUM_CUDA_MEM_KIND VALUES (0, 'CUDA_MEMOPR_MEMORY_KIND_PAGEABLE', 'Pageable'), "
    "(1, 'CUDA_MEMOPR_MEMORY_KIND_PINNED', 'Pinned'), (2, 'CUDA_MEMOPR_MEMORY_KIND_DEVICE', 'Device'), "
    "(3, 'CUDA_MEMOPR_MEMORY_KIND_ARRAY', 'Array'), (4, 'CUDA_MEMOPR_MEMORY_KIND_MANAGED', 'Managed'), "
    "(5, 'CUDA_MEMOPR_MEMORY_KIND_DEVICE_STATIC', 'Device Static'), "
    "(6, 'CUDA_MEMOPR_MEMORY_KIND_MANAGED_STATIC', 'Managed Static'), "
    "(7, 'CUDA_MEMOPR_MEMORY_KIND_UNKNOWN', 'Unknown')",
    f"ALTER TABLE {MEMCPY} ADD COLUMN greenContextId INTEGER",
    f"UPDATE {MEMCPY} SET greenContextId = 0 WHERE rowid % 3 = 1",
    f"UPDATE {MEMCPY} SET greenContextId = 5 WHERE rowid % 3 = 2",
)


def renamed(spec: str) -> str:
    name, colon, options = spec.partition(":")
    return NEW_NAME[name] + colon + options


def in_2023(case: Case, *specs: str, sql: tuple[str, ...] = ()) -> Case:
    """The case for nsys 2023.4's names (its specs renamed, or `specs`), on an export with schema 3.x's
    tables where the fixture is older."""
    schema = SCHEMA_3 if case.source in (A100, DLPROF) else ()
    if case.name == "memset_sync":
        schema += (f"ALTER TABLE {MEMSET} ADD COLUMN greenContextId INTEGER",)
    return Case(
        f"{case.name}_2023", case.source, (*case.sql, *schema, *sql),
        specs or tuple(map(renamed, case.specs)), case.holds, versions=("2023.4",),
    )  # fmt: skip


_BY_NAME = {c.name: c for c in CASES}
CASES += [
    *(Case(f"new_names_{src.split('/')[-1]}", src, (), (*NEW_NAME.values(), "gpu_gaps:gap=1"),
           "2023.4's names: its output on every shared export", versions=("2023.4",)) for src in SHARED),
    *(in_2023(_BY_NAME[n]) for n in ("memcpy_small_htod", "memcpy_within_device", "memcpy_any_kind",
                                     "memcpy_names", "memcpy_other_process", "memcpy_async_pageable",
                                     "memset_sync", "gpu_contexts", "gpu_devices", "gpu_processes",
                                     "gpu_util_chunks", "gpu_util_round")),
    in_2023(_BY_NAME["nvtx_thread"], "cuda_api_sync:thread=2440842",
            "cuda_api_sync:process=2440841:end=1600000000", "cuda_api_sync:nvtx=token_0_processing",
            "gpu_gaps:gap=0:nvtx=layer_3_computation/2"),
    in_2023(_BY_NAME["nvtx_domains"], "cuda_memcpy_sync:nvtx=copies/1",
            "cuda_memcpy_sync:nvtx=copies@MPI/0", "gpu_gaps:gap=0:nvtx=copies@MPI"),
]  # fmt: skip
