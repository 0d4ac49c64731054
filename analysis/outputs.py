"""Where a file the harness writes (a page, a Chrome trace, a CSV) goes, and how it gets there.

- A regular file, or a name that is not there yet, is written under a temporary name beside it and renamed
  into place: a full disk or a killed command leaves the old file whole, never half of a new one. A
  symbolic link is followed: the file it names is replaced, the link stays a link.
- `-` (or `/dev/stdout`) is standard output, and `/dev/stderr` or `/dev/fd/N` the descriptor it names:
  written through the descriptor (a file it is redirected into is written where it points, never
  replaced). A character device (`/dev/null`, a terminal), a named pipe or a socket that is already there
  is opened and written as a stream. A rename would put a regular file in its place: the
  device would be gone and the pipe's reader would get nothing.
- A folder or a block device is refused, and so is a name that ends in a slash (it names a folder: a Path
  made of it drops the slash, and the file would take the folder's name), and any file the command reads
  (`refuse_inputs`): the same file by device and inode, whatever its name (a link, `./x`, another
  spelling), and the journal files SQLite keeps beside an export. Writing over an input would lose it.
- The folders a file goes in are created where missing (`-o pages/today/d.html`, as `mkdir -p`), by every
  command alike; where one cannot be (a file stands in its place, no permission), the command stops in one
  line naming the part that is in the way.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from analysis.errors import AnalysisError

STDOUT = "-"
SQLITE_SIDECARS = ("-wal", "-shm", "-journal")


class OutputRefused(AnalysisError):
    """A target that cannot be written without losing something (an input, a folder, a disk)."""

    exit_code = 2


# the names of the command's own open files: written to the descriptor, never opened again by name, which
# would replace a file one is redirected into (`-o /dev/stdout >> log`, `-o /dev/fd/3 3>> log`)
_DESCRIPTORS = {STDOUT: 1, "/dev/stdout": 1, "/dev/stderr": 2}
_DESCRIPTOR = re.compile(r"/(?:dev|proc/self)/fd/([0-9]{1,9})")


def descriptor_of(target: str | Path) -> int | None:
    """The descriptor `target` names (`-` and `/dev/stdout`: 1, `/dev/fd/3`: 3), None for any other name."""
    text = os.fspath(target)
    if text in _DESCRIPTORS:
        return _DESCRIPTORS[text]
    named = _DESCRIPTOR.fullmatch(text)
    return int(named.group(1)) if named else None


def is_stdout(target: str | Path) -> bool:
    """Whether `target` is standard output: `-`, or a name of it (`/dev/stdout`, `/dev/fd/1`)."""
    return descriptor_of(target) == 1


def shown(target: str | Path) -> str:
    """How a target is named in messages."""
    return "standard output" if is_stdout(target) else str(target)


def refuse_folder_name(given: str | Path, option: str | None = None) -> None:
    """OutputRefused when `given`, as the user typed it, ends in a slash: it names a folder, there or not.
    Check the text before it becomes a Path, which drops the slash."""
    text = os.fspath(given)
    if not text.endswith(("/", os.sep)) or is_stdout(text):
        return
    named = f"{option} {text}" if option else text
    raise OutputRefused(f"{named} ends in a slash, naming a folder: give a file name (in it, e.g. {text}out)")


def _stat(path: str | Path) -> os.stat_result | None:
    try:
        return os.stat(path)
    except (OSError, ValueError):
        return None


def is_stream(target: str | Path) -> bool:
    """Whether `target` is written as a stream: `-`, a name of an open descriptor (`/dev/fd/3`), or a
    character device, pipe or socket already there."""
    if descriptor_of(target) is not None:
        return True
    st = _stat(target)
    return st is not None and (
        stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode) or stat.S_ISSOCK(st.st_mode)
    )


def files_read(paths: Iterable[str | Path | None]) -> list[Path]:
    """`paths` (None left out) and, for SQLite files, the journal files beside them that are there."""
    out: list[Path] = []
    for p in paths:
        if p is None or str(p) == "":
            continue
        path = Path(p)
        out.append(path)
        if not path.name:  # `.`, `/` (or an empty argument, which is `.`): a folder, no journal beside it
            continue
        # _stat, not exists(): a journal in a folder this user cannot search is not said there; opening
        # the file itself says why it cannot be read
        out += [s for s in (path.with_name(path.name + x) for x in SQLITE_SIDECARS) if _stat(s) is not None]
    return out


def refuse_inputs(target: str | Path, inputs: Iterable[str | Path | None], option: str) -> None:
    """OutputRefused when `target` (given as `option`) is a folder, a block device, or the same file as
    one of `inputs` (or a SQLite journal beside one)."""
    if is_stdout(target):
        return
    inputs = [p for p in inputs if p is not None and str(p) != ""]
    real = os.path.realpath(target)
    for p in inputs:  # the journal SQLite would take for the export's own, there or not
        if real in {os.path.realpath(p) + x for x in SQLITE_SIDECARS}:
            raise OutputRefused(
                f"{option} {target} is where SQLite keeps the journal of {p}, which this command reads: "
                "writing it would damage that export; give another file name"
            )
    st = _stat(target)
    if st is None:
        return  # nothing there yet (or not reachable: writing it will say why)
    if stat.S_ISDIR(st.st_mode):
        example = Path(target) / "out"
        raise OutputRefused(f"{option} {target} is a folder; give a file name (in it, e.g. {example})")
    if stat.S_ISBLK(st.st_mode):
        raise OutputRefused(f"{option} {target} is a block device (a disk): the harness writes no disks")
    if stat.S_ISCHR(st.st_mode):
        return  # /dev/null, a terminal: nothing of the inputs can be there
    for p in files_read(inputs):
        other = _stat(p)
        if other is not None and (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino):
            same = "" if os.path.abspath(p) == os.path.abspath(target) else f" ({p})"
            raise OutputRefused(
                f"{option} {target} is a file this command reads{same}: writing it would destroy it; "
                "give another file name"
            )


def refuse_streams_over(inputs: Iterable[str | Path | None]) -> None:
    """OutputRefused when standard output or error is redirected into one of `inputs` (`harness kernels
    x.sqlite >> x.sqlite`): what the command prints would be written into the file it reads. Standard
    error so redirected is first pointed elsewhere, that the error line does not land there either."""
    reads = files_read(p for p in inputs if p is not None and str(p) != "")
    found = []
    for fd, name in ((1, "standard output"), (2, "standard error")):
        try:
            st = os.fstat(fd)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        for p in reads:
            other = _stat(p)
            if other is not None and (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino):
                found.append((fd, name, p))
                break
    if not found:
        return
    if found[-1][0] == 2:
        _away_from(2)
    _, name, p = found[0]
    raise OutputRefused(
        f"{name} is redirected into {p}, which this command reads: what it prints would damage it; redirect "
        "it to another file"
    )


def _away_from(fd: int) -> None:
    """Point `fd` at standard output (or /dev/null when that is no better)."""
    with contextlib.suppress(OSError):
        if sys.stderr is not None:
            sys.stderr.flush()
    try:
        same = os.path.samestat(os.fstat(1), os.fstat(fd))
    except OSError:
        same = True
    if same:
        _point_at_null(fd)
        return
    target = os.dup(1)
    os.dup2(target, fd)
    os.close(target)


def _point_at_null(fd: int) -> None:
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)


def in_the_way(path: Path, error: OSError, *, folder: bool = True) -> str:
    """Why `path` could not be made (a folder; not `folder`: a file, the folders it goes in with it), in
    words, for every command of the harness and the analysis alike: "File exists" or "Not a directory" from
    mkdir mean a file stands where a folder must be, so name it; no permission where a folder is missing
    names the folder that could not be created; else the system's words ("Permission denied": a folder
    that is there, or a file, cannot be written)."""
    if error.errno in (errno.EEXIST, errno.ENOTDIR):
        for part in (path, *path.parents) if folder else path.parents:
            st = _stat(part)
            if st is not None and not stat.S_ISDIR(st.st_mode):
                return f"{part} is a file, not a folder"
    missing = path if folder else path.parent
    if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS) and _stat(missing) is None:
        while _stat(missing.parent) is None and missing.parent != missing:
            missing = missing.parent
        return f"no permission to create folder {missing} ({error.strerror})"
    return error.strerror or str(error)


def make_folders(folder: str | Path, target: str | Path | None = None) -> None:
    """Create `folder` and its missing parents (as `mkdir -p`), or OutputRefused in one line: "cannot write
    TARGET: WHY" (TARGET: the file to go in it, else the folder itself)."""
    path = Path(folder)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        named = target if target is not None else folder
        raise OutputRefused(f"cannot write {named}: {in_the_way(path, e)}") from None


def refuse_unmakeable(target: str | Path, *, folder: bool = False) -> None:
    """OutputRefused, before any work, when the folders `target` goes in (`folder`: `target` itself, a
    folder to write files in) could not be created: a file stands where one of them must be, or the
    deepest folder there is not writable. Nothing is created here: a command that fails later leaves no
    empty folder behind."""
    if is_stdout(target) or is_stream(target):
        return
    want = Path(target) if folder else Path(target).parent
    missing: Path | None = None
    for part in (want, *want.parents):
        st = _stat(part)
        if st is None:
            missing = part
            continue
        if not stat.S_ISDIR(st.st_mode):
            raise OutputRefused(f"cannot write {target}: {part} is a file, not a folder")
        if missing is not None and not os.access(part, os.W_OK | os.X_OK):
            raise OutputRefused(f"cannot write {target}: no permission to create folder {missing}")
        return


@contextlib.contextmanager
def open_output(target: str | Path) -> Iterator[IO[bytes]]:
    """A binary file to write `target` through (see the module's docstring): the rename happens when the
    block ends without an exception; any exception removes the temporary file. The target's missing
    folders are created first."""
    if is_stdout(target):
        out = sys.stdout
        if out is None:
            raise OSError(errno.EBADF, "standard output is closed")
        out.flush()
        try:
            yield out.buffer
            out.buffer.flush()
        except OSError:  # full, closed, a pipe whose reader left: the interpreter's last flush must not
            _point_at_null(1)  # fail again on what is still buffered
            raise
        return
    fd = descriptor_of(target)
    if fd is not None:  # the file as the command has it open (appended to where it was opened so)
        if fd == 2 and sys.stderr is not None:
            sys.stderr.flush()
        with os.fdopen(os.dup(fd), "wb") as f:
            yield f
        return
    if is_stream(target):
        with open(target, "wb") as f:
            yield f
        return
    refuse_folder_name(target)
    path = Path(os.path.realpath(target))  # a link: replace the file it names, keep the link
    st = _stat(path)
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise OutputRefused(f"{target} is neither a file nor a device or pipe; give a file name")
    make_folders(path.parent, target)
    import tempfile

    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, stat.S_IMODE(st.st_mode) if st is not None else 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def utf8_text(text: str) -> str:
    """`text` with what UTF-8 cannot hold (the lone surrogates of a file name whose bytes are not UTF-8:
    `run\\udcff.sqlite`) as escapes: as files are written, and as a table's string column takes it."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def write_text(target: str | Path, text: str) -> int:
    """`text` as UTF-8 to `target`, as open_output writes (`utf8_text`); the bytes written."""
    data = text.encode("utf-8", "backslashreplace")
    with open_output(target) as f:
        f.write(data)
    return len(data)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
