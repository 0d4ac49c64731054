"""Tables in a notebook or a script, through the same front door as `harness` (analysis.front.reading):
served from the cache where a table is kept there, else computed, and kept.

    from analysis import front

    report = front.open("report.sqlite")        # or several: ["rank0.sqlite", "rank1.sqlite"], a folder
    kernels = report.table("kernels")            # a pandas DataFrame
    report.table("kernels", by="name", top=10)   # a table's options by name (its computing function's)
    for title, df in report.tables("summary").items():
        print(title, df.attrs["notes"])

A table's options are those its module's functions take (analysis/tables/<name>.py: kernels takes names,
by, range_name, stats_format, ...; the command line's flags are turned into them by each table's
`prepare`), with the library's defaults (stats_format: analysis.tables.stats_format.DEFAULT). An nsys
report (.nsys-rep) needs `export=`, a function that exports it to SQLite: `harness` passes its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from analysis.front.reading import Export, read_tables

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class Report:
    """Sources opened for reading, and how: through the cache, split by rank, on how many processes."""

    sources: tuple[Path, ...]
    cache: bool = True
    by_rank: bool = False
    jobs: int | None = None
    dask: str | None = None
    export: Export | None = None

    def tables(self, kind: str, *, top: int | None = None, **options: Any) -> dict[str, pd.DataFrame]:
        """The titled tables of `kind` (a table's name: `analysis.tables.names()`), title -> DataFrame;
        each frame's attrs hold the notes printed with them ("notes") and the tables left out for want of
        data, with why ("skipped")."""
        result = read_tables(kind, self.sources, options, top=top, by_rank=self.by_rank, jobs=self.jobs,
                             dask=self.dask, cache=self.cache, export=self.export)  # fmt: skip
        out = {}
        for title, df in result.tables:
            frame = df if hasattr(df, "iloc") else df.frame()  # Rows: computed or served without pandas
            frame.attrs.update(notes=list(result.notes), skipped=dict(result.skipped or {}))
            out[title] = frame
        return out

    def table(self, kind: str, *, top: int | None = None, **options: Any) -> pd.DataFrame:
        """The first table of `kind` (most have one), as `tables` gives it."""
        return next(iter(self.tables(kind, top=top, **options).values()))


def open(
    sources: str | Path | Sequence[str | Path],
    *,
    cache: bool = True,
    by_rank: bool = False,
    jobs: int | None = None,
    dask: str | None = None,
    export: Export | None = None,
) -> Report:
    """The exports, traces or reports at `sources` (one path, or several, a folder, a glob pattern), read
    through the Parquet cache unless `cache` is off; several give one table over all (`by_rank`: per
    rank; one export with `by_rank`: split by process)."""
    paths = (sources,) if isinstance(sources, str | Path) else tuple(sources)
    return Report(tuple(Path(p) for p in paths), cache, by_rank, jobs, dask, export)
