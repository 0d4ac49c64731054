"""Open what a user names for analysis: an nsys export (.sqlite) or report (.nsys-rep, .qdrep).

A report is exported to SQLite first, with the nsys the harness finds (harness.execution.nsys). The export
goes into the cache folder, never beside the user's file; an export that already lies beside the report
(as `harness run --nsys` leaves it) and is newer than the report is used as it is. This module loads no
pandas: a table computed without it (`harness kernels` on a cached export) opens its trace here.
"""

from __future__ import annotations

import atexit
import hashlib
import shutil
import tempfile
from pathlib import Path

from analysis.errors import ExportError
from analysis.outputs import refuse_streams_over
from analysis.trace.cache import Cache, cache_root
from analysis.trace.opening import REPORT_SUFFIXES, not_a_file, open_trace
from analysis.trace.trace import Trace
from harness.core.errors import NsysError
from harness.execution.nsys import export_sqlite


def exports_dir() -> Path:
    return cache_root() / "exports"


def sqlite_for(report: Path, *, cache: bool = True) -> Path:
    """The SQLite export of `report`: itself, or for a report an export made (once) into the cache. Refused
    when the command's own output is redirected into the file it would read."""
    refuse_streams_over(files_read(report))
    if report.suffix not in REPORT_SUFFIXES:
        return report
    if not report.exists():
        raise ExportError(f"no such report: {report}")
    not_a_file(report)  # a pipe or a device: nsys would read it once, the key's stat means nothing
    rep_mtime = report.stat().st_mtime
    for beside in (report.with_suffix(".sqlite"), report.with_name(f"{report.stem}.harness.sqlite")):
        if beside.is_file() and beside.stat().st_mtime >= rep_mtime:
            return beside
    st = report.stat()
    # inode and ctime as in the trace cache's key (analysis.trace.cache): a report rewritten with its size and
    # mtime put back is exported again
    stamp = f"{st.st_dev}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}"
    key = hashlib.sha256(f"{report.resolve()}\0{stamp}".encode()).hexdigest()[:32]
    folder = exports_dir() if cache else None
    if folder is not None:
        cached = folder / f"{key}.sqlite"
        if cached.is_file():
            return cached
        try:
            Cache().claim()  # refuses a folder of the user's (ForeignCacheFolder)
            folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            folder = None
    if folder is None:
        folder = Path(tempfile.mkdtemp(prefix="harness-export-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)

    target = folder / f"{key}.sqlite"
    partial = folder / f".tmp-{key}.sqlite"
    try:
        export_sqlite(report, partial)
    except NsysError as e:
        partial.unlink(missing_ok=True)
        raise NsysError(f"cannot export {report} to SQLite: {e}") from None
    partial.replace(target)
    return target


def files_read(report: Path) -> list[Path]:
    """The files opening `report` may read: itself and, for a report, the exports beside it."""
    if report.suffix not in REPORT_SUFFIXES:
        return [report]
    return [report, report.with_suffix(".sqlite"), report.with_name(f"{report.stem}.harness.sqlite")]


def open_report(report: Path, *, cache: bool = True) -> Trace:
    """A trace of `report` (an export, or a report exported first)."""
    return open_trace(sqlite_for(report, cache=cache), cache=cache)
