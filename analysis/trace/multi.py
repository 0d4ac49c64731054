"""Many exports, one analysis: find the exports, tell their ranks, read each in its own process, combine.

Inputs are exports (nsys .sqlite, Kineto .json(.gz)), glob patterns (quoted, so the shell left them) and
folders (every export in them; an .nsys-rep with its .sqlite beside it counts once). Reports must already
be exported (the CLI layer does that, harness.experiments.reports).

Each export is read by one task (analysis.tables.tables.run_task, analysis.ranks.ranks.ranks_task) in a
worker: a local process (ProcessPoolExecutor, as many as cores and inputs allow) or a Dask distributed worker
(`dask=ADDRESS`); what goes to a worker is the export's path. A task opens the trace through
analysis.trace.opening.open_trace, so the Parquet cache serves it, and returns a Part: small tables plus,
for the summaries that are combined exactly, the rows grouped (`Grouped`: each group's keys once, its
durations in 2 or 4 bytes each where they fit).

Ranks: `rank<R>` in the file name (`run.rank3.sqlite`, `rank_3`), else the trace's own rank (Kineto
`distributedInfo.rank`), else no rank: rows are labelled by file (`Source`) and a note says so. Two inputs
with one rank are refused.

Combining: each group's values of every export are joined, in label order, and summarised once
(analysis.stats.figures, as one export's tables are), so Total, count, Avg, Med, Min, Max and StdDev over
all ranks are exact, the same as one export holding every row; no frame of every row is made. Tables
whose rows are already per process or per range instance (launch latency, GPU time per NVTX range,
`nvtx --trace`) are stacked, one block per rank.
"""

from __future__ import annotations

import glob
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.errors import ExportError
from analysis.stats import figures, narrow, round_half_up, time_percent

RANK_RE = re.compile(r"(?:^|[._-])rank[_-]?(\d+)(?=[._-]|$)", re.IGNORECASE)
EXPORT_SUFFIXES = (".sqlite", ".json", ".json.gz")
REPORT_SUFFIXES = (".nsys-rep", ".qdrep")
# names of a folder's files that look like an export's but are not taken: said, not passed over in silence
NEAR_SUFFIXES = (".sqlite3", ".db", ".json.bz2", ".json.xz", ".json.zst", ".nsys-rep.gz")
DASK_MISSING = "--dask needs Dask: pip install 'harness[dask]'"
VALUE_COLUMNS = ("duration", "bytes")  # the value columns of row pieces; the others are keys


# --- inputs ----------------------------------------------------------------------------------------------


def _stem(path: Path) -> str:
    name = path.name
    for suffix in (*EXPORT_SUFFIXES, *REPORT_SUFFIXES):
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
            break
    return name.removesuffix(".harness")


def exports_in(folder: Path, skipped: list[str] | None = None) -> list[Path]:
    """The exports and reports in `folder`, one per stem: an export beside its report wins. Names are
    matched whatever their case (`REPORT.SQLITE`). What is named like one and is not taken (a folder, a
    named pipe, `.sqlite3`) goes to `skipped`, with why."""
    best: dict[str, Path] = {}
    suffixes = (*EXPORT_SUFFIXES, *REPORT_SUFFIXES)
    for p in sorted(folder.iterdir()):
        name = p.name.lower()
        if not name.endswith(suffixes):
            if name.endswith(NEAR_SUFFIXES) and skipped is not None:
                skipped.append(f"{p.name} (not an export's name: {', '.join(suffixes)})")
            continue
        if not p.is_file():
            if skipped is not None:
                skipped.append(f"{p.name} ({_what(p)}, not a file)")
            continue
        stem = _stem(p)
        if stem not in best or best[stem].name.lower().endswith(REPORT_SUFFIXES):
            best[stem] = p
    return sorted(best.values(), key=lambda p: _natural(p.name))


def _what(path: Path) -> str:
    import stat

    try:
        mode = path.stat().st_mode
    except OSError:
        return "a broken link"
    if stat.S_ISDIR(mode):
        return "a folder"
    return "a named pipe" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"


def _natural(name: str) -> list[Any]:
    """rank2 before rank10."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def expand(inputs: Sequence[str | Path], notes: list[str] | None = None) -> list[Path]:
    """Paths from exports, folders and glob patterns, in the order given (a folder's and a pattern's files
    in natural name order). Raises ExportError for a folder or pattern with no exports, a file given twice,
    or, among several inputs, a file that is not there (one input is said missing where it is opened).
    `notes` gets a line per folder saying what in it was named like an export and not taken."""
    out: list[Path] = []
    for item in inputs:
        p = Path(item)
        if p.is_dir():
            skipped: list[str] = []
            found = exports_in(p, skipped)
            said = f"; skipped: {', '.join(skipped)}" if skipped else ""
            if not found:
                raise ExportError(f"no exports (.sqlite, .nsys-rep, .json, .json.gz) in the folder {p}{said}")
            if skipped and notes is not None:
                notes.append(f"skipped in the folder {p}: {', '.join(skipped)}")
            out += found
        elif not p.exists() and glob.has_magic(str(item)):
            found_all = [Path(m) for m in glob.glob(str(item))]
            matched = [m for m in found_all if m.is_file()]
            others = [f"{m} ({_what(m)}, not a file)" for m in found_all if not m.is_file()]
            if others and notes is not None:
                notes.append(f"skipped of what {item} matches: {', '.join(others)}")
            if not matched:
                raise ExportError(
                    f"no file matches {item}" + (f" (only {', '.join(others)})" if others else "")
                )
            out += sorted(matched, key=lambda m: _natural(m.name))
        elif not p.exists() and len(inputs) > 1:  # before any rank is read from the names
            raise ExportError(f"no such export: {p}")
        else:
            out.append(p)
    seen: dict[Path, Path] = {}
    for p in out:
        key = p.resolve()
        if key in seen:
            raise ExportError(f"{p} is given twice: each export counts once")
        seen[key] = p
    return out


def rank_in_name(path: Path | str) -> int | None:
    """R from `rank<R>` in the file name (`run.rank3.sqlite`, `trace_rank_3.json`), else None."""
    m = RANK_RE.search(Path(path).name)
    return int(m[1]) if m else None


# --- results of the workers ----------------------------------------------------------------------------


@dataclass
class Grouped:
    """One export's rows of a table grouped by their key columns, as a worker sends them back: each group's
    key values (None: missing) and, per value column (duration, bytes), the group's values in row order,
    2 or 4 bytes each where they fit (`stats.narrow`). A few bytes a row, no frame: 1,024 exports' rows as
    frames with a categorical per key column, concatenated and copied in the combine, took the command's
    memory past 500 MB."""

    keys: list[str]
    groups: list[tuple[Any, ...]]
    values: dict[str, list[np.ndarray]]

    @classmethod
    def of(cls, rows: pd.DataFrame, values: Sequence[str] = VALUE_COLUMNS) -> Grouped:
        """`rows` (key columns and value columns) grouped; groups in order of first appearance."""
        vals = [c for c in rows.columns if c in values]
        keys = [c for c in rows.columns if c not in values]
        code = np.zeros(len(rows), dtype=np.int64)
        columns = []
        for k in keys:
            col = rows[k]
            cat = col.array if isinstance(col.dtype, pd.CategoricalDtype) else pd.Categorical(col.to_numpy())
            labels = [None if pd.isna(v) else v for v in cat.categories.tolist()] + [None]
            code = code * len(labels) + np.asarray(cat.codes, dtype=np.int64) % len(labels)  # -1: the last
            columns.append(labels)
        group, uniq = pd.factorize(code, sort=False)
        found = uniq.astype(np.int64)
        decoded = []
        for labels in reversed(columns):
            found, rest = np.divmod(found, len(labels))
            decoded.append([labels[i] for i in rest.tolist()])
        order = np.argsort(group, kind="stable")
        bounds = np.cumsum(np.bincount(group, minlength=len(uniq)))[:-1]
        split = {c: np.split(_narrow(rows[c].to_numpy())[order], bounds) for c in vals}
        return cls(keys, list(zip(*reversed(decoded), strict=True)) if keys else [()] * len(uniq), split)


@dataclass
class Piece:
    """One table's share of one export: `rows` to summarise together (key columns + value columns: a
    frame in the worker, sent back `Grouped`), or a finished `table` to stack."""

    rows: pd.DataFrame | Grouped | None = None
    table: pd.DataFrame | None = None


@dataclass
class Part:
    """What one task sends back: its pieces by table name, the trace's notes and facts, or the error."""

    path: str
    pieces: dict[str, Piece] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # table -> why it has no rows in this export
    notes: list[str] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)  # rank, world_size, programs, session_start_ns, ...
    error: str | None = None


@dataclass
class Source:
    """One input and its label in the combined tables."""

    path: Path
    rank: int | None
    how: str  # "name", "trace" or "" (no rank)
    label: str = ""


@dataclass
class Sources:
    """The inputs in label order, the label column's name (Rank or Source), and what is odd about them."""

    items: list[Source]
    column: str
    notes: list[str] = field(default_factory=list)

    @property
    def labels(self) -> list[Any]:
        return [s.rank if self.column == "Rank" else s.label for s in self.items]


def check_name_ranks(paths: Sequence[Path]) -> None:
    """Refuse two inputs whose file names give one rank, before any work is done."""
    _refuse_duplicates([(rank_in_name(p), p) for p in paths])


def _refuse_duplicates(pairs: Sequence[tuple[int | None, Path]]) -> None:
    first: dict[int, Path] = {}
    for rank, path in pairs:
        if rank is None:
            continue
        if rank in first:
            raise ExportError(
                f"rank {rank} is given twice ({first[rank].name} and {path.name}): give one export per rank"
            )
        first[rank] = path


def label_sources(paths: Sequence[Path], parts: Sequence[Part]) -> Sources:
    """Ranks from file names, else from the traces; the inputs sorted by rank; notes on mixed inputs."""
    items = []
    for path, part in zip(paths, parts, strict=True):
        named = rank_in_name(path)
        traced = part.info.get("rank")
        if named is not None:
            items.append(Source(path, named, "name"))
        elif isinstance(traced, int):
            items.append(Source(path, traced, "trace"))
        else:
            items.append(Source(path, None, ""))
    _refuse_duplicates([(s.rank, s.path) for s in items])
    notes: list[str] = []
    if all(s.rank is not None for s in items):
        column = "Rank"
        items.sort(key=lambda s: s.rank)  # type: ignore[arg-type, return-value]
        for s in items:
            s.label = f"rank {s.rank}"
    else:
        column = "Source"
        names = [s.path.name for s in items]
        unique = len(set(names)) == len(names)
        for s in items:
            s.label = s.path.name if unique else str(s.path)
        lacking = [s.path.name for s in items if s.rank is None]
        notes.append(
            f"no rank in the file name (rank<R>) or trace of {', '.join(lacking)}: rows are labelled by "
            "file, in the order given"
        )
    notes += mixed_notes(items, {str(p): part for p, part in zip(paths, parts, strict=True)})
    return Sources(items, column, notes)


def mixed_notes(items: Sequence[Source], parts: dict[str, Part]) -> list[str]:
    """Notes when the inputs look like more than one run: other programs, formats, rank counts, stems."""
    notes = []
    info = {str(s.path): parts[str(s.path)].info for s in items}

    def spread(key: str) -> dict[str, list[str]]:
        by: dict[str, list[str]] = {}
        for s in items:
            value = info[str(s.path)].get(key)
            if value:
                text = ", ".join(value) if isinstance(value, list) else str(value)
                by.setdefault(text, []).append(s.label)
        return by

    for key, what in (("programs", "programs"), ("format", "formats"), ("world_size", "world sizes")):
        by = spread(key)
        if len(by) > 1:
            listed = "; ".join(f"{v} ({', '.join(labels)})" for v, labels in by.items())
            notes.append(f"the exports come from different {what}: {listed}")
    named = [s for s in items if s.how == "name"]
    stems = {RANK_RE.sub("", _stem(s.path)) for s in named}
    if len(stems) > 1:
        notes.append(
            f"the exports' names point to {len(stems)} runs ({', '.join(sorted(stems))}): are these one run?"
        )
    ranks = sorted(s.rank for s in items if s.rank is not None)
    sizes = {info[str(s.path)].get("world_size") for s in items} - {None}
    expected = max(sizes) if sizes else (max(ranks) + 1 if ranks else 0)
    if ranks and len(ranks) == len(items):
        absent = sorted(set(range(expected)) - set(ranks))
        if absent:
            shown = ", ".join(map(str, absent[:8])) + (", ..." if len(absent) > 8 else "")
            notes.append(f"{len(ranks)} of {expected} ranks given: rank {shown} missing")
    return notes


# --- running the tasks ---------------------------------------------------------------------------------


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

    from analysis.trace.opening import open_trace

    part = Part(path=path)
    try:
        with open_trace(path, cache=cache) as trace:
            pieces = build(trace)
            part.notes = list(trace.notes)
            meta = trace.meta
            part.info = {
                "format": meta.get("format"),
                "rank": meta.get("rank"),
                "world_size": meta.get("world_size"),
                "programs": meta.get("programs") or [],
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


def _narrow(values: np.ndarray) -> np.ndarray:
    """Integer values in 2 or 4 bytes where they fit (`stats.narrow`); others as they are."""
    return narrow(values) if values.dtype.kind in "iu" else values


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


# --- combining -----------------------------------------------------------------------------------------


@dataclass
class Gathered:
    """A table's row groups over every source: per key (source first with `by_rank`), the sources (their
    positions in label order) with rows in it and, per value column, their values in source order."""

    keys: list[str]
    sources: dict[tuple[Any, ...], list[int]]
    values: dict[str, dict[tuple[Any, ...], list[np.ndarray]]]

    def joined(self, value: str, key: tuple[Any, ...]) -> np.ndarray:
        """The values of one group, its sources' in their order (let go from the gathered)."""
        pieces = self.values[value].pop(key)
        return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)


def gather_rows(
    parts: Sequence[Part],
    name: str,
    sources: Sources,
    keys: Sequence[str] | None = None,
    by_rank: bool = False,
) -> Gathered | None:
    """The row pieces named `name` of every part, grouped by `keys` (default: the pieces' own key
    columns; fewer merge their groups), per source with `by_rank`: no frame of every row, a list of
    arrays per group."""
    order = {str(s.path): i for i, s in enumerate(sources.items)}
    out: Gathered | None = None
    for part in sorted(parts, key=lambda p: order[p.path]):
        piece = part.pieces.get(name)
        if piece is None or piece.rows is None:
            continue
        rows = piece.rows if isinstance(piece.rows, Grouped) else Grouped.of(piece.rows)
        wanted = list(rows.keys if keys is None else keys)
        at = [rows.keys.index(k) for k in wanted]
        if out is None:
            out = Gathered(wanted, {}, {v: {} for v in rows.values})
        src = order[part.path]
        for i, group in enumerate(rows.groups):
            key = tuple(group[j] for j in at)
            if by_rank:
                key = (src, *key)
            have = out.sources.setdefault(key, [])
            if not have or have[-1] != src:
                have.append(src)
            for v, arrays in rows.values.items():
                out.values[v].setdefault(key, []).append(arrays[i])
    return out


def compress_ranks(values: Sequence[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5'."""
    vals = sorted(set(values))
    runs: list[str] = []
    i = 0
    while i < len(vals):
        j = i
        while j + 1 < len(vals) and vals[j + 1] == vals[j] + 1:
            j += 1
        runs.append(str(vals[i]) if i == j else f"{vals[i]}-{vals[j]}")
        i = j + 1
    return ",".join(runs)


def stat_table(
    rows: Gathered,
    keys: Sequence[str],
    columns: Sequence[str],
    sources: Sources,
    *,
    by_rank: bool = False,
    count_name: str = "Instances",
    value: str = "duration",
) -> pd.DataFrame:
    """The nsys-stats summary of the gathered rows (`gather_rows` by `keys`) over every source, or per
    source with `by_rank`: each group's statistics from its values joined (exact: analysis.stats.figures,
    as one export's tables), Time (%) of each row's listing (per source with `by_rank`), largest first. A
    Rank/Source column leads; over all sources, `Ranks`/`Sources` says which sources have the row."""
    label = sources.column
    total = "Total Time (ns)"
    stats = [total, count_name, "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)", "StdDev (ns)"]
    group_keys = ["_src", *keys] if by_rank else list(keys)
    table = []
    for key in list(rows.sources):
        table.append([*key, *figures(rows.joined(value, key))])
    out = pd.DataFrame(table, columns=[*group_keys, *stats])
    for k in keys:  # missing key values as a frame of them had them
        out[k] = out[k].astype(object).where(out[k].notna(), np.nan)
    for col in ("Avg (ns)", "Med (ns)", "StdDev (ns)"):
        out[col] = round_half_up(out[col].astype(np.float64))
    which = [_which(rows.sources[key], sources) for key in rows.sources] if not by_rank else []
    if not by_rank:
        out[f"{label}s"] = which
    out = out.sort_values(list(keys), kind="stable").sort_values(total, ascending=False, kind="stable")
    if by_rank:
        out = out.sort_values("_src", kind="stable").reset_index(drop=True)
        out["Time (%)"] = (
            np.concatenate([time_percent(g[total]) for _, g in out.groupby("_src", sort=True)])
            if len(out)
            else np.zeros(0)
        )
        out.insert(0, label, np.asarray(sources.labels, dtype=object)[out["_src"].to_numpy(dtype=np.int64)])
        lead = [label]
    else:
        out = out.reset_index(drop=True)
        out["Time (%)"] = time_percent(out[total])
        lead = [f"{label}s"]
    out = out[[*lead, *columns]]
    ints = {c: np.int64 for c in (total, count_name) if c in out}
    out = out.astype(ints).reset_index(drop=True)
    out.attrs["priority"] = lead  # the rank column stays when columns must go to fit the terminal
    return out


def _which(found: list[int], sources: Sources) -> str:
    """The sources with rows in a group ('0-3,5' for ranks, 'n of N' for files)."""
    if sources.column == "Rank":
        ranks = [s.rank for s in sources.items]
        return compress_ranks([ranks[i] for i in found])  # type: ignore[misc]
    return f"{len(set(found))} of {len(sources.items)}"


def stack_tables(parts: Sequence[Part], name: str, sources: Sources) -> pd.DataFrame | None:
    """The finished tables named `name`, one block per source in label order, a Rank/Source column first."""
    order = {str(s.path): i for i, s in enumerate(sources.items)}
    frames = []
    for part in sorted(parts, key=lambda p: order[p.path]):
        piece = part.pieces.get(name)
        if piece is None or piece.table is None:
            continue
        t = piece.table.copy()
        t.insert(0, sources.column, sources.labels[order[part.path]])
        frames.append(t)
    if not frames:
        return None
    out = pd.concat(frames, ignore_index=True)
    out.attrs["priority"] = [sources.column, *frames[0].attrs.get("priority", [])]
    return out


def all_notes(parts: Sequence[Part], sources: Sources) -> list[str]:
    """Sources' notes first, then each export's own notes once, prefixed with its label."""
    label = {str(s.path): s.label for s in sources.items}
    notes = list(sources.notes)
    for part in parts:
        for n in part.notes:
            text = f"{label[part.path]}: {n}"
            if text not in notes:
                notes.append(text)
    return notes
