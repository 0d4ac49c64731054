"""The six CUDA rules of Nsight Systems' expert system (`nsys analyze -r RULE`), as tables of a Trace.

Each rule gives the columns, headers and rows, in the same order, that `nsys analyze -r RULE -f csv`
prints: under the names of Nsight Systems 2022.4 (cuda-sync-memcpy, ...), what 2022.4 prints; under the
names 2023.4 introduced (cuda_memcpy_sync, ...), what 2023.4 prints. The conditions are those of the
rule's own definition, which ships with nsys (`target-linux-x64/rules/RULE.py`: an SQL query over the
export), each held by a test on an export derived to need it, against what nsys printed for that export
(tests/test_nsys_rules.py; docs/advice.md lists them):

- cuda-sync-api: calls named like `cudaDeviceSynchronize%` or `cudaStreamSynchronize%`, longest first.
- cuda-sync-memcpy: copies launched by a call named like `cudaMemcpy%` and not like `%Async%`, except
  host-to-device copies of 64,000 bytes or less and copies within one device; any memory kind.
- cuda-async-memcpy: copies launched by a call named like `cudaMemcpy%Async%` from or to pageable memory.
- cuda-sync-memset: memsets of pinned or managed memory launched by a call named like `cudaMemset%` and
  not like `%async%`.
- gpu-starv, gpu-low-util: analysis.advice.nsys_gpu_rules.

What nsys does that these keep: names match as SQL's LIKE does (ASCII case-insensitive; the recorded name,
so an export that records every runtime call twice, `cudaMemcpy` and `cudaMemcpy_v3020`, lists each copy
twice); a copy or memset joins its launching call by correlationId alone, in whatever process (ids repeat
across the processes of one export: a copy then shows once per call that shares its id and passes the name
test); SQL's NULL logic in every condition; the start=, end= and nvtx= options of every rule; a rule is
skipped, not empty, when the export lacks a table it reads (an empty table is read). 2023.4 also: a Green
Context ID column, a skip where the export has no ENUM_CUDA_MEM_KIND table or greenContextId column, ties
in the order of the calls, a NULL memory kind printed empty, cuda_api_sync's process= and thread=.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis.advice.nsys_gpu_rules import gpu_gaps, gpu_low_util
from analysis.advice.nsys_query import DEFAULT_ROWS, Query, Skipped, like, window
from analysis.errors import WHOLE, ExportError, OptionsError
from analysis.readers import NULL
from analysis.readers.global_ids import pid_of, tid_of
from analysis.readers.kineto import FORMAT as KINETO
from analysis.readers.nsys_columns import MEMCPY, MEMSET
from analysis.trace.frames import GPU_WORK
from analysis.trace.trace import Trace

HTOD = 1  # CUPTI's copy kind host-to-device
SMALL_HTOD_BYTES = 64_000  # cuda-sync-memcpy leaves out host-to-device copies of this size or less
# nsys's memory kinds (MemKindStrs, 0-7) by the trace model's numbering (nsys's + 1, 0 for 7 and beyond)
KIND_NAME = {
    1: "Pageable",
    2: "Pinned",
    3: "Device",
    4: "Array",
    5: "Managed",
    6: "Device Static",
    7: "Managed Static",
    0: "Unknown",
}
PAGEABLE, PINNED, MANAGED = 1, 2, 5
NULL_KIND = {"2022.4": "None", "2023.4": ""}  # how each nsys prints a memory kind that is NULL
# the order nsys's SQLite finds a copy and its calls in: it orders the rows of equal duration
PAIR_ORDER = {"2022.4": ["op", "name_id", "call"], "2023.4": ["call", "op"]}
MEMOP_HEADERS = [
    "Duration (ns)",
    "Start (ns)",
    "Src Kind",
    "Dst Kind",
    "Bytes (MB)",
    "PID",
    "Device ID",
    "Context ID",
    "Stream ID",
    "API Name",
]
MEMSET_HEADERS = [h for h in MEMOP_HEADERS if h not in ("Src Kind", "Dst Kind")]
MEMSET_HEADERS.insert(2, "Memory Kind")
SYNC_HEADERS = ["Duration (ns)", "Start (ns)", "PID", "TID", "API Name"]


def _matches(*patterns: str, unless: str | None = None) -> Callable[[str], bool]:
    wanted, unwanted = [like(p) for p in patterns], like(unless) if unless else None
    return lambda s: any(p.fullmatch(s) for p in wanted) and not (unwanted and unwanted.fullmatch(s))


SYNC_API_NAME = _matches("cudaDeviceSynchronize%", "cudaStreamSynchronize%")
SYNC_MEMCPY_NAME = _matches("cudaMemcpy%", unless="%Async%")
ASYNC_MEMCPY_NAME = _matches("cudaMemcpy%Async%")
SYNC_MEMSET_NAME = _matches("cudaMemset%", unless="%async%")


# --- the calls rules -----------------------------------------------------------------------------------


def _names(trace: Trace, ids: pd.Series, keep: Callable[[str], bool]) -> dict[int, str]:
    return {i: s for i, s in trace.strings(ids.unique()).items() if keep(s)}


def _longest_first(q: Query, df: pd.DataFrame) -> pd.DataFrame:
    """ORDER BY duration DESC LIMIT rows; ties keep the order nsys 2022.4 scans them in (the table's)."""
    return q.limit(df.sort_values("Duration (ns)", ascending=False, kind="stable"))


def _ids(values: pd.Series) -> pd.Series:
    """An id column as nsys prints it: NULL as an empty field (a NULL text prints `None`)."""
    return values.astype(object).where(values != NULL, "") if (values == NULL).any() else values


def _mb(nbytes: pd.Series) -> pd.Series:
    """Bytes as nsys prints MB: three decimals (text, so csv keeps them as printed)."""
    return nbytes.map(lambda b: "" if b == NULL else f"{b / 1e6:.3f}")


def sync_api(q: Query) -> pd.DataFrame:
    """cuda-sync-api: calls that block the host until the device (or a stream) is done."""
    calls = q.frame("runtime", ["name_id"], "global_tid")
    names = _names(q.trace, calls["name_id"], SYNC_API_NAME)
    calls = calls[calls["name_id"].isin(list(names))]
    out = pd.DataFrame(
        {
            "Duration (ns)": calls["end"] - calls["start"],
            "Start (ns)": calls["start"],
            "PID": pid_of(calls["global_tid"]),
            "TID": tid_of(calls["global_tid"]),
            "API Name": calls["name_id"].map(names),
        }
    )
    return _longest_first(q, out)


def every_call(q: Query) -> pd.DataFrame:
    """The calls a copy or memset joins: all of them, whatever start=, end= or nvtx= (nsys reads them as
    `main.CUPTI_ACTIVITY_KIND_RUNTIME`, the table its time filter does not cut)."""
    return q.trace.frame("runtime", ["correlation_id", "global_tid", "name_id"])


def same_call(ops: pd.DataFrame, calls: pd.DataFrame, nsys: str) -> pd.DataFrame:
    """Each row of `ops` with each call that has its correlationId, in any process (nsys's join), in the
    order nsys's SQLite finds the pairs (which orders the rows of equal duration): nsys 2022.4 reads the
    rows and looks their calls up in an index on correlationId and nameId (by row, then name id, then
    call); 2023.4 reads the calls and looks their rows up (by call, then row)."""
    joined = ops.merge(calls, on="correlation_id", how="inner")
    return joined.sort_values(PAIR_ORDER[nsys], kind="stable")


def _launched(q: Query, frame: str, columns: list[str], name_ok: Callable[[str], bool]) -> pd.DataFrame:
    """Rows of `frame` (in the window) joined with the calls that launched them whose names pass: one
    row per pair; `api` (the call's name) and `call_pid` added."""
    common = [
        "correlation_id",
        "global_pid",
        "device_id",
        "context_id",
        "green_context_id",
        "stream_id",
        "bytes",
    ]
    ops = q.frame(frame, [*common, *columns], "global_pid")
    calls = every_call(q)
    names = _names(q.trace, calls["name_id"], name_ok)
    calls = calls[calls["name_id"].isin(list(names)) & (calls["correlation_id"] != NULL)]
    calls = pd.DataFrame(
        {
            "correlation_id": calls["correlation_id"],
            "name_id": calls["name_id"],
            "api": calls["name_id"].map(names),
            "call_pid": pid_of(calls["global_tid"]),
            "call": np.arange(len(calls)),
        }
    )
    return same_call(ops.assign(op=np.arange(len(ops))), calls, q.nsys)


def _memop_table(q: Query, joined: pd.DataFrame, kinds: dict[str, str], headers: list[str]) -> pd.DataFrame:
    """The rows as nsys prints them; 2023.4's new names add a Green Context ID (NULL where 0)."""
    out = {"Duration (ns)": joined["end"] - joined["start"], "Start (ns)": joined["start"]}
    none = NULL_KIND[q.nsys]
    for header, col in kinds.items():
        out[header] = joined[col].map(lambda k: none if k == NULL else KIND_NAME.get(int(k), KIND_NAME[0]))
    out |= {
        "Bytes (MB)": _mb(joined["bytes"]),
        "PID": pid_of(joined["global_pid"]),
        "Device ID": _ids(joined["device_id"]),
        "Context ID": _ids(joined["context_id"]),
        "Green Context ID": _ids(green_context(joined["green_context_id"])),
        "Stream ID": _ids(joined["stream_id"]),
        "API Name": joined["api"],
    }
    if q.nsys != "2022.4":
        at = headers.index("Stream ID")
        headers = [*headers[:at], "Green Context ID", *headers[at:]]
    return pd.DataFrame(out)[headers]


def green_context(ids: pd.Series) -> pd.Series:
    """NULLIF(greenContextId, 0): 0 is no green context."""
    return ids.where(ids != 0, NULL)


def not_small_htod(ops: pd.DataFrame) -> np.ndarray:
    """NOT (bytes <= 64000 AND copyKind == 1), NULL read as SQL does (unknown: the row is left out)."""
    b, k = ops["bytes"].to_numpy(), ops["copy_kind"].to_numpy()
    return ((b != NULL) & (b > SMALL_HTOD_BYTES)) | ((k != NULL) & (k != HTOD))


def not_within_device(ops: pd.DataFrame) -> np.ndarray:
    """NOT (srcDeviceId IS NOT NULL AND srcDeviceId == dstDeviceId)."""
    src, dst = ops["src_device"].to_numpy(), ops["dst_device"].to_numpy()
    return (src == NULL) | ((dst != NULL) & (src != dst))


def touches_pageable(ops: pd.DataFrame) -> np.ndarray:
    """srcKind == 0 OR dstKind == 0 (pageable host memory)."""
    return (ops["src_kind"].to_numpy() == PAGEABLE) | (ops["dst_kind"].to_numpy() == PAGEABLE)


def pinned_or_managed(ops: pd.DataFrame) -> np.ndarray:
    """memKind == 1 OR memKind == 4."""
    return np.isin(ops["mem_kind"].to_numpy(), [PINNED, MANAGED])


COPY_COLUMNS = ["copy_kind", "src_kind", "dst_kind", "src_device", "dst_device"]
COPY_KINDS = {"Src Kind": "src_kind", "Dst Kind": "dst_kind"}


def sync_memcpy(q: Query) -> pd.DataFrame:
    """cuda-sync-memcpy: copies by synchronous calls, except small host-to-device ones and those within
    one device."""
    joined = _launched(q, "memcpy", COPY_COLUMNS, SYNC_MEMCPY_NAME)
    joined = joined[not_small_htod(joined) & not_within_device(joined)]
    return _longest_first(q, _memop_table(q, joined, COPY_KINDS, MEMOP_HEADERS))


def async_memcpy(q: Query) -> pd.DataFrame:
    """cuda-async-memcpy: async copies from or to pageable host memory (they run synchronously)."""
    joined = _launched(q, "memcpy", COPY_COLUMNS, ASYNC_MEMCPY_NAME)
    joined = joined[touches_pageable(joined)]
    return _longest_first(q, _memop_table(q, joined, COPY_KINDS, MEMOP_HEADERS))


def sync_memset(q: Query) -> pd.DataFrame:
    """cuda-sync-memset: memsets of pinned host or managed memory by synchronous calls."""
    joined = _launched(q, "memset", ["mem_kind"], SYNC_MEMSET_NAME)
    joined = joined[pinned_or_managed(joined)]
    return _longest_first(q, _memop_table(q, joined, {"Memory Kind": "mem_kind"}, MEMSET_HEADERS))


# --- the registry and nsys's option syntax --------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    """One rule: its name, what it finds, the tables it needs (all of `needs`, any of `needs_any`), its
    own options and their defaults, and whose output it gives: nsys 2022.4's (the names 2022.4 knows) or
    2023.4's (the names 2023.4 introduced; it still runs the old ones, hidden, as deprecated)."""

    name: str
    title: str
    run: Callable[..., pd.DataFrame]
    needs: tuple[str, ...] = ()
    needs_any: tuple[str, ...] = ()
    options: dict[str, int] = field(default_factory=dict)
    nsys: str = "2022.4"
    memory_kinds: bool = False  # reads memory kinds: 2023.4 from the export's ENUM_CUDA_MEM_KIND


CALLS, COPIES, SETS = ("runtime",), ("runtime", "memcpy"), ("runtime", "memset")
UTIL, GAP = {"threshold": 50, "chunks": 30}, {"gap": 500}
# (2022.4 name, 2023.4 name, title (2022.4's, then 2023.4's where it changed), function, tables, options)
NAMES = (
    ("cuda-async-memcpy", "cuda_memcpy_async", ("CUDA Async Memcpy with Pageable Memory",), async_memcpy,
     COPIES, {}),
    ("cuda-sync-api", "cuda_api_sync", ("CUDA Synchronization APIs",), sync_api, CALLS, {}),
    ("cuda-sync-memcpy", "cuda_memcpy_sync", ("CUDA Synchronous Memcpy",), sync_memcpy, COPIES, {}),
    ("cuda-sync-memset", "cuda_memset_sync", ("CUDA Synchronous Memset",), sync_memset, SETS, {}),
    ("gpu-low-util", "gpu_time_util", ("GPU Low Utilization", "GPU Time Utilization"), gpu_low_util, (),
     UTIL),
    ("gpu-starv", "gpu_gaps", ("GPU Starvation", "GPU Gaps"), gpu_gaps, (), GAP),
)  # fmt: skip


def _rules() -> list[Rule]:
    rules = []
    for old, new, titles, run, needs, options in NAMES:
        kw = {
            "needs": needs,
            "memory_kinds": needs not in ((), CALLS),
            "needs_any": () if needs else GPU_WORK,
        }
        rules.append(Rule(old, titles[0], run, options=options, **kw))  # type: ignore[arg-type]
        ids = {"process": -1, "thread": -1} if needs == CALLS else {}  # 2023.4's cuda_api_sync has them
        rules.append(Rule(new, titles[-1], run, options=options | ids, nsys="2023.4", **kw))  # type: ignore[arg-type]
    return rules


RULES: dict[str, Rule] = {r.name: r for r in sorted(_rules(), key=lambda r: (r.nsys, r.name))}
COMMON_OPTIONS: dict[str, int | str | None] = {"rows": DEFAULT_ROWS, "start": None, "end": None, "nvtx": None}


def parse_rule(spec: str) -> tuple[Rule, dict[str, int | str | None]]:
    """`NAME[:option=value[:option=value]]`, as nsys takes it, -> (rule, options with defaults); OptionsError
    (a usage error, exit 2) naming what is wrong."""
    name, *opts = spec.split(":")
    if name not in RULES:
        raise OptionsError(f"unknown rule {name!r}: one of {', '.join(RULES)}")
    rule = RULES[name]
    options: dict[str, int | str | None] = {**COMMON_OPTIONS, **rule.options}
    for opt in opts:
        key, eq, value = opt.partition("=")
        if key not in options:
            raise OptionsError(f"rule {name} has no option {key!r}: options {', '.join(options)}")
        if not eq:
            raise OptionsError(f"rule {name}: option {key} takes a value ({key}=VALUE)")
        if key == "nvtx":
            options[key] = value
            continue
        if not WHOLE.fullmatch(value.strip()):  # int() takes any script's digits ('٣') and '1_0'
            raise OptionsError(f"rule {name}: option {key} takes an integer, not {value!r}")
        options[key] = int(value)
    chunks = options.get("chunks")
    if isinstance(chunks, int) and chunks and not 1 <= chunks <= 1000:  # 0 passes nsys's test: no rows
        raise OptionsError(f"rule {name}: chunks must be between 1 and 1000, not {chunks}")
    return rule, options


def _lacking(trace: Trace, rule: Rule) -> list[str]:
    """What the export lacks that nsys needs to run `rule`: tables, in the order nsys checks them."""
    exists = trace.meta.get("exists", {})
    facts = trace.meta.get("schema_facts") or trace.reader.schema_facts()  # a cache entry made before it
    lacking = []
    if rule.nsys != "2022.4" and rule.needs and not facts.get("StringIds", True):  # the calls rules
        lacking.append("StringIds table")
    lacking += [f for f in rule.needs if not exists.get(f, trace.has(f))]
    if rule.needs_any and not any(exists.get(f, trace.has(f)) for f in rule.needs_any):
        lacking.append("kernels, memory copies or memsets")
    if rule.nsys != "2022.4" and rule.memory_kinds and not lacking:
        if not facts.get("ENUM_CUDA_MEM_KIND", True):
            lacking.append("ENUM_CUDA_MEM_KIND table (exports of nsys 2022.2 and older)")
        table = MEMSET if "memset" in rule.needs else MEMCPY
        if not lacking and not facts.get(f"{table}.greenContextId", True):
            lacking.append(f"greenContextId column in {table} (export it again with a newer nsys)")
    return lacking


def run_rule(trace: Trace, spec: str) -> pd.DataFrame:
    """The table `nsys analyze -r SPEC` prints for `trace`, or Skipped saying what the export lacks. A trace
    that is no nsys export (a Kineto trace) is an ExportError: nsys cannot run the rule that was asked for
    on it at all, where it skips a rule whose tables an export lacks."""
    rule, options = parse_rule(spec)
    if trace.format != "nsys-sqlite":
        what = (
            "a torch.profiler (Kineto) trace"
            if trace.format == KINETO
            else f"no nsys export ({trace.format})"
        )
        raise ExportError(
            f"--rule {rule.name}: nsys's rules read nsys exports (.sqlite, .nsys-rep) and {trace.path} is "
            f"{what}: without --rule, advise gives its findings"
        )
    if lacking := _lacking(trace, rule):
        raise Skipped(f"{rule.name} skipped: {trace.path} has no {' or '.join(lacking)} (nsys skips it too)")
    start, end, nvtx = options.pop("start"), options.pop("end"), options.pop("nvtx")
    rows, process, thread = options.pop("rows"), options.pop("process", None), options.pop("thread", None)
    assert isinstance(rows, int)
    win = window(trace, start, end, nvtx, process=process, thread=thread, nsys=rule.nsys)  # type: ignore[arg-type]
    out = rule.run(Query(trace, rows, win, rule.nsys), **options)
    out.attrs["title"] = rule.title
    return out
