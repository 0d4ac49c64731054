"""Many exports: run one task per export, in this process, on local processes or on a Dask cluster, and
refuse the lot when an export could not be read (analysis.trace.multi says what a task sends back). An
export that recorded none of what a table reads (a CPU-only capture's kernels) was read: it adds no rows.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.errors import ExportError, NoData
from analysis.trace.multi import Grouped, Part, Piece
from analysis.trace.opening import open_trace

DASK_MISSING = "--dask needs Dask: pip install 'harness[dask]'"


def workers_for(n_inputs: int, jobs: int | None = None) -> int:
    """Local processes: at most the cores, the inputs and `jobs`."""
    n = min(os.cpu_count() or 1, n_inputs)
    return max(1, min(n, jobs) if jobs else n)


def run_tasks(
    task: Callable[..., Part],
    paths: Sequence[Path],
    *args: Any,
    jobs: int | None = None,
    dask: str | None = None,
) -> list[Part]:
    """task(str(path), *args) for every path: in this process for one path (or jobs=1), else on local
    processes, or on the Dask cluster at `dask`. Results in the order of `paths`."""
    items = [str(p) for p in paths]
    if dask:
        return _on_dask(task, items, args, dask)
    n = workers_for(len(items), jobs)
    if n == 1:
        return [task(p, *args) for p in items]
    import multiprocessing as mp
    import threading
    from concurrent.futures import ProcessPoolExecutor

    # fork: the workers start with pandas already imported (spawn re-imports it in each, ~1 s). Only from a
    # process without other threads (a command's is: nothing is read before the workers start): a fork
    # copies a lock another thread holds, and the worker waits on it forever. Else a fork server.
    alone = threading.active_count() == 1
    method = (
        "fork" if sys.platform == "linux" and alone else "forkserver" if sys.platform != "win32" else None
    )
    with ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context(method)) as pool:
        return list(pool.map(task, items, *[[a] * len(items) for a in args]))


def _on_dask(task: Callable[..., Part], items: list[str], args: tuple[Any, ...], address: str) -> list[Part]:
    try:
        from distributed import Client
    except ImportError:
        raise ExportError(DASK_MISSING) from None
    try:
        client = Client(address, timeout="10s", set_as_default=False)
    except (OSError, TimeoutError, ValueError) as e:
        raise ExportError(f"cannot reach the Dask scheduler at {address}: {e}") from None
    with client:
        futures = client.map(task, items, *[[a] * len(items) for a in args], pure=False)
        return list(client.gather(futures))


def read_part(path: str, build: Callable[[Any], dict[str, Piece]], cache: bool = True) -> Part:
    """In a worker: open the trace at `path` (through the Parquet cache), build its pieces, and say what
    the trace is (rank, world size, programs, session start), and this process's peak RSS and pid. An error
    a user can cause (no such data, a broken file) comes back in `error`, not as an exception."""
    import resource

    part = Part(path=path)
    try:
        with open_trace(path, cache=cache) as trace:
            try:
                pieces = build(trace)
            except NoData as e:  # read, and none of it recorded: said with what the trace is
                part.error, part.lacks, pieces = str(e), (e.what, e.hint), {}
            # with what a finished table says of itself (calls recorded twice...), as one export's says it
            said = [n for p in pieces.values() if p.table is not None for n in p.table.attrs.get("notes", [])]
            part.notes = list(dict.fromkeys([*trace.notes, *said]))
            meta = trace.meta
            part.info = {
                "format": meta.get("format"),
                "producer": meta.get("producer"),  # what wrote it: whose `nsys stats` names a table follows
                "producer_version": meta.get("producer_version"),
                "rank": meta.get("rank"),
                "world_size": meta.get("world_size"),
                "programs": meta.get("programs") or [],
                "devices": sorted(set(meta.get("devices") or [])),  # the GPUs' names
                "session_start_ns": meta.get("session_start_ns") or meta.get("base_time_ns"),
            }
    except ExportError as e:
        part.error = str(e)
        pieces = {}
    skipped = pieces.pop("_skipped", None)
    if skipped is not None and skipped.table is not None:
        part.skipped = dict(zip(skipped.table["table"], skipped.table["why"], strict=True))
    for piece in pieces.values():  # sent back grouped: a few bytes a row
        if isinstance(piece.rows, pd.DataFrame):
            piece.rows = Grouped.of(piece.rows)
    part.pieces = pieces
    part.info["peak_rss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    part.info["pid"] = os.getpid()  # which worker read it
    return part


def without_data(parts: Sequence[Part]) -> None:
    """For a table over several exports: an export that recorded none of what it reads (`lacks`) adds no
    rows and is no error (tables.combine names it in a note); where every export recorded none, ExportError
    as one export alone says it. One that could not be read stays refused (raise_errors)."""
    lacking = [p for p in parts if p.lacks is not None]
    if lacking and len(lacking) == len(parts):
        if len(parts) == 1:
            raise ExportError(parts[0].error)
        what = " or ".join(dict.fromkeys(p.lacks[0] for p in lacking if p.lacks))
        hint = "; ".join(dict.fromkeys(p.lacks[1] for p in lacking if p.lacks))
        names = ", ".join(p.path for p in parts[:SHOWN]) + (
            f" and {len(parts) - SHOWN:,} more" if len(parts) > SHOWN else ""
        )
        raise ExportError(f"no {what} in any of the {len(parts):,} exports ({names}): {hint}")
    for p in lacking:
        p.error = None


def raise_errors(parts: Sequence[Part]) -> None:
    """Raise ExportError if an export could not be read: its error alone, or, among several, which were
    refused and why (first lines, up to SHOWN) and which were read."""
    refused = [p for p in parts if p.error is not None]
    if not refused:
        return
    if len(parts) == 1:
        raise ExportError(refused[0].error)
    read = [p.path for p in parts if p.error is None]
    why = "; ".join(_named(p.path, _first(p.error or "")) for p in refused[:SHOWN])
    why += f"; and {len(refused) - SHOWN:,} more" if len(refused) > SHOWN else ""
    were = ", ".join(read[:SHOWN]) + (f" and {len(read) - SHOWN:,} more" if len(read) > SHOWN else "")
    raise ExportError(
        f"{len(refused):,} of {len(parts):,} exports could not be read, so no table was made: {why}. "
        + (f"Read: {were}. " if read else "None could be read. ")
        + "Fix or leave out the ones refused"
    )


SHOWN = 5  # refused (and read) exports named in the error


def _first(text: str) -> str:
    return text.splitlines()[0] if text else "unreadable"


def _named(path: str, error: str) -> str:
    """An export's error, naming the export as the user gave it."""
    return error if path in error else f"{path}: {error}"
