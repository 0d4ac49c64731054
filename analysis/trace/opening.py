"""Opening a profile for analysis: an nsys SQLite export or a Chrome/Kineto trace, told apart by its first
bytes, as a `Trace`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from analysis import readers
from analysis.errors import ExportError
from analysis.readers import A_REPORT, BOM, REPORT_SUFFIXES, sqlite_files
from analysis.trace.trace import Trace

# compressions a trace or export may be kept in, not read (a trace is read gzipped, as torch writes it)
PACKED = ((b"BZh", "bzip2"), (b"\xfd7zXZ\x00", "xz"), (b"\x28\xb5\x2f\xfd", "zstd"))


def open_trace(path: str | Path, *, cache: bool = True) -> Trace:
    """Open a profile for analysis: an Nsight Systems SQLite export, or a Chrome/Kineto trace (`.json`,
    `.json.gz`, as torch.profiler writes it), told apart by their first bytes. Raises ExportError saying
    what is wrong. With `cache`, frames come from and go to the Parquet cache (analysis.trace.cache)."""
    path = Path(path)
    if not path.exists():
        raise ExportError(f"no such export: {path}")
    if path.is_dir():
        raise ExportError(f"{path} is a folder: pass the .sqlite export or the .json(.gz) trace inside it")
    not_a_file(path)
    if path.suffix in REPORT_SUFFIXES:
        raise ExportError(f"{path} {A_REPORT}")
    _refuse_what_is_no_trace(path)
    if _looks_like_json(path):
        return Trace(path, _open_kineto, readers.KINETO_VERSION, cache=cache)
    # an export whose write-ahead log holds changes: its content is file and log, and the log changes
    # without the file, so the file's identity does not name it
    why = sqlite_files.not_cached_why(path) if cache else None
    trace = Trace(path, _open_nsys, readers.NSYS_VERSION, cache=cache and why is None)
    if why is not None:
        trace.note(why)
    return trace


def require_events(trace: Trace) -> None:
    """Raise ExportError, saying once what the file is and what to give, where its list holds no event (a
    memory timeline, torch.profiler's export_memory_timeline): for a command that reads every table of a
    capture (advice, the summary, a page, a diff), where each table's own refusal would say it again."""
    if not_events := trace.meta.get("not_events"):
        raise ExportError(f"no events in {trace.path}: {not_events}")


def not_a_file(path: Path) -> None:
    """Raise ExportError unless `path` is a regular file (after links): a named pipe, a device or a socket
    would be used up by the first look at it (and a second open of a pipe waits for a writer for ever)."""
    import stat

    try:
        mode = path.stat().st_mode
    except OSError as e:
        raise ExportError(f"cannot read {path}: {e.strerror}") from None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return
    what = "a named pipe" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
    raise ExportError(
        f"{path} is {what}, not a file: an export or trace is read more than once (its type, the cache's "
        "key, then its rows), so save it to a file first (e.g. `cat … > trace.json`) and pass that"
    )


def _refuse_what_is_no_trace(path: Path) -> None:
    """Raise ExportError naming the file where its first bytes say it is a Python pickle (a CUDA memory
    snapshot, torch.cuda.memory._dump_snapshot, names its `segments` first) or an HTML page (torch.profiler's
    memory timeline, export_memory_timeline to .html): neither an export nor a trace. Nothing is unpickled."""
    head = sqlite_files.read_head(path, 256)
    page = head.removeprefix(BOM).lstrip().lower()
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        what = "a Python pickle"
        if b"segments" in head or b"device_traces" in head:
            what = "a CUDA memory snapshot (torch.cuda.memory._dump_snapshot: https://pytorch.org/memory_viz)"
    elif packed := next((name for magic, name in PACKED if head.startswith(magic)), None):
        raise ExportError(
            f"{path} is compressed with {packed}, which is not read: decompress it and pass the .sqlite "
            "export or the .json trace (a trace may stay gzipped: .json.gz)"
        )
    elif head.startswith(b"PK\x03\x04"):
        raise ExportError(f"{path} is a zip archive: extract the export or trace in it and pass that")
    elif head.startswith(b"\x1f\x8b") and _gunzipped_head(path).startswith(sqlite_files.MAGIC):
        raise ExportError(
            f"{path} is a gzipped SQLite export: an export is read in place, not decompressed; gunzip it "
            "and pass the .sqlite"
        )
    elif page.startswith((b"<html", b"<!doctype html")):
        what = "an HTML page"
        if b"memory timeline" in page:
            what = "a memory timeline page (torch.profiler's export_memory_timeline)"
    else:
        return
    raise ExportError(f"{path} is {what}, not a trace: {readers.GIVE_A_TRACE}")


def _gunzipped_head(path: Path) -> bytes:
    """The first bytes of the gzipped file `path`, decompressed; none where they cannot be read."""
    import gzip
    import zlib

    try:
        with gzip.open(path, "rb") as f:
            return f.read(len(sqlite_files.MAGIC))
    except (OSError, EOFError, zlib.error):
        return b""


def _open_kineto(path: Path) -> Any:
    """The Kineto reader, opened when the source is read."""
    # imported here: it imports pandas and isal, which an nsys export or a warm command never needs
    from analysis.readers import kineto

    return kineto.open_kineto(path)


def _open_nsys(path: Path) -> Any:
    """The nsys reader, opened when the source is read."""
    # imported here: the reader (sqlite3, its scans) is not needed by a warm command served from the cache
    from analysis.readers import nsys_open

    return nsys_open.open_nsys(path)


def _looks_like_json(path: Path) -> bool:
    """Not SQLite, and gzip, or JSON's first byte, or named like a trace (.json, .json.gz)."""
    head = sqlite_files.read_head(path, 64)
    if head.startswith(sqlite_files.MAGIC):
        return False
    if head.startswith(b"\x1f\x8b") or head.removeprefix(BOM).lstrip()[:1] in (b"{", b"["):
        return True
    if head.startswith((b"\xff\xfe", b"\xfe\xff", b"\x00\x00\xfe\xff")):  # UTF-16/32 text: the reader says so
        return True
    return path.name.endswith((".json", ".json.gz"))
