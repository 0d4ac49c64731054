"""The tables `nsys stats` prints, computed from a trace: one module each, whose `TABLE` declares it
(analysis.tables.table.Table). This package is their registry: a module here that defines `TABLE` is a
table, `harness NAME` its command.

`names()`, `get(name)`, `all()`; `run_task` (one export's share of a table over several, in a worker)
and `combine` (the shares of every export into one table). Importing a table module loads no pandas or
numpy: its computing functions import them.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Sequence
from typing import Any

from analysis.errors import AnalysisError
from analysis.tables.table import Table
from analysis.trace.multi import Combined, Part, Sources


def _declared(module: str) -> Table | None:
    table = getattr(importlib.import_module(f"{__name__}.{module}"), "TABLE", None)
    return table if isinstance(table, Table) else None


def all() -> list[Table]:
    """Every table, in their declared order (ties by name)."""
    found = [t for m in pkgutil.iter_modules(__path__) if (t := _declared(m.name)) is not None]
    return sorted(found, key=lambda t: (t.order, t.name))


def names() -> list[str]:
    """The tables' names (their commands), in their declared order."""
    return [t.name for t in all()]


def get(name: str) -> Table:
    """The table `name` (its module: the name with `-` as `_`); AnalysisError naming the tables if none."""
    module = name.replace("-", "_")
    table = None
    if module.isidentifier() and any(m.name == module for m in pkgutil.iter_modules(__path__)):
        table = _declared(module)
    if table is None or table.name != name:
        raise AnalysisError(f"no table {name!r}: the tables are {', '.join(names())}")
    return table


def run_task(path: str, kind: str, options: dict[str, Any], cache: bool = True) -> Part:
    """Read one export for the table `kind`: the Part a worker (a local process or a Dask worker) sends
    back."""
    from analysis.trace.multi_run import read_part  # pandas: only where several exports are read

    table = get(kind)
    return read_part(path, lambda trace: table.pieces(trace, **options), cache)


def combine(kind: str, parts: Sequence[Part], sources: Sources, *, by_rank: bool = False,
            options: dict[str, Any] | None = None) -> Combined:  # fmt: skip
    """The table `kind` over every export (or per export with `by_rank`)."""
    out = Combined(notes=_notes(parts, sources), sources=sources)
    get(kind).combine(out, parts, sources, by_rank, options or {})
    return out


def _notes(parts: Sequence[Part], sources: Sources) -> list[str]:
    """Sources' notes first, then each export's own notes once, prefixed with its label; a note every one
    of several exports says (how NVTX names are grouped, say) is said once, unprefixed."""
    label = {str(s.path): s.label for s in sources.items}
    notes = list(sources.notes)
    lacking: dict[tuple[str, str], list[str]] = {}  # (what, hint) -> the exports that recorded none of it
    for part in parts:
        if part.lacks is not None:
            lacking.setdefault(part.lacks, []).append(label[part.path])
    for (what, hint), labels in lacking.items():  # as `nsys stats`: "does not contain CUDA kernel data"
        notes.append(
            f"no {what} in {', '.join(labels)}: no rows from {'it' if len(labels) == 1 else 'them'} ({hint})"
        )
    every = set.intersection(*(set(p.notes) for p in parts)) if len(parts) > 1 else set()
    for part in parts:
        for n in part.notes:
            text = n if n in every else f"{label[part.path]}: {n}"
            if text not in notes:
                notes.append(text)
    return notes
