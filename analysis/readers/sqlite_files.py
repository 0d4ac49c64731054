"""How an SQLite export is opened so that it is read as it is and nothing is written beside it.

SQLite keeps a database's changes in files beside it: a rollback journal (`X-journal`) while a writer
works, and in WAL mode (`PRAGMA journal_mode=wal`) a write-ahead log (`X-wal`) holding committed
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
  a read-only folder is no obstacle). Such an export is read without the trace cache: its content is
  file plus log, and the log changes without the file (`analysis.trace`).

This module imports only the standard library: the warm path (analysis.results) asks it whether an
export can be served from the cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

MAGIC = b"SQLite format 3\x00"
WAL_VERSION = 2  # header bytes 18 and 19 (write and read format versions) of a WAL-mode database


@dataclass(frozen=True)
class Opening:
    """How to open one export: `mode` "ro", "immutable" or "copy" (read from a private copy of the file
    and its log), and the bytes of committed changes its `-wal` holds (0: none)."""

    mode: str
    pending: int = 0


def wal_of(path: Path) -> Path:
    return path.with_name(path.name + "-wal")


def shm_of(path: Path) -> Path:
    return path.with_name(path.name + "-shm")


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
    """The SQLite URI that opens `path` read-only (`mode` "ro" or "immutable")."""
    extra = "&immutable=1" if mode == "immutable" else ""
    return f"file:{quote(str(path.resolve()))}?mode=ro{extra}"


def private_copy(path: Path) -> tuple[Path, Path]:
    """`path` and its `-wal` copied into a new temporary folder: (the copy, the folder). The caller removes
    the folder. Raises OSError (no space, say) having removed it."""
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="harness-wal-"))
    try:
        copy = folder / "export.sqlite"
        shutil.copyfile(path, copy)
        shutil.copyfile(wal_of(path), wal_of(copy))
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return copy, folder


def not_cached_why(path: Path) -> str | None:
    """Why `path` is read without the trace cache (a note), or None when the cache may serve it."""
    size = pending(path)
    if not size:
        return None
    return (
        f"{path} has {size:,} bytes of changes in {wal_of(path).name} that are not in the file itself "
        "(SQLite's WAL mode): read with them, without the trace cache"
    )
