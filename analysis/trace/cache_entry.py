"""One entry of the trace cache (analysis.trace.cache): the frames of one source as Parquet files, one per
column, with the reader's meta and the tables kept of it (analysis.trace.results), every file holding the
source's digest; checked when it is opened, refused where its folder is not the cache's."""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from analysis.trace.cache_files import (
    META,
    SOURCE_PREFIX,
    STALE_TMP_S,
    mtime_of,
    read_json,
    refusal,
    remove_tree,
    size_of,
    write_atomic,
)
from analysis.trace.digests import holds_digest, whole_digest
from analysis.trace.parquet_columns import (
    SOURCE_KEY,
    ColumnWriter,
    _in_step,
    _int64_column,
    _malloc_pool,
    _named_or_flag,
    _other_column,
)

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

_unwritable_said: set[str] = set()  # the cache folders said not writable in this process


class EntryRefused(OSError):
    """An entry's folder that is not the cache's (`refusal`): the source is read without the cache."""


@dataclass(eq=False)
class Entry:
    """The cached frames of one source. `whole`: the hash of the whole source, taken with the key, where
    the source is racy (changed less than RACY_NS before); `digest`: the source's, held by every file of the
    entry (the key that names it; by default its folder's name). `notes`: what opening it found wrong."""

    cache: Any  # analysis.trace.cache.Cache: its claim, root and wrote
    folder: Path
    source: str
    size: int
    mtime_ns: int
    whole: str | None = None
    digest: str = field(default="", kw_only=True)
    notes: list[str] = field(default_factory=list, init=False)
    refused: str | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.digest = self.digest or self.folder.name
        self.refused = refusal(self.folder)

    def _refuse(self, why: str) -> str:
        self.refused = why
        text = (
            f"the cache entry {self.folder} {why}, not a folder the cache made: it is not used (nothing "
            f"there followed, written or removed), and {self.source} is read without the cache; remove it"
        )
        if text not in self.notes:
            self.notes.append(text)
        return text

    def meta(self) -> dict[str, Any] | None:
        """What the reader said of the source, as the entry keeps it; None where there is no entry yet, or
        it is refused, or it held another source's (then removed). Its Parquet files without this source's
        digest are deleted (their columns are read again), each said in `notes`."""
        if self.refused is not None:
            self._refuse(self.refused)
            return None
        meta = read_json(self.folder / META)
        if meta is None:
            return None
        theirs = (meta.get("source"), meta.get("size"), meta.get("digest"))
        if theirs != (self.source, self.size, self.digest):  # copied in, or edited: nothing of it is sure
            remove_tree(self.folder)
            self.notes.append(
                f"the cache entry of {self.source} held data not written for it (its {META} names "
                f"{str(theirs[0])[:200]}): it was removed, and the source is read again"
            )
            return None
        kept = meta.get("whole")
        if kept is not None:  # made while the source was racy: its content decides
            try:
                now = self.whole or whole_digest(Path(self.source))
            except OSError:
                return None
            if now != kept:  # changed within one tick of its ctime: the entry is stale
                remove_tree(self.folder)
                return None
            if self.whole is None:  # no longer racy: a change from now on gets a new ctime, a new key
                meta.pop("whole")
                with contextlib.suppress(OSError):
                    write_atomic(self.folder / META, json.dumps(meta).encode())
        self._check_files()
        with contextlib.suppress(OSError):
            os.utime(self.folder / META)  # the entry was used: least recently used goes first
        return meta

    def remember(self, key: str, value: Any) -> None:
        """Keep `value` in the entry's meta under `key`: what was read of the source beside its frames
        (capture health's facts), once; an entry not written yet is left as it is."""
        meta = read_json(self.folder / META)
        if meta is not None:
            write_atomic(self.folder / META, json.dumps({**meta, key: value}).encode())

    def unwritable(self, e: OSError) -> str | None:
        """What a command says when the entry would not take a write (`e`): that another command removed
        it meanwhile, or that the cache folder is not writable (said once per folder); None: said before."""
        if self.cache.root.is_dir() and not self.folder.is_dir():  # removed while this command filled it
            return (
                f"the cache entry of {Path(self.source).name} was removed while this command filled it (by "
                "another command, or `harness cache --clear`): nothing more was cached for it"
            )
        root = str(self.cache.root)
        if root in _unwritable_said:
            return None
        _unwritable_said.add(root)
        return f"cache folder {root} is not writable ({e.strerror or e}): nothing more was cached"

    def _check_files(self) -> None:
        """Delete the Parquet files that do not hold this source's digest, and say which."""
        try:
            names = [n for n in os.listdir(self.folder) if n.endswith(".parquet") and not n.startswith(".")]
        except OSError:
            return
        wrong = [n for n in sorted(names) if not holds_digest(self.folder / n, SOURCE_KEY, self.digest)]
        for name in wrong:
            with contextlib.suppress(OSError):
                (self.folder / name).unlink()
        if wrong:
            shown = ", ".join(wrong[:3]) + (f" and {len(wrong) - 3:,} more" if len(wrong) > 3 else "")
            self.notes.append(
                f"the cache entry of {self.source} held {len(wrong):,} file{'s' * (len(wrong) != 1)} not "
                f"written for it ({shown}: from another export's entry, or damaged): deleted, and what they "
                "held is read again from the source"
            )

    def create(self, meta: dict[str, Any]) -> None:
        """Start the entry with the reader's `meta`; remove the entries of older versions of the source:
        those whose name starts as this one's (`source_prefix`), found in one listing of the cache folder,
        not a read of every entry's meta (which made 1,024 exports read in one command quadratic in time).
        Raises ForeignCacheFolder where the cache folder is not the cache's, EntryRefused where the entry's
        folder is not (`refusal`)."""
        if self.refused is not None:
            raise EntryRefused(self._refuse(self.refused))
        self.cache.claim()
        prefix = self.folder.name[:SOURCE_PREFIX]
        with contextlib.suppress(OSError):
            for name in os.listdir(self.cache.root):
                older = self.cache.root / name
                if name.startswith(prefix) and name != self.folder.name and refusal(older) is None:
                    kept = read_json(older / META)
                    if kept is not None and kept.get("source") == self.source:
                        remove_tree(older)
        with contextlib.suppress(FileExistsError):
            self.folder.mkdir(parents=True)
        why = refusal(self.folder)  # made here, or there already: a link, a file, another user's
        if why is not None:
            raise EntryRefused(self._refuse(why))
        self._sweep_tmp()
        full = {**meta, "source": self.source, "size": self.size, "mtime_ns": self.mtime_ns}
        full["digest"] = self.digest
        if self.whole is not None:
            full["whole"] = self.whole
        write_atomic(self.folder / META, json.dumps(full).encode())

    def _ours(self, file: Any) -> bool:
        """Whether an open Parquet file holds this source's digest."""
        kv = file.metadata.metadata or {}
        return bool(kv.get(SOURCE_KEY) == self.digest.encode())

    def _opened(self, frame: str, column: str) -> Any:
        """The Parquet file of `column`, opened (its footer read; not read_table: that imports
        pyarrow.dataset, 0.01 s); None where it cannot be, or holds another source's digest (written for
        another since the entry was opened): then it is deleted, and so read again from the source."""
        import pyarrow.parquet as pq

        path = self.path(frame, column)
        try:
            file = pq.ParquetFile(path)
            if self._ours(file):
                return file
        except Exception:
            pass
        with contextlib.suppress(OSError):
            path.unlink()
        return None

    def _all_opened(self, frame: str, columns: Sequence[str]) -> dict[str, Any] | None:
        """Each of `columns` opened (`_opened`), or None where one cannot be."""
        files = {}
        for col in columns:
            file = self._opened(frame, col)
            if file is None:
                return None
            files[col] = file
        return files

    def path(self, frame: str, column: str) -> Path:
        return self.folder / f"{frame}.{column}.parquet"

    def has(self, frame: str, column: str) -> bool:
        return self.path(frame, column).is_file()

    def rows(self, frame: str, columns: Sequence[str]) -> int | None:
        """The rows of `frame`, as the footer of the first cached one of `columns` says (no column is read);
        None where none is cached."""
        for col in columns:
            if self.has(frame, col) and (file := self._opened(frame, col)) is not None:
                return int(file.metadata.num_rows)
        return None

    def load(self, frame: str, columns: Sequence[str]) -> dict[str, pd.Series]:
        """The cached ones of `columns`; a file that cannot be read is deleted (and so read again)."""
        _malloc_pool()
        out: dict[str, pd.Series] = {}
        for col in columns:
            path = self.path(frame, col)
            if not path.is_file() or (file := self._opened(frame, col)) is None:
                continue
            try:
                values = _int64_column(file)
                if values is None:
                    values = _other_column(file.read(), col)
                out[col] = values
                del file, values
            except Exception:
                with contextlib.suppress(OSError):
                    path.unlink()
        return out

    def store(self, frame: str, df: pd.DataFrame | Mapping[str, Any]) -> int:
        """Write each column of `df` (a DataFrame, or arrow arrays by name: analysis.trace.arrow_arrays, no
        pandas)
        as its own file, then keep the cache under its limit (least recently used entries out, this one
        kept); bytes written."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        _malloc_pool()
        written = 0
        for col in list(df):
            if isinstance(df, Mapping):
                table = pa.table({col: df[col]})
            else:
                table = pa.Table.from_pandas(df[[col]], preserve_index=False)
            table = table.replace_schema_metadata(
                {**(table.schema.metadata or {}), SOURCE_KEY: self.digest.encode()}
            )
            tmp = self.folder / f".tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}-{frame}.{col}"
            try:
                # zstd: a third smaller, 2x slower to write. Integers plain, not dictionary-encoded: the
                # encoder's buffers stayed resident (~40 MB for the rest of the command), and plain
                # columns read back faster; names and texts (categories) keep their dictionary.
                plain = pa.types.is_integer(table.schema.field(0).type)
                pq.write_table(table, tmp, compression="lz4", use_dictionary=not plain)
                os.replace(tmp, self.path(frame, col))
            finally:
                with contextlib.suppress(OSError):
                    tmp.unlink()
            written += size_of(self.path(frame, col))
        self.cache.wrote(written, keep=self.folder)
        return written

    def batches(
        self, frame: str, columns: Sequence[str], rows: int
    ) -> Iterator[dict[str, np.ndarray]] | None:
        """The cached `columns` of `frame`, `rows` at a time, the files read in step (a batch of each
        at once, never a whole column); None unless every one is cached, of one length and int64 (or
        boolean, or names: nvtx's pushpop, name and domain, `_other_chunks`); a file that cannot be opened is
        deleted. One that fails mid-way raises (`Trace.blocks` deletes it)."""
        import pyarrow as pa

        _malloc_pool()
        files = self._all_opened(frame, columns)
        if files is None:
            return None
        for file in files.values():
            kind = file.schema_arrow.field(0).type
            if kind != pa.int64() and not _named_or_flag(kind):
                return None
        if len({f.metadata.num_rows for f in files.values()}) > 1:
            return None
        return _in_step(files, rows)

    def strings(self, frame: str, columns: Sequence[str]) -> dict[str, list[Any]] | None:
        """Whole cached columns as Python lists, without pandas (the string table); None unless all are
        there."""
        _malloc_pool()
        files = self._all_opened(frame, columns)
        if files is None:
            return None
        try:
            return {c: file.read().column(0).to_pylist() for c, file in files.items()}
        except Exception:
            return None

    def writer(self, frame: str, columns: Sequence[str]) -> ColumnWriter:
        """Writes int64 `columns` of `frame` a block at a time (`ColumnWriter.write`), each file renamed into
        place when `close` is called after the last block."""
        _malloc_pool()
        return ColumnWriter(self, frame, list(columns))

    def _sweep_tmp(self) -> None:
        now = time.time()
        for f in self.folder.glob(".tmp-*"):
            if now - mtime_of(f) > STALE_TMP_S:
                with contextlib.suppress(OSError):
                    f.unlink()
