"""The SQLite export of what a user names for analysis: an export is itself; an nsys report (.nsys-rep,
.qdrep) is exported once, into the cache folder's `exports` (analysis.trace.cache), never beside the user's
file. An export that already lies beside the report (as `harness run --nsys` leaves it) and is newer than
the report is used as it is, and said (as `nsys stats` reads it without a word).

Exporting runs nsys, which analysis does not: the caller passes an `Exporter` (the harness's runs
`nsys export --type sqlite`). Light at import: a table served from the cache opens no trace.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from analysis.errors import ExportError
from analysis.outputs import refuse_streams_over
from analysis.readers import A_REPORT, REPORT_SUFFIXES
from analysis.trace.cache import EXPORTS, Cache, cache_root
from analysis.trace.cache_files import Cleared

if TYPE_CHECKING:
    from analysis.trace.trace import Trace


Exporter = Callable[[Path, Path], object]
"""Writes the SQLite export of the report (first) at the path (second); raises where it cannot."""


def exports_dir() -> Path:
    return cache_root() / EXPORTS


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
    folder: Path | None = exports_dir() if cache else None
    if folder is not None:
        kept = folder / f"{key}.sqlite"
        if kept.is_file():
            return kept
        try:
            Cache().claim()  # refuses a folder of the user's (ForeignCacheFolder)
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
    return target


def _key(source: Path, st: os.stat_result) -> str:
    """The name of a report's export in the cache folder: inode and ctime as in the trace cache's key, so
    that a report rewritten with its size and mtime put back is exported again."""
    stamp = f"{st.st_dev}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}"
    return hashlib.sha256(f"{source.resolve()}\0{stamp}".encode()).hexdigest()[:32]


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
        more = cache.clear(path)
        cleared.removed, cleared.freed = cleared.removed + more.removed, cleared.freed + more.freed
        cleared.kept += more.kept
    if kept is not None and kept.is_file():
        size = kept.stat().st_size
        try:
            kept.unlink()
            cleared.freed += size
        except OSError as e:
            cleared.kept.append((kept, e.strerror or type(e).__name__))
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
