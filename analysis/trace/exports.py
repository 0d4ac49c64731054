"""The SQLite export of what a user names for analysis: an export is itself; an nsys report (.nsys-rep,
.qdrep) is exported once, into the cache folder's `exports` (analysis.trace.cache), never beside the user's
file. There each export is an item of the cache: named by a hash of its report's path and one of the
report's identity, beside a note naming the report, counted under the cache's limit and evicted with it
(none kept where the limit is 0); a report's export made anew (the report changed) replaces its older one.
An export that already lies beside the report (as `harness run --nsys` leaves it) and is newer than the
report is used as it is, and said (as `nsys stats` reads it without a word).

Exporting runs nsys, which analysis does not: the caller passes an `Exporter` (the harness's runs
`nsys export --type sqlite`). Light at import: a table served from the cache opens no trace.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import hashlib
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from analysis.errors import ExportError
from analysis.outputs import refuse_streams_over
from analysis.readers import A_REPORT, EXPORT_SUFFIXES, REPORT_SUFFIXES
from analysis.trace.cache import EXPORTS, Cache, cache_root, export_note, pin, remove_export, source_prefix
from analysis.trace.cache_files import (
    SOURCE_PREFIX,
    Cleared,
    contents,
    filled_meanwhile,
    read_json,
    remove_tree,
    size_of,
    write_atomic,
)
from analysis.trace.multi import folder_entries

if TYPE_CHECKING:
    from analysis.trace.trace import Trace


Exporter = Callable[[Path, Path], object]
"""Writes the SQLite export of the report (first) at the path (second); raises where it cannot."""


def exports_dir() -> Path:
    return cache_root() / EXPORTS


def clear_exports() -> Cleared:
    """The reports' exports the cache made (EXPORTS) removed, their folder with them: the bytes that went
    (freed), what would not go and why, or the folder `filled` where a command made an export into it as it
    went (all it held gone)."""
    folder = exports_dir()
    out = Cleared()
    if not (folder.exists() or folder.is_symlink()):
        return out
    before = contents(folder) if not folder.is_symlink() else {}
    why = remove_tree(folder)
    gone = before.keys() - contents(folder).keys() if why is not None else before.keys()
    out.freed = sum(before[f] for f in gone)
    if why is not None and filled_meanwhile(folder, before):
        out.filled.append(folder)
    elif why is not None:
        out.kept.append((folder, why))
    return out


def files_read(source: Path) -> list[Path]:
    """The files reading `source` may read: itself and, for a report, the exports beside it."""
    if source.suffix not in REPORT_SUFFIXES:
        return [source]
    return [source, source.with_suffix(".sqlite"), source.with_name(f"{source.stem}.harness.sqlite")]


def sqlite_for(
    source: Path, export: Exporter | None, *, cache: bool = True, notes: list[str] | None = None
) -> Path:
    """The SQLite export of `source`: itself, or for a report the export beside it where that is newer
    (said in `notes`: the file read is not the one named), else an export made (once) by `export` into the
    cache folder (a private folder, removed at exit, where caching is off or the folder is not ours).
    Refused when the command's own output is redirected into a file it would read."""
    read = files_read(source)
    refuse_streams_over(read)
    if source.suffix not in REPORT_SUFFIXES:
        return source
    if not source.exists():
        raise ExportError(f"no such report: {source}")
    from analysis.trace.opening import not_a_file

    not_a_file(source)  # a pipe or a device: nsys would read it once, the key's stat means nothing
    st = source.stat()
    for beside in read[1:]:
        if beside.is_file() and beside.stat().st_mtime >= st.st_mtime:
            if notes is not None:
                notes.append(beside_note(source, beside))
            return beside
    if export is None:
        raise ExportError(f"{source} {A_REPORT}")
    key = _key(source, st)
    store = Cache()
    folder: Path | None = exports_dir() if cache and store.limit > 0 else None
    if folder is not None:
        kept = folder / f"{key}.sqlite"
        if kept.is_file():
            _used(kept, source)
            return kept
        try:
            store.claim()  # refuses a folder of the user's (ForeignCacheFolder)
            folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            folder = None
    if folder is None:
        folder = Path(tempfile.mkdtemp(prefix="harness-export-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
    # a partial file of its own: another command exporting the same report at once writes its own, and
    # each one's rename puts a whole export in place
    target = folder / f"{key}.sqlite"
    partial = folder / f".tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}-{key}.sqlite"
    try:
        export(source, partial)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    partial.replace(target)
    if folder == exports_dir():
        _used(target, source)
        _drop_older(store, target)
        store.wrote(size_of(target) + size_of(export_note(target)), keep=target)
    return target


def _used(export: Path, report: Path) -> None:
    """`export`, in the cache folder, is read for `report`: kept from eviction by this process, its note
    (naming the report) written or its time set (its last use: the export's own times key its entries)."""
    pin(export)
    note = export_note(export)
    try:
        if read_json(note) is None:
            write_atomic(note, json.dumps({"report": str(report.resolve())}).encode())
        else:
            os.utime(note)
    except OSError:  # a folder that takes no write: the export is still read
        pass


def _drop_older(store: Cache, export: Path) -> None:
    """Remove the exports of `export`'s report made before it (of the report as it was), with their notes
    and the cache entries read of them."""
    prefix = export.name[:SOURCE_PREFIX]
    for older in export.parent.glob(f"{prefix}*.sqlite"):
        if older != export and not older.name.startswith("."):
            store.clear(older)
            remove_export(older)


def _key(source: Path, st: os.stat_result) -> str:
    """The name of a report's export in the cache folder: a hash of the report's path (the start every
    export of it shares, `source_prefix`), then one of its inode and ctime as in the trace cache's key, so
    that a report rewritten with its size and mtime put back is exported again."""
    resolved = str(source.resolve())
    stamp = f"{st.st_dev}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}"
    return (
        source_prefix(resolved)
        + hashlib.sha256(f"{resolved}\0{stamp}".encode()).hexdigest()[: 32 - SOURCE_PREFIX]
    )


def clear_named(cache: Cache, named: Path) -> Cleared:
    """The cache entries of what `named` names as the table commands read it (`clear_source` of each): an
    export, report or trace; a folder: every one in it; a glob pattern: every file it matches."""
    if named.is_dir():
        suffixes = (*EXPORT_SUFFIXES, *REPORT_SUFFIXES)
        sources = [p for p in folder_entries(named) if p.name.lower().endswith(suffixes) and p.is_file()]
    elif not named.exists() and glob.has_magic(str(named)):
        sources = [Path(m) for m in sorted(glob.glob(str(named))) if Path(m).is_file()]
    else:
        sources = [named]
    out = Cleared()
    for source in sources:
        out.add(clear_source(cache, source))
    return out


def clear_source(cache: Cache, source: Path) -> Cleared:
    """The cache entries of `source` removed (Cache.clear); of a report, also those of the exports it is
    read through (beside it, or made into the cache folder: that export removed too)."""
    cleared = cache.clear(source)
    if source.suffix not in REPORT_SUFFIXES:
        return cleared
    through = [p for p in files_read(source)[1:] if p.is_file()]
    try:
        kept = exports_dir() / f"{_key(source, source.stat())}.sqlite"
    except OSError:  # the report is gone: its export's name is not known
        kept = None
    if kept is not None and kept.is_file():
        through.append(kept)
    for path in through:
        cleared.add(cache.clear(path))
    if kept is not None and kept.is_file():
        cleared.add(remove_export(kept))
    return cleared


def beside_note(report: Path, export: Path) -> str:
    """The line that says a report was read through the export lying beside it (as `nsys stats` does)."""
    return (
        f"read {export}, the export beside {report.name} and newer than it (remove it to have the report "
        "exported instead)"
    )


@contextlib.contextmanager
def said_on_error(notes: list[str]) -> Iterator[None]:
    """An ExportError raised inside says `notes` too (which export was read for a report: the error names
    that file, not the one the user gave)."""
    try:
        yield
    except ExportError as e:
        if not notes:
            raise
        raise ExportError("; ".join([str(e), *notes])) from None


def open_source(source: Path, export: Exporter | None, *, cache: bool = True) -> Trace:
    """A trace of `source` (an export or trace, or a report exported first by `export`); its notes say
    which export was read where it is not the file named."""
    from analysis.trace.opening import open_trace

    notes: list[str] = []
    path = sqlite_for(source, export, cache=cache, notes=notes)
    with said_on_error(notes):
        trace = open_trace(path, cache=cache)
    for text in notes:
        trace.note(text)
    return trace
