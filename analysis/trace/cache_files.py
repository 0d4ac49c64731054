"""The files and folders of the trace cache (analysis.trace.cache), touched without following a link: an
entry's folder checked before use (`refusal`: a link, not a folder, another user's), removed saying what
could not be (`remove_tree`), files written whole (`write_atomic`), JSON read back or None."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

META = "meta.json"  # an entry's: what the reader said of its source, and the source's name, size, digest
SOURCE_PREFIX = 16  # an entry's name starts with this many hex digits of its source's path (`create`)
STALE_TMP_S = 3600  # temporary files older than this are from killed commands


@dataclass
class Cleared:
    """What `Cache.clear` did: entries removed and the bytes freed, and what it could not remove and why."""

    removed: int = 0
    freed: int = 0
    kept: list[tuple[Path, str]] = field(default_factory=list)
    # folders emptied of all they held, into which another command wrote as they were removed (an entry it
    # was filling): left holding only what it wrote; counted as removed, since nothing asked for is left
    filled: list[Path] = field(default_factory=list)

    def add(self, other: Cleared) -> None:
        """What `other` removed, freed and kept, counted in this one too."""
        self.removed, self.freed = self.removed + other.removed, self.freed + other.freed
        self.kept += other.kept
        self.filled += other.filled


def _user() -> int:
    return os.geteuid()


def refusal(folder: Path) -> str | None:
    """Why `folder`, in an entry's place, is not the cache's to use: it is a symbolic link (not followed),
    not a folder, or another user's; None when it is a folder of this user's, or not there. Looked at with
    lstat alone."""
    try:
        st = os.lstat(folder)
    except (FileNotFoundError, NotADirectoryError):  # not there (making it says why it cannot be)
        return None
    except OSError as e:
        return f"cannot be looked at ({e.strerror})"
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a folder"
    if st.st_uid != _user():
        return f"belongs to another user (uid {st.st_uid})"
    return None


def remove_tree(folder: Path) -> str | None:
    """Remove `folder` and what it holds, following no link: None when it is gone (or was not there), else
    why not (the first error; a link or another user's folder is left as it is, `refusal`)."""
    why = refusal(folder)
    if why is not None:
        return f"{why}: not removed"
    failed: list[str] = []

    def say(function: Any, path: str, error: Any) -> None:
        e = error[1] if isinstance(error, tuple) else error
        if not failed:
            why = getattr(e, "strerror", None) or e
            # the caller names `folder` itself: a file inside it is named here, the folder is not again
            failed.append(str(why) if os.fspath(path) == os.fspath(folder) else f"{path}: {why}")

    if sys.version_info >= (3, 12):
        shutil.rmtree(folder, onexc=say)
    else:
        shutil.rmtree(folder, onerror=say)
    if not os.path.lexists(folder):
        return None
    return failed[0] if failed else "still there"


def contents(folder: Path) -> dict[tuple[str, int, int], int]:
    """The files in `folder` (an entry has no sub-folders), each by name, inode and mtime, with its size:
    what tells them from files written there later under the same names; empty where it cannot be read."""
    out: dict[tuple[str, int, int], int] = {}
    with contextlib.suppress(OSError), os.scandir(folder) as found:
        for f in found:
            with contextlib.suppress(OSError):
                st = f.stat(follow_symlinks=False)
                out[(f.name, st.st_ino, st.st_mtime_ns)] = st.st_size
    return out


def filled_meanwhile(folder: Path, before: dict[tuple[str, int, int], int]) -> bool:
    """Whether `folder`, which a removal left, is still this user's folder and holds none of the files it
    held `before` the removal: all of those went, and what is there was written since (by a command filling
    it at the same moment)."""
    return refusal(folder) is None and folder.is_dir() and not contents(folder).keys() & before.keys()


def tree_size(folder: Path) -> int:
    """The bytes of the files in `folder` (its own files: an entry has no sub-folders)."""
    try:
        return sum(size_of(folder / name) for name in os.listdir(folder))
    except OSError:
        return 0


def write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}-{path.name}")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def size_of(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def mtime_of(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
