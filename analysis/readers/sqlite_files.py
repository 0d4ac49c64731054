"""How an SQLite export is opened so that it is read as it is and nothing is written beside it.

SQLite keeps a database's changes in files beside it: a rollback journal (`X-journal`) while a writer
works (left behind, "hot", by one that stopped mid-way: the file is then half-changed until the journal
is rolled back), and in WAL mode (`PRAGMA journal_mode=wal`) a write-ahead log (`X-wal`) holding committed
transactions that are not in the file yet, with its index (`X-shm`). A read-only connection (`mode=ro`) to
a WAL database creates `X-wal` and `X-shm` when they are not there and cannot remove them when it closes
(it may not checkpoint), so they stay beside the user's file; on a read-only folder it cannot create them
and fails ("unable to open database file"). `immutable=1` creates nothing but ignores the log: a committed
transaction in `X-wal` would be missed. So (`opening`):

- no log with content (no `X-wal`, or an empty one): the file holds every committed row. A WAL database
  is opened `immutable=1` (nothing created), unless `X-wal` and `X-shm` are both there (a connection has
  it open: `mode=ro` uses them and creates nothing); any other `mode=ro`, which takes SQLite's locks (a
  writer's exclusive lock, as `nsys export` holds while it writes, is then reported as such).
- a log with content (`pending`): with `X-shm` there, `mode=ro` reads file and log; without it, both are
  copied into a private temporary folder and read there (nothing is created beside the user's file, and
  a read-only folder is no obstacle).
- where `mode=ro` fails because SQLite would have to write to read (`must_write`: a hot journal to roll
  back, an index it cannot make), the file and what lies beside it are read from such a copy too.

An export whose log or journal holds something is read without the trace cache (`not_cached_why`): its
content is file plus log, and the log changes without the file (`analysis.trace.trace`).

This module imports only the standard library: the warm path (analysis.trace.results) asks it whether an
export can be served from the cache.
"""

from __future__ import annotations

import atexit
import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from analysis.errors import ExportError

MAGIC = b"SQLite format 3\x00"
WAL_VERSION = 2  # header bytes 18 and 19 (write and read format versions) of a WAL-mode database


@dataclass(frozen=True)
class Opening:
    """How to open one export: `mode` "ro", "immutable" or "copy" (read from a private copy of the file
    and its log), and the bytes of committed changes its `-wal` holds (0: none)."""

    mode: str
    pending: int = 0


def read_head(path: Path, size: int) -> bytes:
    """The first `size` bytes of `path` (fewer in a shorter file); ExportError where it cannot be read."""
    try:
        with path.open("rb") as f:
            return f.read(size)
    except OSError as e:
        raise ExportError(f"cannot read {path}: {e.strerror}") from None


def _beside(path: Path, suffix: str) -> Path:
    """The file SQLite keeps beside `path`: beside the file a link points to, as SQLite resolves it."""
    real = path.resolve()
    return real.with_name(real.name + suffix)


def wal_of(path: Path) -> Path:
    return _beside(path, "-wal")


def journal_of(path: Path) -> Path:
    return _beside(path, "-journal")


SIDECARS = ("-wal", "-journal")  # what SQLite reads beside a database (the index, -shm, it rebuilds)


def beside(path: Path) -> list[str]:
    """The names of the log and journal with content beside `path`."""
    return [_beside(path, s).name for s in SIDECARS if _size(_beside(path, s))]


def must_write(err: BaseException | None) -> bool:
    """Whether SQLite's error says it would have to write to read (SQLITE_READONLY: a hot journal to roll
    back, a WAL index to rebuild; SQLITE_CANTOPEN: a `-shm` it cannot make)."""
    code = getattr(err, "sqlite_errorcode", None)
    return isinstance(code, int) and code & 0xFF in (8, 14)


def shm_of(path: Path) -> Path:
    return _beside(path, "-shm")


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def is_wal_mode(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(20)
    except OSError:
        return False
    return head.startswith(MAGIC) and len(head) == 20 and WAL_VERSION in (head[18], head[19])


def pending(path: Path) -> int:
    """Bytes in `path`'s write-ahead log (`X-wal`): committed changes that are not in the file yet; 0
    when there is no log or it is empty."""
    return _size(wal_of(path)) or 0


def opening(path: Path) -> Opening:
    """How to open `path` (see the module's docstring)."""
    wal, shm = _size(wal_of(path)), _size(shm_of(path))
    if wal:
        return Opening("ro" if shm is not None else "copy", wal)
    if wal is not None or is_wal_mode(path):
        return Opening("ro" if wal is not None and shm is not None else "immutable")
    return Opening("ro")


def uri(path: Path, mode: str) -> str:
    """The SQLite URI that opens `path` with `mode` "ro", "immutable" (both read-only) or "rw" (a private
    copy only)."""
    query = {"ro": "mode=ro", "immutable": "mode=ro&immutable=1", "rw": "mode=rw"}[mode]
    return f"file:{quote(os.fsencode(path.resolve()))}?{query}"  # the name's bytes: it need not be UTF-8


_COPIES: dict[Path, int] = {}  # the private copies' folders not removed yet -> the process that made each


def private_copy(path: Path) -> tuple[Path, Path]:
    """`path` and its log or journal copied into a new temporary folder: (the copy, the folder). The caller
    removes the folder (`remove_copy`: the reader's close); one still there when the process ends (a
    command that never closed its reader, an error, Ctrl-C) is removed then, so no whole copy of an export
    outlives the command. Raises OSError (no space, say) having removed it."""
    import shutil
    import tempfile

    if not _COPIES:
        atexit.register(_remove_left)  # once per process: registering twice removes twice, harmlessly
    folder = Path(tempfile.mkdtemp(prefix="harness-export-"))
    _COPIES[folder] = os.getpid()
    try:
        copy = folder / "export.sqlite"
        shutil.copyfile(path, copy)
        for suffix in SIDECARS:
            with contextlib.suppress(FileNotFoundError):
                shutil.copyfile(_beside(path, suffix), copy.with_name(copy.name + suffix))
    except BaseException:
        remove_copy(folder)
        raise
    return copy, folder


def remove_copy(folder: Path) -> None:
    """Remove a folder `private_copy` made (gone already: nothing to do)."""
    import shutil

    shutil.rmtree(folder, ignore_errors=True)
    _COPIES.pop(folder, None)


def _remove_left() -> None:
    """At the process's exit: the copies it made and did not remove (a forked worker leaves its parent's)."""
    for folder, pid in list(_COPIES.items()):
        if pid == os.getpid():
            remove_copy(folder)


def not_cached_why(path: Path) -> str | None:
    """Why `path` is read without the trace cache (a note), or None when the cache may serve it."""
    size = pending(path)
    if size:
        return (
            f"{path} has {size:,} bytes of changes in {wal_of(path).name} that are not in the file itself "
            "(SQLite's WAL mode): read with them, without the trace cache"
        )
    size = _size(journal_of(path)) or 0
    if size:
        return (
            f"{path} has a rollback journal beside it ({journal_of(path).name}, {size:,} bytes): a program "
            "was writing it, or stopped while it did; read as SQLite rolls that back, without the trace cache"
        )
    return None
