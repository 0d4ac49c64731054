"""The front door for reading: a table of the registry (analysis.tables) from the sources a user named, as
its declaration says (`read_tables`).

Served from the export's cache entry where the table is kept there (analysis.trace.results: no pandas, no
pyarrow, no SQLite), else opened and computed: from one export (without pandas where the table has a way),
over several (each read by a worker, then combined: analysis.trace.multi) or over one capture's
processes (`by_rank` on one export); then kept for the next time. An export whose capture failed its
health checks when they last ran is named in the tables' warnings (analysis.advice.verdict). An nsys
report (.nsys-rep) becomes an export through `export`, which the caller passes in
(analysis.trace.exports): analysis runs no nsys.

Light at import: a table served from the cache loads no numpy, pandas, pyarrow or SQLAlchemy. What opens
and computes is imported where it is needed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from analysis import tables
from analysis.advice.verdict import failed_captures
from analysis.errors import ExportError, OptionsError
from analysis.tables.table import Table, Tables
from analysis.trace import results
from analysis.trace.exports import Exporter, said_on_error, sqlite_for
from analysis.trace.multi import Combined, check_name_ranks, expand, label_sources


def read_tables(
    kind: str,
    sources: Sequence[Path],
    options: Mapping[str, Any] | None = None,
    *,
    top: int | None = None,
    by_rank: bool = False,
    jobs: int | None = None,
    dask: str | None = None,
    cache: bool = True,
    export: Exporter | None = None,
) -> Tables:
    """The table `kind` with `options` (what its `prepare` gives) over `sources`: exports, reports, traces,
    folders or glob patterns. One source is read alone; several (or one with `by_rank`, split by process)
    give one table over all of them (`jobs` local processes, or the Dask scheduler at `dask`). `top` keeps
    the first N rows of each table (per rank over several), or goes to a table that takes it. `cache`
    off: the exports themselves are read, and nothing is kept."""
    table = tables.get(kind)
    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 1):
        raise OptionsError(f"top={top!r}: the number of rows to keep, 1 or more (None: all)")
    options = dict(options or {})
    if table.takes_top and top is not None:
        options["top"], top = top, None
    plain = not any(options.get(k) for k in table.not_kept_with)
    kept = table.served_from_cache and plain and cache
    one = len(sources) == 1 and sources[0].is_file() and not by_rank
    said: list[str] = []  # what the cache entry held that was not the export's (deleted, read again)
    served = (
        results.cached(sources[0], kind, _key(table, options, sources[0]), said) if one and kept else None
    )
    per = None  # over several exports: the column (Rank, Source) each of whose values gets `top` rows
    if served is not None:
        result = Tables(served.tables, [*said, *served.notes], served.skipped, served.titled)  # type: ignore[arg-type]
        read, shown = sources, sources
    else:
        skipped: list[str] = []  # what a folder held that looked like an export and was not taken
        paths = sources if one else expand(sources, skipped)
        beside: list[str] = []  # the reports read through the export lying beside them
        try:
            if len(paths) > 1:
                check_name_ranks(paths)  # the ranks come from the names the user gave, not their exports
            exports = [sqlite_for(p, export, cache=cache, notes=beside) for p in paths]  # exported, once
            if len(paths) > 1:
                _once(paths, exports)
        except ExportError as e:
            raise ExportError("; ".join([str(e), *skipped])) from None
        with said_on_error(beside):
            if len(paths) > 1 or by_rank:
                result, per = _several(table, paths, exports, options, skipped, by_rank, jobs, dask, cache)
            else:
                result = _one(table, paths[0], exports[0], options, skipped, said, plain, kept, cache)
        result.notes = [*beside, *result.notes]
        read, shown = exports, paths
    result.warnings = failed_captures(read, shown, cache=cache)
    if top:  # the first N rows of each table; over several exports, of each one's (per rank)
        result.tables = [(title, _first(df, top, per)) for title, df in result.tables]
    return result


def _once(paths: Sequence[Path], exports: Sequence[Path]) -> None:
    """Refuse a report named beside the export it is read through (one capture, counted twice)."""
    seen: dict[Path, Path] = {}
    for path, exported in zip(paths, exports, strict=True):
        key = exported.resolve()
        if key in seen:
            report, other = (path, seen[key]) if path != exported else (seen[key], path)
            raise ExportError(
                f"{report.name} is read through {exported.name}, also given: each export counts once (give "
                f"{other.name} or {report.name}, not both)"
            )
        seen[key] = path


def _first(df: Any, n: int, per: str | None) -> Any:
    """The first `n` rows of a table (a DataFrame, or Rows served from the cache), of each value of the
    column `per` where it has one; all of a table whose rows make one answer (attrs "uncut": a check whose
    total is its last row)."""
    if df.attrs.get("uncut"):
        return df
    return df.groupby(per, sort=False, group_keys=False).head(n) if per in df.columns else df.head(n)


def _one(table: Table, path: Path, export: Path, options: dict[str, Any], skipped: list[str], said: list[str],
         plain: bool, kept: bool, cache: bool) -> Tables:  # fmt: skip
    """The table computed from one export (`export`, of the source `path`), kept in its cache entry where its
    declaration says."""
    from analysis.trace.opening import open_trace  # numpy: a table served from the cache needs none

    with open_trace(export, cache=cache) as trace:  # closed: its private copy goes
        if table.without_pandas is not None and plain:
            result = table.without_pandas(trace, path.name, **_shaping(table, options))
        else:
            result = table.one(trace, path.name, **options)
        result = _decided(table, result)
        result.notes = [*skipped, *result.notes]
        # kept where it is served from (results.cached: an export); without what this reading found wrong
        # in the cache: said once, not kept
        if kept and trace.format == "nsys-sqlite":
            entry = trace.cache_entry
            once = {*said, *(entry.notes if entry is not None else ())}
            notes = [n for n in result.notes if n not in once]
            key = _key(table, options, path)
            results.keep(trace, table.name, key, result.tables, notes, result.skipped, titled=result.titled)
        result.notes = [*said, *(n for n in result.notes if n not in said)]
    return result


def _several(table: Table, paths: Sequence[Path], exports: Sequence[Path], options: dict[str, Any],
             skipped: list[str], by_rank: bool, jobs: int | None, dask: str | None,
             cache: bool) -> tuple[Tables, str | None]:  # fmt: skip
    """The table over several exports (`exports`, of the sources `paths`: analysis.trace.multi), or over
    one capture's processes, titled with what it covers; and the column that labels each export's rows
    (Rank or Source)."""
    from analysis.ranks.capture_ranks import analyse_by_process
    from analysis.trace.multi_run import raise_errors, run_tasks, without_data

    try:
        if by_rank and len(paths) == 1:
            combined = analyse_by_process(table.name, exports[0], options, cache=cache)
        else:
            parts = run_tasks(tables.run_task, exports, table.name, options, cache, jobs=jobs, dask=dask)
            for path, part in zip(paths, parts, strict=True):
                part.path = str(path)
            without_data(parts)  # an export that recorded none of it adds no rows: said in a note
            raise_errors(parts)
            sources = label_sources(paths, parts)
            combined = tables.combine(table.name, parts, sources, by_rank=by_rank, options=options)
    except ExportError as e:
        raise ExportError("; ".join([str(e), *skipped])) from None
    out = _titled(table, combined, paths)
    out.notes = [*skipped, *out.notes]
    return _decided(table, out), combined.sources.column if combined.sources is not None else "Source"


def _shaping(table: Table, options: Mapping[str, Any]) -> dict[str, Any]:
    """The options that shape a kept table: those of `not_kept_with` are never set in one."""
    return {k: v for k, v in options.items() if k not in table.not_kept_with}


def _key(table: Table, options: Mapping[str, Any], path: Path) -> dict[str, Any]:
    """What a kept table is kept under: the options that shape it, and the file's name (in its titles)."""
    return {**_shaping(table, options), "file": path.name}


def _decided(table: Table, result: Tables) -> Tables:
    """Each table's deciding columns (the last a narrow terminal drops: the table's own, or those a
    composed table's part carries), then what the table itself says matters (e.g. the column it is sorted
    by), in its attrs: kept with it when it is served again."""
    for _, df in result.tables:
        df.attrs["deciding"] = list(df.attrs.get("deciding", table.deciding))
        df.attrs["priority"] = [*df.attrs["deciding"], *df.attrs.get("then", ())]
    return result


def _titled(table: Table, result: Combined, paths: Sequence[Path]) -> Tables:
    """The tables over several exports, titled with what they cover."""
    sources = result.sources
    labels = sources.labels if sources is not None else []
    label = sources.column if sources is not None else "Source"
    first, last = (labels[0], labels[-1]) if labels else ("", "")
    what = f"{len(paths)} exports" if len(paths) > 1 else paths[0].name
    what += f" (ranks {first}-{last})" if label == "Rank" else ""
    parts = result.tables
    out = Tables(skipped=result.skipped or None)
    for name, df in parts:
        if label in df.columns:  # which rank (or file) a block of rows is of: a narrow terminal keeps it
            df.attrs["deciding"] = [label, *df.attrs.get("deciding", table.deciding)]
        heading = table.headings.get(name, name if len(parts) > 1 else table.title)
        out.tables.append((f"{heading} in {what}", df))
    said = (n for _, df in out.tables for n in df.attrs.get("notes", []))
    # a table's note that an export's note says already, with its label ("rank 1: …"), is not said again
    said = (n for n in said if not any(k.endswith(f": {n}") for k in result.notes))
    out.notes = list(dict.fromkeys([*result.notes, *said]))
    out.titled = len(out.tables) != 1 or bool(out.skipped)
    return out
