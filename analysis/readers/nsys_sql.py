"""The raw SQL against an Nsight Systems export: bound-parameter queries, the chunked scans that hand back
integer columns (`scan`, `scan_blocks`), StringIds looked up by id, and text columns read as codes.

`NsysReader` (analysis.readers.nsys) is one of these with the frames of the trace model on top; table and
column names come only from that module and this one. Why a scan is made the way it is: that module's
docstring (one group_concat per column per chunk of rowids, parsed by numpy; a chunk that does not parse
read again with the values that are not integers as NULL).
"""

from __future__ import annotations

import os
import warnings
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from analysis.errors import ExportError
from analysis.readers import NULL

# Rows per query: bounds the joined strings. 65,536 keeps every buffer of a chunk (a joined column ~0.8 MB,
# its parsed int64s 0.5 MB, the table blocks made from them) under the 1 MiB at which glibc maps memory
# afresh (analysis.readers.return_freed_buffers): at 250,000, `harness kernels` of 1M kernels took 81k
# page faults, now 46k, and 155 -> 122 MB at the peak; and the last chunk, which no worker overlaps, is
# shorter.
CHUNK_ROWIDS = 65_536
# values per query (rows x columns): a scan of many columns reads fewer rows at a time. The joined strings
# of a chunk and its parsed columns, 2 queries in flight and 1 handed on, grow with the columns: the 9 of
# the timeline's kernels at 250,000 rows held ~170 MB at once (at 55,555 rows: ~60 MB).
CHUNK_CELLS = 500_000
SCAN_THREADS = min(4, os.cpu_count() or 1)


class SqlExport:
    """Queries against one open export's engine; what `NsysReader` reads its frames with."""

    path: Path
    engine: Any
    tables: set[str]
    reads: dict[str, int]  # source table -> scans, for tests that count reads
    _columns: dict[str, dict[str, str]]  # table -> column -> declared type
    _strings: dict[int, str]
    _all_strings: bool

    # --- raw SQL (bound parameters; table and column names only from this module and analysis.readers.nsys)

    def columns(self, table: str) -> set[str]:
        return set(self._declared(table))

    def text_affinity(self, table: str, column: str) -> bool:
        """Whether `column` of `table` compares its values as text (SQLite's TEXT affinity: a declared
        type naming CHAR, CLOB or TEXT)."""
        declared = self._declared(table).get(column, "").upper()
        return any(word in declared for word in ("CHAR", "CLOB", "TEXT"))

    def _declared(self, table: str) -> dict[str, str]:
        if table not in self._columns:
            if table not in self.tables:
                return {}
            rows = self._rows("SELECT name, type FROM pragma_table_info(:t)", {"t": table})
            self._columns[table] = {r[0]: str(r[1] or "") for r in rows}
        return self._columns[table]

    def _count(self, table: str, where: str = "") -> int:
        if table not in self.tables:
            return 0
        cond = f" WHERE {where}" if where else ""
        return int(self._rows(f"SELECT count(*) FROM {_ident(table)}{cond}")[0][0])

    def call_chains(
        self, table: str, chains: str, calls: Sequence[tuple[int, int]]
    ) -> dict[tuple[int, int], list[str]]:
        """The call chains of `calls` ((global_tid, start) of rows of `table`, their chains in the table
        `chains`): per call that has one, its frames innermost first, each `symbol (module)`."""
        if not calls or not {table, chains, "StringIds"} <= self.tables:
            return {}
        if "callchainId" not in self.columns(table):
            return {}
        out: dict[tuple[int, int], list[str]] = {}
        for tid, start in calls:
            rows = self._rows(
                f"SELECT s.value, m.value FROM {_ident(table)} AS c JOIN {_ident(chains)} AS k "
                "ON k.id = c.callchainId LEFT JOIN StringIds AS s ON s.id = k.symbol "
                "LEFT JOIN StringIds AS m ON m.id = k.module "
                "WHERE c.globalTid = :tid AND c.start = :start ORDER BY k.stackDepth",
                {"tid": int(tid), "start": int(start)},
            )
            if rows:
                out[(int(tid), int(start))] = [f"{s} ({str(m).rsplit('/', 1)[-1]})" for s, m in rows]
        return out

    def _rows(self, sql: str, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
        from sqlalchemy import exc, text

        try:
            with self.engine.connect() as conn:
                return [tuple(r) for r in conn.execute(text(sql), dict(params or {}))]
        except exc.DBAPIError as e:
            raise sqlite_error(self.path, e.orig) from None

    def scan(
        self,
        table: str,
        exprs: Mapping[str, str],
        where: str = "",
        params: Mapping[str, Any] | None = None,
        dtypes: Mapping[str, Any] | None = None,
    ) -> dict[str, np.ndarray]:
        """Integer columns `exprs` (name -> SQL expression) of every row of `table` matching `where`.

        One query per chunk of rowids keeps the joined strings small. NULL, and a value that is not an
        integer, reads as the NULL sentinel. `dtypes` narrows columns (int64 by default) whose expressions
        keep them in range; there NULL reads as -1 (False for bool). The arrays are the caller's to change.
        """
        names = list(exprs)
        empty = {n: np.empty(0, dtype=(dtypes or {}).get(n, np.int64)) for n in names}
        span = self._rowids(table)
        if span is None or not names:
            return empty
        # Each chunk is copied into the columns as it comes, in order, and let go: holding every chunk
        # and then joining them held each column twice. A column is sized for every rowid (pages past
        # the rows read are never touched, so they take no memory).
        columns = [np.empty(span[1] - span[0] + 1, dtype=(dtypes or {}).get(n, np.int64)) for n in names]
        at = 0
        for parsed in self._chunks(table, exprs, where, params, span):
            n = len(parsed[0]) if parsed and parsed[0] is not None else 0
            for out, part in zip(columns, parsed, strict=True):
                if out.dtype != np.int64 and part is not None:  # the sentinel does not fit: -1 (or False)
                    part = np.where(part == NULL, -1 if out.dtype.kind == "i" else 0, part)
                out[at : at + n] = part
            at += n
            del parsed
        return {n: c[:at] for n, c in zip(names, columns, strict=True)}

    def scan_blocks(
        self, table: str, exprs: Mapping[str, str], where: str = "", params: Mapping[str, Any] | None = None
    ) -> Iterator[dict[str, np.ndarray]]:
        """`scan` a chunk of rowids at a time: int64 columns of the chunk's matching rows, never the whole
        table at once."""
        names = list(exprs)
        span = self._rowids(table)
        if span is None or not names:
            return iter(())
        chunks = self._chunks(table, exprs, where, params, span)  # asked for now, not at the first block
        return (dict(zip(names, parsed, strict=True)) for parsed in chunks)

    def _rowids(self, table: str) -> tuple[int, int] | None:
        """The first and last rowid of `table` (None when it is missing or empty); counts a scan."""
        if table not in self.tables:
            return None
        self.reads[table] = self.reads.get(table, 0) + 1
        t = _ident(table)  # two subqueries: SQLite answers each from the b-tree's ends, not by a full scan
        lo, hi = self._rows(f"SELECT (SELECT min(rowid) FROM {t}), (SELECT max(rowid) FROM {t})")[0]
        return None if lo is None else (int(lo), int(hi))

    def _chunks(
        self,
        table: str,
        exprs: Mapping[str, str],
        where: str,
        params: Mapping[str, Any] | None,
        span: tuple[int, int],
    ) -> Iterator[list[np.ndarray]]:
        """The parsed columns of each chunk of rowids in `span` (CHUNK_ROWIDS, fewer for many columns: at
        most CHUNK_CELLS values), in order. The first chunks are asked of SQLite before this returns, so
        they are read while the caller gets ready for them (`harness kernels` imports pyarrow and makes its
        cache entry meanwhile)."""
        cond = f" AND ({where})" if where else ""
        step = max(1, min(CHUNK_ROWIDS, CHUNK_CELLS // max(1, len(exprs))))
        chunks = range(span[0], span[1] + 1, step)

        def query(strict: bool) -> str:
            cols = [
                f"CASE WHEN typeof({e}) = 'integer' THEN {e} END" if strict else e for e in exprs.values()
            ]
            concat = ", ".join(f"group_concat(ifnull({c}, {NULL}))" for c in cols)
            return f"SELECT count(*), {concat} FROM {_ident(table)} WHERE rowid BETWEEN :lo AND :hi{cond}"

        loose, strict = query(False), query(True)

        def read(first: int) -> list[np.ndarray]:
            bounds = {**(params or {}), "lo": first, "hi": first + step - 1}
            row = self._rows(loose, bounds)[0]
            parsed = [_parse_ints(b) for b in row[1:]]
            if any(len(p) != row[0] for p in parsed):
                row = self._rows(strict, bounds)[0]
                parsed = [_parse_ints(b) for b in row[1:]]
            return list(parsed)

        # SQLite does the work with the GIL released: chunks on separate connections scan in parallel,
        # handed on in order. One chunk more than the workers is asked for, so a worker that is done
        # starts the next chunk at once instead of waiting for the consumer to take the one it read
        # (with `workers` in flight, each worker waited out its own chunk's parse and the hand-over).
        workers = min(len(chunks), SCAN_THREADS)

        def handed_on() -> Iterator[list[np.ndarray] | None]:  # None first, once the first chunks are asked
            if workers > 1:
                from concurrent.futures import ThreadPoolExecutor

                ahead = workers + 1
                with ThreadPoolExecutor(workers) as pool:
                    queue = deque(pool.submit(read, first) for first in chunks[:ahead])
                    yield None
                    for first in chunks[ahead:]:
                        parsed = queue.popleft().result()
                        queue.append(pool.submit(read, first))
                        yield parsed
                        del parsed
                    while queue:
                        yield queue.popleft().result()
            else:
                yield None
                for first in chunks:
                    yield read(first)

        stream = handed_on()
        next(stream)  # runs it up to the first chunks' queries
        return stream  # type: ignore[return-value]  # None only before this

    def strings_of(self, ids: np.ndarray) -> dict[int, str]:
        """id -> StringIds value for `ids` (those in the table), each looked up once per reader: past 500
        not looked up yet, the whole table is read (once)."""
        wanted = sorted({int(i) for i in ids})
        if not wanted or "StringIds" not in self.tables:
            return {}
        known = self._strings
        missing = [] if self._all_strings else [i for i in wanted if i not in known]
        if missing:
            if len(missing) > 500:
                sql, params = "SELECT id, value FROM StringIds", {}
                self._all_strings = True
            else:
                marks = ", ".join(f":i{k}" for k in range(len(missing)))
                sql = f"SELECT id, value FROM StringIds WHERE id IN ({marks})"
                params = {f"i{k}": v for k, v in enumerate(missing)}
            known.update((int(i), str(v)) for i, v in self._rows(sql, params) if isinstance(i, int))
        return {i: known[i] for i in wanted if i in known}

    def column_codes(
        self, table: str, column: str, where: str, rowids: np.ndarray
    ) -> tuple[np.ndarray, list[str]]:
        """A text column as a code per row of `rowids` (the rows' rowids, ascending) and the distinct
        non-empty texts (-1: NULL or empty). SQLite groups each chunk of rowids by text and hands back each
        text once with its rowids: 1.8M NVTX texts made one Python string each took ~250 MB at the peak
        (and ~1 GB held at once before chunks)."""
        t, col = _ident(table), _ident(column)
        out = np.full(len(rowids), -1, dtype=np.int32)
        if not len(rowids):
            return out, []
        cond = f" AND ({where})" if where else ""
        grouped = (
            f"SELECT {col}, group_concat(rowid) FROM {t} WHERE rowid BETWEEN :lo AND :hi{cond} "
            f"AND {col} IS NOT NULL AND {col} != '' GROUP BY {col}"
        )
        texts: dict[str, int] = {}
        for first in range(int(rowids[0]), int(rowids[-1]) + 1, CHUNK_ROWIDS):
            bounds = {"lo": first, "hi": first + CHUNK_ROWIDS - 1}
            groups = self._rows(grouped, bounds)
            codes = np.fromiter(
                (
                    texts.setdefault(
                        v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v), len(texts)
                    )
                    for v, _ in groups
                ),
                dtype=np.int32,
                count=len(groups),
            )
            # every group's rowids parsed at once, not a parse per text: PyTorch's NVTX ranges have a text
            # each (19,118 ranges, 18,656 texts in torchrun_2gpu: 0.33 -> 0.1 s)
            blobs = [ids or "" for _, ids in groups]
            counts = np.fromiter(
                (b.count(",") + 1 if b else 0 for b in blobs), dtype=np.int64, count=len(blobs)
            )
            at = _parse_ints(",".join(b for b in blobs if b))
            if len(at) == int(counts.sum()):
                code = np.repeat(codes, counts)
            else:  # a rowid that is not an integer: group by group, as far as each parses
                parts = [_parse_ints(b) for b in blobs]
                at = np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
                code = np.repeat(codes, [len(x) for x in parts])
            pos = np.minimum(np.searchsorted(rowids, at), len(rowids) - 1)
            hit = rowids[pos] == at
            out[pos[hit]] = code[hit]
        return out, list(texts)


def _ident(name: str) -> str:
    if not name.replace("_", "").isalnum():
        raise ValueError(f"not an identifier: {name!r}")
    return name


def _parse_ints(blob: str | None) -> np.ndarray:
    if blob is None:
        return np.empty(0, dtype=np.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a non-integer stops the parse early: the caller sees the count
        try:
            return np.fromstring(blob, dtype=np.int64, sep=",")
        except ValueError:
            return np.empty(0, dtype=np.int64)


def sqlite_error(path: Path, err: BaseException | None) -> ExportError:
    """What SQLite's error means for the user: locked by a writer, not readable where it lies, or
    corrupt."""
    why = str(err).splitlines()[0] if err else "unreadable"
    code = getattr(err, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    if primary in (5, 6):  # SQLITE_BUSY, SQLITE_LOCKED
        return ExportError(
            f"{path} is locked by another program that is writing it (SQLite: {why}), as `nsys export` "
            "holds it until it is done: wait for that to finish, then run again"
        )
    if primary in (8, 14):  # SQLITE_READONLY (a WAL index it may not write), SQLITE_CANTOPEN
        return ExportError(
            f"cannot read {path} (SQLite: {why}): SQLite could not open it, or the files it keeps beside "
            "it, read-only; check that the file and its folder can be read, or copy it to a writable folder"
        )
    if primary in (10, 23):  # SQLITE_IOERR, SQLITE_AUTH
        return ExportError(f"cannot read {path} (SQLite: {why})")
    return ExportError(f"{path} is corrupt or truncated ({why}): export it again from the .nsys-rep")
