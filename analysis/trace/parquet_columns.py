"""Cached Parquet columns: written a block at a time (`ColumnWriter`), read back as numpy arrays whole
(`_int64_column`, with no copy where it can) or in aligned blocks (`_in_step`), in pyarrow's malloc pool
(`_malloc_pool`)."""

from __future__ import annotations

import contextlib
import functools
import os
import uuid
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from analysis.readers import return_freed_buffers
from analysis.trace.arrow_arrays import int64_array

if TYPE_CHECKING:  # numpy is imported where a column is read
    import numpy as np
    import pandas as pd


SOURCE_KEY = b"harness.source"  # the key-value metadata of every cached file holding its source's digest


class ColumnWriter:
    """Columns written block by block, one Parquet file each (a row group per block), as `store` writes
    them: lz4; int64 plain, booleans, nullable integers (pandas' IntegerArray) and names (pandas
    Categoricals: each block's own dictionary) as arrow gives them. Nothing is in place until `close`;
    `abort` leaves nothing."""

    def __init__(self, entry: Any, frame: str, columns: list[str]) -> None:
        self.entry = entry
        self.frame = frame
        self.tmp = {
            c: entry.folder / f".tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}-{frame}.{c}" for c in columns
        }
        self.writers: dict[str, Any] = {}  # opened at a column's first block, when its type is known
        self.digest = entry.digest.encode()

    def write(self, block: Mapping[str, Any]) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            for c, tmp in self.tmp.items():
                values = _arrow_block(block[c])
                if c not in self.writers:
                    plain = pa.types.is_integer(values.type)
                    # the source's digest, as `Entry.store` writes it (analysis.trace.cache.SOURCE_KEY)
                    schema = pa.schema([pa.field(c, values.type)], metadata={SOURCE_KEY: self.digest})
                    self.writers[c] = pq.ParquetWriter(
                        tmp, schema, compression="lz4", use_dictionary=not plain
                    )
                self.writers[c].write_table(pa.table({c: values}))
        except BaseException:
            self.abort()
            raise

    def close(self) -> None:
        import numpy as np

        for c in self.tmp:
            if c not in self.writers:  # no block at all (the source table is missing): an empty column
                self.write({c: np.empty(0, dtype=np.int64) for c in self.tmp})
                break
        for w in self.writers.values():
            w.close()
        written = 0
        for c, tmp in self.tmp.items():
            os.replace(tmp, self.entry.path(self.frame, c))
            with contextlib.suppress(OSError):
                written += self.entry.path(self.frame, c).stat().st_size
        self.writers = {}
        self.entry.cache.wrote(written, keep=self.entry.folder)

    def abort(self) -> None:
        for w in self.writers.values():
            with contextlib.suppress(Exception):
                w.close()
        for tmp in self.tmp.values():
            with contextlib.suppress(OSError):
                tmp.unlink()
        self.writers = {}


def _in_step(files: dict[str, Any], rows: int) -> Iterator[dict[str, np.ndarray]]:
    """Aligned blocks of at most `rows` rows of the files' columns: row groups of files written in different
    ways (a whole column by `store`, blocks by `ColumnWriter`) end at different rows, so each block is cut
    to the shortest piece at hand and the rest kept for the next. A row group at a time (`read_row_group`):
    `iter_batches` held ~25 MB per file open beside its batches (runtime calls, four columns: +100 MB)."""
    import numpy as np

    its = {c: _row_groups(c, f) for c, f in files.items()}
    pending: dict[str, np.ndarray] = {c: np.empty(0, dtype=np.int64) for c in files}
    while True:
        for c, it in its.items():
            while not len(pending[c]):
                piece = next(it, None)
                if piece is None:
                    return
                pending[c] = piece
        n = min(rows, *(len(v) for v in pending.values()))
        yield {c: v[:n] for c, v in pending.items()}
        pending = {c: v[n:] for c, v in pending.items()}


def _row_groups(name: str, file: Any) -> Iterator[np.ndarray]:
    """The chunks of an int64 column without nulls, a row group at a time, as read-only numpy arrays over
    arrow's buffers (Array.to_numpy asks whether pandas is there)."""
    import numpy as np
    import pyarrow as pa

    if file.schema_arrow.field(0).type != pa.int64():
        yield from _other_chunks(file)
        return
    for group in range(file.num_row_groups):
        column = file.read_row_group(group, use_threads=False).column(0)
        for chunk in column.chunks:
            if chunk.null_count:  # a nullable integer (nvtx's payload), as Entry.load gives it
                yield _nullable_ints(chunk)
                continue
            yield np.frombuffer(chunk.buffers()[1], np.int64, len(chunk), chunk.offset * 8)
        del column


def _named_or_flag(kind: Any) -> bool:
    """Whether `_other_chunks` reads a column of this arrow type: booleans, strings, names (dictionaries),
    or nothing but nulls (an export without NVTX domains)."""
    import pyarrow as pa

    return bool(
        pa.types.is_boolean(kind)
        or pa.types.is_dictionary(kind)
        or pa.types.is_string(kind)
        or pa.types.is_null(kind)
    )


def _other_chunks(file: Any) -> Iterator[Any]:
    """A boolean column's chunks as numpy booleans, a column of names (or nulls) as pandas Categoricals (a
    missing name is a missing value), a row group at a time."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa

    for group in range(file.num_row_groups):
        column = file.read_row_group(group, use_threads=False).column(0)
        for chunk in column.chunks:
            if pa.types.is_boolean(chunk.type):
                if chunk.null_count:
                    raise OSError("nulls in a cached boolean column")
                yield np.asarray(chunk.to_numpy(zero_copy_only=False), dtype=bool)
            elif pa.types.is_dictionary(chunk.type):
                codes = chunk.indices.fill_null(-1).to_numpy(zero_copy_only=False)
                yield pd.Categorical.from_codes(codes, categories=chunk.dictionary.to_pylist())
            elif pa.types.is_null(chunk.type):  # no domain anywhere: every value missing
                yield pd.Categorical.from_codes(np.full(len(chunk), -1, dtype=np.int8), categories=[])
            else:
                yield pd.Categorical(chunk.to_pandas())
        del column


def _int64_column(file: Any) -> np.ndarray | None:
    """An int64 column without nulls as a numpy array, read a row group at a time into it (None for other
    columns): a whole-file read then to_pandas holds the column two or three times over (6M runtime
    calls: +130 MB at the peak for a 48 MB column, against +60 MB)."""
    import numpy as np
    import pyarrow as pa

    if file.schema_arrow.field(0).type != pa.int64():
        return None
    if file.num_row_groups == 1:  # up to 1M rows: arrow's buffer as it is, no copy (read-only)
        column = file.read_row_group(0, use_threads=False).column(0)
        if column.num_chunks == 1 and not column.null_count:
            return column.chunk(0).to_numpy()
    out = np.empty(file.metadata.num_rows, dtype=np.int64)
    at = 0
    for group in range(file.num_row_groups):
        for chunk in file.read_row_group(group, use_threads=False).column(0).chunks:
            if chunk.null_count:
                return None
            out[at : at + len(chunk)] = chunk.to_numpy()
            at += len(chunk)
    return out if at == len(out) else None


@functools.cache
def _malloc_pool() -> None:
    """pyarrow allocates with malloc, not its mimalloc pool, which keeps freed buffers resident: reading
    one 6M-row column from the cache and letting it go left ~450 MB held, 126 MB with malloc (and glibc's
    mmap threshold set, analysis.readers.return_freed_buffers)."""
    import pyarrow as pa

    return_freed_buffers()
    with contextlib.suppress(Exception):
        pa.set_memory_pool(pa.system_memory_pool())


def _arrow_block(values: Any) -> Any:
    """A block's column as an arrow array: int64 over numpy's buffer without pandas (`pa.array` imports it);
    the other kinds come with pandas loaded already (booleans, IntegerArray, Categorical: names as a
    dictionary of int32 codes, whatever the width of the block's own codes)."""
    import numpy as np
    import pyarrow as pa

    if isinstance(values, np.ndarray) and values.dtype == np.int64:
        return int64_array(values)
    if hasattr(values, "categories"):  # a pandas Categorical
        codes = np.asarray(values.codes, dtype=np.int32)
        indices = pa.array(codes, mask=codes < 0) if (codes < 0).any() else pa.array(codes)
        return pa.DictionaryArray.from_arrays(indices, pa.array(list(values.categories), type=pa.string()))
    return pa.array(values)


def _nullable_ints(chunk: Any) -> Any:
    """An int64 arrow array with nulls as pandas' IntegerArray (Int64), as a nullable column is in a frame."""
    import numpy as np
    import pandas as pd

    missing = chunk.is_null().to_numpy(zero_copy_only=False)
    values = np.asarray(chunk.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
    return pd.arrays.IntegerArray(values, np.asarray(missing, dtype=bool))


def _other_column(table: Any, name: str) -> pd.Series:
    """A whole cached column that is not int64 without nulls, as the frame held it (pandas' metadata
    read where `store` wrote it). Two kinds are also written a block at a time (`ColumnWriter`), which
    leaves no pandas metadata and a dictionary per block: int64 with nulls is Int64 (nvtx's payload), and
    names (dictionaries) are a Categorical of the names sorted, as every reader makes them (arrow unifies
    the blocks' dictionaries in order of appearance)."""
    import pandas as pd
    import pyarrow as pa

    column = table.column(0)
    if pa.types.is_int64(column.type) and column.null_count:
        parts = [_nullable_ints(c) for c in column.chunks]
        return pd.Series(parts[0] if len(parts) == 1 else pd.arrays.IntegerArray._concat_same_type(parts),
                         name=name)  # fmt: skip
    values = table.to_pandas(ignore_metadata=False)[name]
    if pa.types.is_dictionary(column.type) and isinstance(values.dtype, pd.CategoricalDtype):
        cats = values.cat.categories
        if not cats.is_monotonic_increasing:
            values = values.cat.reorder_categories(sorted(cats))
    return values
