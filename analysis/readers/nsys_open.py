"""Open an Nsight Systems SQLite export: check that the file is a whole SQLite database, connect read-only
(or to a private copy, as analysis.readers.sqlite_files decides) and hand back its `NsysReader`, or raise
ExportError saying what is wrong.
"""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path

from analysis.errors import ExportError
from analysis.readers import return_freed_buffers, sqlite_files
from analysis.readers.nsys import META_TABLES, NsysReader
from analysis.readers.nsys_sql import SCAN_THREADS, sqlite_error


def check_header(path: Path) -> None:
    """Raise ExportError unless `path` starts like a whole SQLite database."""
    head = sqlite_files.read_head(path, 100)
    if not head.startswith(sqlite_files.MAGIC):
        raise ExportError(
            f"{path} is not an SQLite file: pass the .sqlite export of an Nsight Systems report "
            "(nsys export --type sqlite REPORT.nsys-rep)"
        )
    if len(head) < 100:
        raise ExportError(f"{path} is truncated ({len(head)} bytes): export it again from the .nsys-rep")
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(head[28:32], "big")
    header_valid = head[24:28] == head[92:96]
    size = path.stat().st_size
    if header_valid and pages and size < pages * page_size:
        raise ExportError(
            f"{path} is truncated ({size:,} of {pages * page_size:,} bytes): "
            "export it again from the .nsys-rep"
        )


def open_nsys(path: str | Path) -> NsysReader:
    """Open `path` (an nsys SQLite export) read-only, or raise ExportError saying what is wrong. Where
    SQLite would have to write to read it (a log without its index, a rollback journal left by a writer
    that stopped: analysis.readers.sqlite_files), it reads a private copy of the file and what lies beside
    it, and the user's files stay as they are."""
    from sqlalchemy import exc

    path = Path(path)
    check_header(path)
    return_freed_buffers()
    how = sqlite_files.opening(path)
    try:
        if how.mode != "copy":
            try:
                return _open(path, sqlite_files.uri(path, how.mode))
            except exc.DBAPIError as e:
                if not (sqlite_files.must_write(e.orig) and sqlite_files.beside(path)):
                    raise sqlite_error(path, e.orig) from None
        try:
            source, folder = sqlite_files.private_copy(path)
        except OSError as e:
            with_it = ", ".join(sqlite_files.beside(path))
            raise ExportError(
                f"cannot read {path}: SQLite needs what lies beside it ({with_it}) to read it, which is "
                f"read from a private copy, and copying failed ({e.strerror or e}); free space in "
                f"{tempfile.gettempdir()} or set TMPDIR"
            ) from None
        try:
            return _open(path, sqlite_files.uri(source, "rw"), folder)
        except BaseException:
            sqlite_files.remove_copy(folder)
            raise
    except exc.DBAPIError as e:
        raise sqlite_error(path, e.orig) from None


def _text(raw: bytes) -> str:
    """A TEXT value as str. nsys keeps what the program printed (ProcessStreams) in StringIds as it came,
    which need not be UTF-8: such bytes read as U+FFFD, and the rest of the export stays readable."""
    return raw.decode("utf-8", "replace")


def _open(path: Path, uri: str, folder: Path | None = None) -> NsysReader:
    """The reader of `path` through `uri` (`folder`: its private copy's, removed on close). Raises
    SQLAlchemy's DBAPIError where SQLite refuses."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.pool import QueuePool

    def connect() -> sqlite3.Connection:
        con = sqlite3.connect(uri, uri=True, check_same_thread=False)
        con.text_factory = _text
        return con

    # a small pool, not one shared connection: scan() reads chunks on several threads at once
    engine = create_engine("sqlite://", creator=connect, poolclass=QueuePool, pool_size=SCAN_THREADS)
    try:
        with engine.connect() as conn:
            tables = {r[0] for r in conn.execute(text("SELECT name FROM sqlite_master WHERE type = 'table'"))}
        if "StringIds" not in tables and not tables & set(META_TABLES):
            raise ExportError(
                f"{path} is an SQLite database but not an Nsight Systems export (no StringIds table)"
            )
        return NsysReader(path, engine, tables, folder)
    except BaseException:
        engine.dispose()
        raise
