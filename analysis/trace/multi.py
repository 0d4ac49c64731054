"""Many exports, one analysis: find the exports, tell their ranks, read each in its own process, combine.

Inputs are exports (nsys .sqlite, Kineto .json(.gz)), glob patterns (quoted, so the shell left them) and
folders (every export in them; an .nsys-rep with its .sqlite beside it counts once). Reports must already
be exported (the CLI layer does that, harness.experiments.reports).

Each export is read by one task (analysis.tables.run_task, analysis.ranks.ranks.ranks_task) in a
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

This module finds the inputs, labels them and holds what a task sends back and what the combining gives
(`Combined`); analysis.trace.multi_run runs the tasks, analysis.trace.multi_combine combines their Parts.
It loads no numpy or pandas until rows are grouped: the tables (analysis/tables) name its types in their
light declarations.
"""

from __future__ import annotations

import glob
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from analysis.errors import ExportError
from analysis.readers import EXPORT_SUFFIXES, REPORT_SUFFIXES

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

RANK_RE = re.compile(r"(?:^|[._-])rank[_-]?(\d+)(?=[._-]|$)", re.IGNORECASE)
# names of a folder's files that look like an export's but are not taken: said, not passed over in silence
NEAR_SUFFIXES = (".sqlite3", ".db", ".json.bz2", ".json.xz", ".json.zst", ".nsys-rep.gz")
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
    """The exports and reports in `folder`: of a report and the SQLite export beside it (one stem), the
    export, unless it is older than the report (then the report, said in `skipped`); a Kineto trace is
    never one of those (run.json.gz beside run.sqlite is another capture). Names are matched whatever their
    case (`REPORT.SQLITE`). What is named like one and is not taken (a folder, a named pipe, `.sqlite3`)
    goes to `skipped`, with why."""
    best: dict[str, Path] = {}
    suffixes = (*EXPORT_SUFFIXES, *REPORT_SUFFIXES)
    for p in folder_entries(folder):
        name = p.name.lower()
        if not name.endswith(suffixes):
            if name.endswith(NEAR_SUFFIXES) and skipped is not None:
                skipped.append(f"{p.name} (not an export's name: {', '.join(suffixes)})")
            continue
        if not p.is_file():
            if skipped is not None:
                skipped.append(f"{p.name} ({_what(p)}, not a file)")
            continue
        stem = p.name if name.endswith((".json", ".json.gz")) else _stem(p)
        now = best.setdefault(stem, p)
        report, export = (p, now) if name.endswith(REPORT_SUFFIXES) else (now, p)
        if report is export or not _is_report(report) or _is_report(export):
            continue  # one file, two exports or two reports: the first stays
        older = _older(export, report)
        best[stem] = report if older else export
        if older and skipped is not None:  # what the report alone does (analysis.trace.exports.sqlite_for)
            skipped.append(f"{export.name} (older than {report.name} beside it: the report is read)")
    return sorted(best.values(), key=lambda p: _natural(p.name))


def _is_report(path: Path) -> bool:
    return path.name.lower().endswith(REPORT_SUFFIXES)


def _older(export: Path, report: Path) -> bool:
    """Whether `export` was written before `report` (recorded again since it was exported)."""
    try:
        return export.stat().st_mtime < report.stat().st_mtime
    except OSError:
        return False


def folder_entries(folder: Path) -> list[Path]:
    """What `folder` holds, sorted by name; a folder that cannot be listed (no read permission) raises
    ExportError, in one line."""
    try:
        return sorted(folder.iterdir())
    except OSError as e:
        raise ExportError(f"cannot read the folder {folder}: {e.strerror or type(e).__name__}") from None


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
    if (same := _same_bytes(out)) is not None:
        raise ExportError(f"{same[1]} is a copy of {same[0]} (the same bytes): each export counts once")
    return out


def _same_bytes(paths: Sequence[Path]) -> tuple[Path, Path] | None:
    """The first two files with the same bytes (a copy made with `cp`), else None. Only files of one size
    are read: first their first MiB, then, where that matches, the whole of them."""
    import stat

    by_size: dict[int, list[Path]] = {}
    for p in paths:
        try:
            st = p.stat()
        except OSError:
            continue  # said where it is opened
        if stat.S_ISREG(st.st_mode):
            by_size.setdefault(st.st_size, []).append(p)
    for sized in by_size.values():
        for begun in _alike(sized, whole=False):
            for same in _alike(begun, whole=True):
                return same[0], same[1]
    return None


def _alike(paths: list[Path], whole: bool) -> list[list[Path]]:
    """`paths` in groups of two or more whose first MiB (`whole`: whole content) hash the same."""
    if len(paths) < 2:
        return []
    digests: dict[bytes, list[Path]] = {}
    for p in paths:
        digests.setdefault(_digest(p, whole), []).append(p)
    return [g for g in digests.values() if len(g) > 1]


def _digest(path: Path, whole: bool) -> bytes:
    h = hashlib.blake2b()
    try:
        with path.open("rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
                if not whole:
                    break
    except OSError:
        return path.as_posix().encode()  # unreadable: said where it is opened, never the same as another
    return h.digest()


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
        import numpy as np
        import pandas as pd

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
    lacks: tuple[str, str] | None = None  # the error is the export's recording none of it: (what, hint)


@dataclass
class Combined:
    """Titled tables over several exports, with their notes and the tables no export had data for."""

    tables: list[tuple[str, pd.DataFrame]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    sources: Sources | None = None


def categories(values: Any) -> pd.Categorical:
    """A key column of a row piece: its values as a Categorical (what `Grouped.of` groups cheaply)."""
    import numpy as np
    import pandas as pd

    return pd.Categorical(np.asarray(values, dtype=object))


def named(ids: Any, names: Mapping[int, str], missing: str = "?") -> pd.Categorical:
    """Rows' string ids as a key column of their names (`missing` where an id has none): grouped by id,
    each distinct id's name looked up once (analysis.stats.name_codes), never a string made per row (4.9M
    OS runtime calls of a big export)."""
    import pandas as pd

    from analysis.stats import name_codes

    code, labels, _ = name_codes(ids, names, missing=missing)
    return pd.Categorical.from_codes(code, categories=pd.Index(labels, dtype=object))


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
            one, other = (
                (first[rank].name, path.name) if first[rank].name != path.name else (first[rank], path)
            )
            raise ExportError(f"rank {rank} is given twice ({one} and {other}): give one export per rank")
        first[rank] = path


def label_sources(paths: Sequence[Path], parts: Sequence[Part]) -> Sources:
    """Ranks the traces record, else from file names (as `breakdown` takes them); the inputs sorted by rank;
    notes on mixed inputs."""
    items = []
    for path, part in zip(paths, parts, strict=True):
        named = rank_in_name(path)
        traced = part.info.get("rank")
        if isinstance(traced, int):
            items.append(Source(path, traced, "trace"))
        elif named is not None:
            items.append(Source(path, named, "name"))
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
    """Notes when the inputs look like more than one run: other programs, GPUs, formats, rank counts or
    stems."""
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

    for key, what in (("programs", "programs"), ("devices", "GPUs"), ("format", "formats"),
                      ("world_size", "world sizes")):  # fmt: skip
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


def _narrow(values: np.ndarray) -> np.ndarray:
    """Integer values in 2 or 4 bytes where they fit (`stats.narrow`); others as they are."""
    from analysis.stats import narrow  # numpy

    return narrow(values) if values.dtype.kind in "iu" else values
