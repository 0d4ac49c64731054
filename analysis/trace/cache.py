"""A Parquet cache of trace frames, so that an export is read from its source once.

An entry is a folder under the cache root named by a hash of the source's resolved path (its first 16
hex digits: all entries of one source start alike) and a hash of the source's identity and the reader's
version. The identity is the source's resolved path, device and inode, size, mtime and ctime, and a
sampled content digest (`content_digest`: the whole file up to 256 KiB, else its first and last 64 KiB and
16 blocks of 4 KiB spread between). The ctime is what makes the key complete: every write to a file sets
it to the current time, and unlike the mtime no program can put it back (`os.utime` sets it too), so a
file changed in any place, with its size and mtime put back, gets a new key. One case is left: two
changes within one tick of the file system's clock (a few ms; a second on some) share a ctime. So a source
whose ctime is less than RACY_NS old when its key is taken is "racy" (git's word for the same problem):
its entry also holds a hash of the whole file, checked on every use until the source is no longer racy,
and then dropped (`whole_digest`; its cost: docs/performance.md). A changed export or a newer reader gets
a new entry, and the old one is removed when the new one is made. An SQLite export whose write-ahead log
holds changes is not cached at all (analysis.readers.sqlite_files).

Inside an entry: `meta.json` (what the reader said about the source: producer, schema,
row counts) and one Parquet file per frame column (`kernels.start.parquet`), so a command reads only the
columns it needs and a later command adds the columns it needs next.

The cache folder holds only what the cache wrote: it is marked as the cache's with a CACHEDIR.TAG (the
cache directory tagging convention, which backup tools honour), and a folder that holds other files is
refused (`ForeignCacheFolder`) before anything is written or removed in it: HARNESS_CACHE_DIR naming a
user's folder must not cost them a file. A folder from before the tag that holds only what the cache
writes is tagged and used.

Safety: every file is written under a temporary name and renamed into place, so a killed command leaves
no half file and two commands filling the same entry at once write the same bytes. A file that cannot be
read is deleted and read again from the source. Nothing is ever written beside or into the source.
The entries are kept under a size limit (default 5 GB), least recently used first out: a process adds
what it writes to the size it found at its last scan of the folder, and scans (and evicts) again when that
passes the limit or it wrote an eighth of the room left. An entry's name starts with a hash of its source's
path alone, so the entries of a source's versions before are found in one listing of the folder: with
1,024 exports read in one command, reading every entry's meta per write made the time quadratic.

A report (.nsys-rep) is read through its SQLite export, made once into the folder's EXPORTS
(analysis.trace.exports): each export is an item of the cache as an entry is, listed by its report, counted
under the limit and evicted least recently used first (its last use: its report note's mtime, as the
export's own times are part of its entries' keys), never while this process may still open it.

Every file of an entry holds its source's digest (`Entry.digest`, the hash that names the entry): a
Parquet file in its key-value metadata (SOURCE_KEY), meta.json and each kept table (analysis.trace.results)
as a field. An entry is checked when it is opened: a Parquet file without this source's digest (copied in
from another export's entry, or damaged) is deleted, with a note, and its columns read again from the
source; the check reads each file's footer alone, so a warm command needs no pyarrow for it. An entry's
folder that is a symbolic link, not a folder, or another user's is refused (`refusal`): nothing there is
followed, read, written or removed, and the source is read without the cache, with a note; `harness cache
--clear` says it did not remove it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import time
from dataclasses import dataclass
from decimal import Decimal, localcontext
from pathlib import Path

from analysis.errors import AnalysisError, OptionsError
from analysis.trace.cache_entry import Entry
from analysis.trace.cache_files import (
    META,
    SOURCE_PREFIX,
    Cleared,
    contents,
    filled_meanwhile,
    mtime_of,
    read_json,
    refusal,
    remove_tree,
    size_of,
    tree_size,
    write_atomic,
)
from analysis.trace.digests import content_digest, whole_digest

DEFAULT_LIMIT = 5 * 1000**3
CONFIG = "config.json"
LIMIT_ENV = "HARNESS_CACHE_LIMIT"
RACY_NS = 2 * 10**9  # a source changed less than this before its key was taken is checked by content too
TAG = "CACHEDIR.TAG"
TAG_TEXT = (
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This file is a cache directory tag created by harness (its trace cache).\n"
    "# For information about cache directory tags, see https://bford.info/cachedir/\n"
)
ENTRY_NAME = re.compile(r"[0-9a-f]{32}")
EXPORTS = "exports"  # reports exported to SQLite (analysis.trace.exports)
REPORT_NOTE = ".report.json"  # beside an export in EXPORTS (KEY.report.json): the report it was made of
REPORT_EXPORT = "report export"  # the format of a report's export listed as an entry (Cache.exports)
LOW_WATER = 0.9  # eviction goes down to this share of the limit
ENTRY_FORMAT = 2  # in every entry's key: entries made before files held their source's digest are not used
_SIZES: dict[str, tuple[int, int]] = {}  # cache root -> (its size at this process's last scan, written since)
_PINNED: set[Path] = set()  # the exports this process read through: not evicted while it may still open them


def cache_root() -> Path:
    """HARNESS_CACHE_DIR (set empty: unset), or the platform's cache folder for harness. One of spaces alone
    is refused: it made a folder of that name in the current folder."""
    env = os.environ.get("HARNESS_CACHE_DIR")
    if env and not env.strip():
        raise OptionsError(f"HARNESS_CACHE_DIR={env!r} is blank: give a folder, or unset it for the default")
    if env and any(ord(c) < 32 or ord(c) == 127 for c in env):  # a line read with its end made that folder
        raise OptionsError(
            f"HARNESS_CACHE_DIR={env!r} holds a control character (a line end read with the value?): give "
            "the folder alone"
        )
    if env:  # `~/cache` quoted in the shell reaches here unexpanded: it made a folder named ~ here
        return Path(env).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("harness")) / "traces"


MAX_SIZE = 2**63 - 1  # bytes: the largest file size a file system counts (a signed 64-bit offset)
_SIZE = re.compile(r"(\d+\.?\d*|\.\d+)(e[+-]?\d+)?([a-z]*)", re.ASCII)  # \d takes '٣' else


def parse_size(text: str) -> int:
    """'5GB', '500 MB', '1.5GiB', '1000000' -> bytes, exactly (no float rounds a large one); a size past
    MAX_SIZE is refused."""
    units = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 1000**2, "mb": 1000**2,
             "mib": 1024**2, "g": 1000**3, "gb": 1000**3, "gib": 1024**3, "t": 1000**4, "tb": 1000**4,
             "tib": 1024**4}  # fmt: skip
    found = _SIZE.fullmatch(text.strip().lower().replace(" ", ""))
    if found is None or found[3] not in units:
        raise ValueError(f"not a size: {text!r} (e.g. 5GB, 500MB)")
    number = Decimal(found[1] + (found[2] or ""))  # exact, as written
    too_large = ValueError(
        f"too large a size: {text!r} is past {MAX_SIZE:,} bytes, the most a file system counts"
    )
    if number > MAX_SIZE:  # before multiplying: 1e999999999 is not worked out
        raise too_large
    with localcontext() as exact:  # the product's digits, all kept: it is rounded down to whole bytes
        exact.prec = len(number.as_tuple().digits) + 20
        value = int(number * units[found[3]])
    if value > MAX_SIZE:
        raise too_large
    return value


@dataclass
class EntryInfo:
    """One cache entry as `harness cache` lists it."""

    key: str
    source: str
    format: str
    size_bytes: int
    files: int
    last_used: float
    source_exists: bool


class ForeignCacheFolder(AnalysisError):
    """The cache folder holds files the cache did not write: nothing is written or removed in it."""

    def __init__(self, root: Path, found: list[str]) -> None:
        shown = ", ".join(found[:3]) + (f" and {len(found) - 3:,} more" if len(found) > 3 else "")
        super().__init__(
            f"the cache folder {root} holds files the trace cache did not write ({shown}), so it is not "
            "used: set HARNESS_CACHE_DIR to a new or empty folder (the cache marks its own with "
            f"{TAG})"
        )
        self.root = root


class Cache:
    """The cache folder: entries, their size limit, eviction."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root if root is not None else cache_root()

    @property
    def limit(self) -> int:
        env = os.environ.get(LIMIT_ENV)
        if env:
            try:
                return parse_size(env)
            except ValueError:
                raise OptionsError(
                    f"{LIMIT_ENV}={env!r} is not a size (e.g. 5GB, 500MB; 0 caches nothing): fix or unset it"
                ) from None
        with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
            return int(json.loads((self.root / CONFIG).read_text())["limit_bytes"])
        return DEFAULT_LIMIT

    def set_limit(self, limit: int) -> None:
        self.claim()
        write_atomic(self.root / CONFIG, json.dumps({"limit_bytes": int(limit)}).encode())

    def check(self) -> None:
        """Raise ForeignCacheFolder when the folder exists and holds files the cache did not write (an
        untagged folder holding only what the cache writes is the cache's, from before the tag). Writes
        nothing."""
        try:
            if (self.root / TAG).read_text(errors="replace").startswith(TAG_TEXT.splitlines()[0]):
                return
        except OSError:
            pass
        try:
            names = sorted(os.listdir(self.root))
        except OSError:  # not there (made when needed), or not a folder (making it fails, saying why)
            return
        foreign = [n for n in names if not self._ours(n)]
        if foreign:
            raise ForeignCacheFolder(self.root, foreign)

    def _ours(self, name: str) -> bool:
        """Whether `name` in an untagged folder is something the cache writes."""
        path = self.root / name
        if name.startswith(".tmp-") or name == TAG:
            return True
        if name == CONFIG:
            data = read_json(path)
            return data is not None and set(data) <= {"limit_bytes"}
        if name == EXPORTS:
            return path.is_dir()
        if ENTRY_NAME.fullmatch(name) and refusal(path) is None and path.is_dir():  # no link followed
            return all(
                f.name.startswith(".tmp-") or f.name in (META, TAG) or f.name.endswith((".parquet", ".json"))
                for f in path.iterdir()
            )
        return False

    def claim(self) -> None:
        """Make the folder (and its parents) if needed and mark it as the cache's, or raise
        ForeignCacheFolder (or OSError: it cannot be made or written)."""
        self.check()
        self.root.mkdir(parents=True, exist_ok=True)
        if not (self.root / TAG).is_file():
            write_atomic(self.root / TAG, TAG_TEXT.encode())

    def entry(self, source: Path, reader_version: str) -> Entry:
        """The entry of `source` as it is now (see the module's docstring for what names it)."""
        st = source.stat()
        taken = time.time_ns()
        resolved = str(source.resolve())
        digest = content_digest(source, st.st_size)
        stamp = f"{st.st_dev}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}"
        identity = f"{resolved}\0{stamp}\0{digest}\0{reader_version}\0{ENTRY_FORMAT}"
        key = hashlib.sha256(identity.encode(errors="surrogateescape"))  # a file name need not be UTF-8
        racy = taken - max(st.st_ctime_ns, st.st_mtime_ns) < RACY_NS
        whole = whole_digest(source) if racy else None
        name = source_prefix(resolved) + key.hexdigest()[: 32 - SOURCE_PREFIX]
        return Entry(
            self, self.root / name, resolved, st.st_size, st.st_mtime_ns, whole, digest=key.hexdigest()
        )

    def entries(self) -> list[EntryInfo]:
        out: list[EntryInfo] = []
        if not self.root.is_dir():
            return out
        self.check()
        for folder in self.root.iterdir():
            # only what names an entry: a folder of 32 hex digits, the user's own (a link is not followed),
            # whose meta.json names its source
            ours = ENTRY_NAME.fullmatch(folder.name) and refusal(folder) is None
            meta = read_json(folder / META) if ours else None
            if meta is None or "source" not in meta:
                continue
            files = [f for f in folder.iterdir() if f.is_file()]
            out.append(
                EntryInfo(
                    key=folder.name,
                    source=str(meta.get("source", "?")),
                    format=str(meta.get("format", "?")),
                    size_bytes=sum(size_of(f) for f in files),
                    files=len(files),
                    last_used=mtime_of(folder / META),
                    source_exists=Path(str(meta.get("source", ""))).exists(),
                )
            )
        return sorted(out, key=lambda e: e.last_used, reverse=True)

    def exports(self) -> list[EntryInfo]:
        """The reports' SQLite exports kept in EXPORTS, as entries: `source` the report each was made of
        (its REPORT_NOTE), `key` its path under the cache folder; most recently used first."""
        folder = self.root / EXPORTS
        if refusal(folder) is not None or not folder.is_dir():
            return []
        out: list[EntryInfo] = []
        for path in folder.iterdir():
            if path.name.startswith(".") or path.suffix != ".sqlite" or not path.is_file():
                continue
            note = export_note(path)
            report = (read_json(note) or {}).get("report")
            out.append(
                EntryInfo(
                    key=f"{EXPORTS}/{path.name}",
                    source=str(report) if report else "?",
                    format=REPORT_EXPORT,
                    size_bytes=size_of(path) + size_of(note),
                    files=1 + note.is_file(),
                    last_used=max(mtime_of(path), mtime_of(note)),
                    source_exists=bool(report) and Path(str(report)).exists(),
                )
            )
        return sorted(out, key=lambda e: e.last_used, reverse=True)

    def clear(self, source: Path | None = None) -> Cleared:
        """Remove every entry (or those of `source`): what was removed, and what was not and why (a folder
        that cannot be written; a link or another user's folder in an entry's place, left as it is). An
        entry another command wrote into as it was removed (one it was filling) is removed all the same, all
        it held gone, and its folder, holding what that command wrote since, is `filled`."""
        out = Cleared()
        wanted = str(source.resolve()) if source is not None else None
        self.check()
        for info in self.entries():
            if wanted is None or info.source == wanted:
                folder = self.root / info.key
                before = contents(folder)
                why = remove_tree(folder)
                if why is None:
                    out.removed += 1
                    out.freed += info.size_bytes
                elif filled_meanwhile(folder, before):  # another command wrote into it as it went
                    out.removed += 1
                    out.freed += sum(before.values())
                    out.filled.append(folder)
                else:
                    out.freed += info.size_bytes - tree_size(folder)
                    out.kept.append((folder, why))
        prefix = source_prefix(wanted) if wanted is not None else ""
        for name in self._names():
            folder = self.root / name
            if ENTRY_NAME.fullmatch(name) and name.startswith(prefix) and (why := refusal(folder)):
                out.kept.append((folder, f"{why}, not a folder the cache made: left as it is"))
        return out

    def _names(self) -> list[str]:
        try:
            return sorted(os.listdir(self.root))
        except OSError:
            return []

    def evict(self, keep: Path | None = None) -> int:
        """Remove least recently used entries and exports until the cache fits its limit, down to LOW_WATER
        of it (so that a full cache is not scanned again at the next write): bytes freed. An export goes
        with its entries; one this process read through (`pin`) stays."""
        items = sorted(self.entries() + self.exports(), key=lambda e: e.last_used)  # oldest first
        total = sum(e.size_bytes for e in items)
        freed = 0
        gone: set[str] = set()
        if total > self.limit:
            for info in items:
                if total <= self.limit * LOW_WATER:
                    break
                path = self.root / info.key
                if info.key in gone or path == keep or path in _PINNED:
                    continue
                if info.format == REPORT_EXPORT:
                    lost = self._remove_export(path, items, gone)
                else:
                    lost = _removed(path, info.size_bytes)
                gone.add(info.key)
                total -= lost
                freed += lost
        _SIZES[str(self.root)] = (total, 0)
        return freed

    def _remove_export(self, path: Path, items: list[EntryInfo], gone: set[str]) -> int:
        """Remove an export, its report note and the entries read of it (those not `gone` yet, then added
        to it): bytes freed."""
        freed = remove_export(path).freed
        resolved = str(path.resolve())
        for other in items:
            if other.source == resolved and other.key not in gone and other.format != REPORT_EXPORT:
                freed += _removed(self.root / other.key, other.size_bytes)
                gone.add(other.key)
        return freed

    def wrote(self, written: int, keep: Path | None = None) -> None:
        """`written` bytes were added: evict when the cache may have passed its limit. The size is the one
        this process found at its last scan plus what it wrote since (a scan stats every file of every
        entry: one per write made 1,024 exports read in one command quadratic in time); it scans again
        when that passes the limit, or when it wrote an eighth of the room left at that scan (other
        processes fill the same room)."""
        root = str(self.root)
        last = _SIZES.get(root)
        if last is not None:
            found, since = last
            room = self.limit - found
            if found + since + written <= self.limit and since + written <= room / 8:
                _SIZES[root] = (found, since + written)
                return
        self.evict(keep=keep)


def _removed(folder: Path, size: int) -> int:
    """Remove an entry's folder of `size` bytes: the bytes freed (all, or what went before an error)."""
    return size if remove_tree(folder) is None else size - tree_size(folder)


def pin(export: Path) -> None:
    """`export` (in EXPORTS) is read through by this process: evictions of this process leave it."""
    _PINNED.add(export)


def export_note(export: Path) -> Path:
    """The file beside an export in EXPORTS that names its report (REPORT_NOTE)."""
    return export.with_name(export.stem + REPORT_NOTE)


def remove_export(export: Path) -> Cleared:
    """Remove a report's export in EXPORTS and its report note (not the entries read of it): the bytes
    freed, and each file that would not go, with why."""
    out = Cleared()
    for file in (export, export_note(export)):
        size = size_of(file)
        try:
            file.unlink(missing_ok=True)
            out.freed += size
        except OSError as e:
            out.kept.append((file, e.strerror or type(e).__name__))
    return out


def source_prefix(resolved: str) -> str:
    """The start of the names of a source's entries (and of a report's exports): a hash of its resolved
    path alone."""
    return hashlib.sha256(resolved.encode(errors="surrogateescape")).hexdigest()[:SOURCE_PREFIX]
