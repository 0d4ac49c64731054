"""CUDA runtime calls, each once, and kernels joined to the call that launched them.

Some exports (the A100 fixture, nsys 2022.2) record every runtime call twice under one correlationId, once
under the plain name and once under a versioned one (`cudaMemcpy` and `cudaMemcpy_v3020`). `nsys stats`
counts both; here each (thread, correlationId) keeps one call, the plain-named one, and a note says so.

A correlationId is unique within a process, not within an export: in a capture of several processes (one
nsys around torchrun) two processes reuse the same ids. Calls count as recorded twice only on one thread,
and every join of GPU work to its launching call is keyed by (process, correlationId).

Like nsys, a name is versioned only when it ends in `_v` and four more characters: `cudaMemcpy_v3020` is
cudaMemcpy, while `cuMemAlloc_v2` and `cudaStreamIsCapturing_v10000` are names of their own.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.readers.global_ids import ID_BITS, PROCESS_MASK, pid_of
from analysis.stats import Repeats, distinct, factorize, member, membership
from analysis.trace.frames import NAME_COLUMN
from analysis.trace.trace import NULL, Trace

# the calls that replay a CUDA graph: a replay's kernels carry the launch's correlationId (nsys traces them
# per node with --cuda-graph-trace=node; whole, the default, leaves none)
GRAPH_LAUNCHES = ("cudaGraphLaunch", "cuGraphLaunch")


def plain_name(name: str) -> str:
    """The name nsys prints for a runtime function: `_vNNNN` (four characters) stripped."""
    return name[:-6] if len(name) > 6 and name[-6:-4] == "_v" else name


def replayed(kernels: pd.DataFrame) -> np.ndarray:
    """Which of `kernel_launches`' kernels a CUDA graph replay ran: launched by a GRAPH_LAUNCHES call."""
    names = kernels.attrs.get("api_names", {})
    graph = [i for i, n in names.items() if n.startswith(GRAPH_LAUNCHES)]
    return kernels["has_call"].to_numpy() & np.isin(kernels["api_id"].to_numpy(), graph)


def kernel_rows(
    trace: Trace, fields: tuple[str, ...], names: str = "demangled", *, keep: bool = True
) -> pd.DataFrame:
    """Kernels with `fields` (trace kernel columns, plus "duration"); "name_id" in the style `names`
    (demangled, base, or mangled, which falls back to demangled where the export has none). keep=False:
    the trace does not hold on to columns it reads for this."""
    cols = [NAME_COLUMN[names] if f == "name_id" else f for f in fields]
    kern = trace.frame("kernels", list(dict.fromkeys(cols)), keep=keep)
    if names != "demangled" and "name_id" in fields:
        kern = kern.rename(columns={NAME_COLUMN[names]: "name_id"})
    return kern


RUNTIME_COLUMNS = ["correlation_id", "start", "end", "global_tid", "name_id"]


def runtime_calls(
    trace: Trace, *, keep: bool = True, correlation_ids: np.ndarray | None = None
) -> pd.DataFrame:
    """One row per CUDA runtime call (correlation_id, start, end, global_tid, name_id), duplicates
    removed. `attrs["names"]` maps name_id to the plain name; `attrs["notes"]` holds the one-line note
    when duplicates were dropped. keep=False: the trace does not hold on to columns it reads for this.

    correlation_ids: only the calls with these correlationIds (the same rows and notes as the whole
    table, filtered), read without holding the whole table (6M runtime calls are ~250 MB of columns) and
    with a sort of the correlationIds, not a sort of every call by three keys. NULL among them asks for
    nothing: a kernel without a correlationId has no call.
    """
    if correlation_ids is not None:
        return _calls_among(trace, correlation_ids[correlation_ids != NULL])
    raw = trace.frame("runtime", RUNTIME_COLUMNS, keep=keep)
    return _once(trace, raw, notes=True)[0]


def _once(trace: Trace, raw: pd.DataFrame, notes: bool) -> tuple[pd.DataFrame, int]:
    """`raw` with each (thread, correlationId)'s call kept once (the plain-named one, then the first),
    attrs "names" and "notes" set; and how many were dropped."""
    raw_names = trace.strings(distinct(pd.unique(raw["name_id"].to_numpy())))  # a hash of 6M ids, not a sort
    names = {i: plain_name(n) for i, n in raw_names.items()}
    versioned_ids = [i for i, n in raw_names.items() if names[i] != n]
    corr = raw["correlation_id"].to_numpy()
    # ids that only grow (CUPTI numbers calls in order: most exports) repeat none, without a sort of 6M
    ordered = corr if (corr[1:] > corr[:-1]).all() else np.sort(corr)
    if not ((ordered[1:] == ordered[:-1]) & (ordered[1:] != NULL)).any():  # most exports: no 6M-row lexsort
        raw.attrs["names"] = names
        raw.attrs["notes"] = []
        return raw, 0
    del ordered
    versioned = np.isin(raw["name_id"].to_numpy(), versioned_ids)
    tid = raw["global_tid"].to_numpy()
    order = np.lexsort((raw["start"].to_numpy(), versioned, tid, corr))
    sorted_corr, sorted_tid = corr[order], tid[order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = (sorted_corr[1:] != sorted_corr[:-1]) | (sorted_tid[1:] != sorted_tid[:-1])
    first |= sorted_corr == NULL  # calls without a correlationId are all kept
    del sorted_tid
    said: list[str] = []
    dropped = int((~first).sum())
    if dropped:
        if notes:
            twin = raw_names.get(int(raw["name_id"].iloc[order[~first][0]]), "?")
            said.append(_twice_note(dropped, twin))
        keep = np.sort(order[first])
        del order, sorted_corr, first, versioned
        raw = pd.DataFrame({c: raw.pop(c).to_numpy()[keep] for c in list(raw.columns)}, copy=False)
    raw.attrs["names"] = names
    raw.attrs["notes"] = said
    return raw, dropped


def _twice_note(dropped: int, twin: str) -> str:
    return (
        f"{dropped:,} CUDA runtime calls were recorded twice under one correlationId "
        f"(e.g. {plain_name(twin)} and {twin}); each is counted once, under its plain name "
        "(nsys stats counts both)"
    )


def _calls_among(trace: Trace, wanted: np.ndarray, block_rows: int | None = None) -> pd.DataFrame:
    """runtime_calls(trace, correlation_ids=wanted): the calls read a block at a time (`Trace.blocks`),
    the wanted rows kept, while a table of the correlationIds seen says whether any came twice; only an
    export where one did is read a column at a time (`_calls_among_columns`), for the calls recorded
    twice and their note. 6M calls: ~25 MB of blocks at a time, against two whole 48 MB columns."""
    repeats = Repeats()
    test = membership(wanted, 8 * len(wanted))  # a table of up to 8 bytes per kernel
    # no correlationId comes twice (else the columns' way is taken), so each wanted one is taken once at
    # most: the columns are filled in place, not gathered in pieces and joined (that held them twice)
    room = len(np.unique(wanted)) if len(wanted) else 0
    columns = {c: np.empty(room, dtype=np.int64) for c in RUNTIME_COLUMNS}
    at = 0
    extra = {} if block_rows is None else {"rows": block_rows}
    for block in trace.blocks("runtime", RUNTIME_COLUMNS, **extra):
        corr = block["correlation_id"]
        if repeats.seen(corr, NULL) is not False:
            del columns, block, corr
            return _calls_among_columns(trace, wanted)
        take = np.flatnonzero(test(corr))
        for c in RUNTIME_COLUMNS:
            columns[c][at : at + len(take)] = block[c][take]
        at += len(take)
        del block, take, corr
    calls, _ = _once(trace, pd.DataFrame({c: v[:at] for c, v in columns.items()}, copy=False), notes=False)
    return calls


def _calls_among_columns(trace: Trace, wanted: np.ndarray) -> pd.DataFrame:
    """runtime_calls(trace, correlation_ids=wanted), a column at a time: each whole column is read, the
    wanted rows taken, the column let go. The note on calls recorded twice still counts every call."""
    ok = trace.rows_ok("runtime", RUNTIME_COLUMNS)
    corr = trace.column("runtime", "correlation_id", keep=False)
    valid = corr[ok]
    valid.sort()  # in place: np.unique would hold several copies of 6M values
    repeat = valid[1:] == valid[:-1]
    repeat &= valid[1:] != NULL
    dropped, twice = 0, np.zeros(0, dtype=np.int64)
    if repeat.any():  # ids seen more than once: twice on one thread, or reused by another process
        dropped, twice = _repeated_on_a_thread(trace, corr, ok, np.unique(valid[1:][repeat]))
    del valid, repeat
    take = np.flatnonzero(ok & member(corr, wanted))
    del ok
    columns, example = {"correlation_id": corr[take]}, {"correlation_id": corr[twice]}
    del corr  # before the next column is read: two 6M-row columns at once were the peak
    for col in RUNTIME_COLUMNS:
        if col not in columns:
            values = trace.column("runtime", col, keep=False)
            columns[col], example[col] = values[take], values[twice]
            del values
    calls, _ = _once(trace, pd.DataFrame(columns, copy=False), notes=False)
    if dropped:
        names = [trace.strings([i]).get(int(i), "?") for i in example["name_id"]]
        versioned = np.array([plain_name(n) != n for n in names], dtype=bool)
        second = np.lexsort((example["start"], versioned))[1]  # the first of them runtime_calls drops
        calls.attrs["notes"] = [_twice_note(dropped, names[second])]
    return calls


def _repeated_on_a_thread(
    trace: Trace, corr: np.ndarray, ok: np.ndarray, repeated: np.ndarray
) -> tuple[int, np.ndarray]:
    """Of the rows whose correlationId is among `repeated`: how many repeat a (thread, correlationId)
    seen before, and the rows of the first such pair (the note names one of them). Only those rows'
    threads are looked at: the whole thread column is not held beside the ids."""
    rows = np.flatnonzero(ok & member(corr, repeated))
    tid = trace.column("runtime", "global_tid", keep=False)[rows]
    ids = corr[rows]
    order = np.lexsort((tid, ids))
    same = (ids[order][1:] == ids[order][:-1]) & (tid[order][1:] == tid[order][:-1])
    if not same.any():
        return 0, np.zeros(0, dtype=np.int64)
    at = order[1:][np.argmax(same)]
    return int(same.sum()), rows[(ids == ids[at]) & (tid == tid[at])]


def kernel_launches(trace: Trace, names: str = "demangled", extra: tuple[str, ...] = ()) -> pd.DataFrame:
    """Kernels (name_id, duration, correlation_id, global_pid, extra fields) with their launch call:
    has_call, call_start, call_end, global_tid, api_id (NULL sentinel where the call is missing, e.g.
    runtime not traced). `attrs`: "notes" (duplicate calls dropped), "api_names" (api_id -> name).
    """
    fields = ("name_id", "duration", "correlation_id", "global_pid", *extra)
    # the frame owns what it reads (unless the trace holds it already): 1M kernels are 8 MB a column
    kern = kernel_rows(trace, tuple(dict.fromkeys(fields)), names=names, keep=False)
    cols = ("call_start", "call_end", "global_tid", "api_id")
    notes: list[str] = []
    api_names: dict[int, str] = {}
    found = np.full(len(kern), -1, dtype=np.int64)
    calls = None
    if trace.has("runtime") and len(kern):
        # the runtime frame is often 6x the kernels: read it for the join, not kept (unless loaded before)
        calls = runtime_calls(trace, keep=False, correlation_ids=pd.unique(kern["correlation_id"].to_numpy()))
        notes, api_names = calls.attrs["notes"], calls.attrs["names"]
        found = _first_of(
            _call_key(kern["correlation_id"].to_numpy(), kern["global_pid"].to_numpy()),
            _call_key(calls["correlation_id"].to_numpy(), calls["global_tid"].to_numpy() & PROCESS_MASK),
        )
        found[kern["correlation_id"].to_numpy() == NULL] = -1  # its key would wrap onto correlationId 1's
    has = found >= 0
    # one frame built from arrays: a column set on a frame is a copy of the array
    columns = {c: kern[c].to_numpy() for c in kern.columns}
    columns["has_call"] = has
    for col, src in zip(cols, ("start", "end", "global_tid", "name_id"), strict=True):
        values = np.full(len(kern), NULL, dtype=np.int64)
        if calls is not None:
            values[has] = calls[src].to_numpy()[found[has]]
        columns[col] = values
    del calls, found
    kern = pd.DataFrame(columns, copy=False)
    kern.attrs["notes"] = notes
    kern.attrs["api_names"] = api_names
    return kern


def _call_key(correlation_id: np.ndarray, global_pid: np.ndarray) -> np.ndarray:
    """One integer per (correlationId, process): correlationIds are 32-bit counters, pids 24-bit."""
    return (correlation_id << ID_BITS) | pid_of(global_pid)


def _first_of(wanted: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """`_lookup(keys, wanted)` with the hash table built on `wanted`: less memory where `keys` is the
    longer array (a hash table of 6M runtime calls is ~10x the 1M kernels')."""
    codes, uniques = factorize(wanted)
    pos = pd.Index(uniques).get_indexer(keys)  # which wanted key each of `keys` is, -1: none
    first = np.full(len(uniques) + 1, -1, dtype=np.int64)
    hit = np.flatnonzero(pos >= 0)
    first[pos[hit[::-1]]] = hit[::-1]  # reversed: the first position wins
    del pos, hit
    return first[codes]  # codes -1 (a NaN key: none here, ints) would read the -1 at the end


def _lookup(keys: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Position in `keys` of each of `wanted`, -1 where absent (the first, if a key repeats)."""
    index = pd.Index(keys)
    if index.is_unique:
        return index.get_indexer(wanted)
    first = ~index.duplicated()
    pos = pd.Index(keys[first]).get_indexer(wanted)
    return np.where(pos >= 0, np.flatnonzero(first)[np.maximum(pos, 0)], -1)
