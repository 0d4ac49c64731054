"""Many exports: combine the Parts the workers sent back into one table. Each group's values of every export
are joined, in label order, and summarised once (exact statistics over all ranks); tables already per
process or range instance are stacked, one block per rank (analysis.trace.multi says why). Each table says
how its rows combine (analysis/tables/<name>.py: `summarised` with its key and output columns, or stacked);
what they share is here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from analysis.stats import figures, round_half_up, time_percent
from analysis.trace.multi import Grouped, Part, Sources


@dataclass
class Gathered:
    """A table's row groups over every source: per key (source first with `by_rank`), the sources (their
    positions in label order) with rows in it and, per value column, their values in source order."""

    keys: list[str]
    sources: dict[tuple[Any, ...], list[int]]
    values: dict[str, dict[tuple[Any, ...], list[np.ndarray]]]

    def joined(self, value: str, key: tuple[Any, ...]) -> np.ndarray:
        """The values of one group, its sources' in their order (let go from the gathered)."""
        pieces = self.values[value].pop(key)
        return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)


def gather_rows(
    parts: Sequence[Part],
    name: str,
    sources: Sources,
    keys: Sequence[str] | None = None,
    by_rank: bool = False,
) -> Gathered | None:
    """The row pieces named `name` of every part, grouped by `keys` (default: the pieces' own key
    columns; fewer merge their groups), per source with `by_rank`: no frame of every row, a list of
    arrays per group."""
    order = {str(s.path): i for i, s in enumerate(sources.items)}
    out: Gathered | None = None
    for part in sorted(parts, key=lambda p: order[p.path]):
        piece = part.pieces.get(name)
        if piece is None or piece.rows is None:
            continue
        rows = piece.rows if isinstance(piece.rows, Grouped) else Grouped.of(piece.rows)
        wanted = list(rows.keys if keys is None else keys)
        at = [rows.keys.index(k) for k in wanted]
        if out is None:
            out = Gathered(wanted, {}, {v: {} for v in rows.values})
        src = order[part.path]
        for i, group in enumerate(rows.groups):
            key = tuple(group[j] for j in at)
            if by_rank:
                key = (src, *key)
            have = out.sources.setdefault(key, [])
            if not have or have[-1] != src:
                have.append(src)
            for v, arrays in rows.values.items():
                out.values[v].setdefault(key, []).append(arrays[i])
    return out


def compress_ranks(values: Sequence[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5'."""
    vals = sorted(set(values))
    runs: list[str] = []
    i = 0
    while i < len(vals):
        j = i
        while j + 1 < len(vals) and vals[j + 1] == vals[j] + 1:
            j += 1
        runs.append(str(vals[i]) if i == j else f"{vals[i]}-{vals[j]}")
        i = j + 1
    return ",".join(runs)


def stat_table(
    rows: Gathered,
    keys: Sequence[str],
    columns: Sequence[str],
    sources: Sources,
    *,
    by_rank: bool = False,
    count_name: str = "Instances",
    value: str = "duration",
) -> pd.DataFrame:
    """The nsys-stats summary of the gathered rows (`gather_rows` by `keys`) over every source, or per
    source with `by_rank`: each group's statistics from its values joined (exact: analysis.stats.figures,
    as one export's tables), Time (%) of each row's listing (per source with `by_rank`), largest first. A
    Rank/Source column leads; over all sources, `Ranks`/`Sources` says which sources have the row."""
    label = sources.column
    total = "Total Time (ns)"
    stats = [total, count_name, "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)", "StdDev (ns)"]
    group_keys = ["_src", *keys] if by_rank else list(keys)
    table = []
    for key in list(rows.sources):
        table.append([*key, *figures(rows.joined(value, key))])
    out = pd.DataFrame(table, columns=[*group_keys, *stats])
    for k in keys:  # missing key values as a frame of them had them
        out[k] = out[k].astype(object).where(out[k].notna(), np.nan)
    for col in ("Avg (ns)", "Med (ns)", "StdDev (ns)"):
        out[col] = round_half_up(out[col].astype(np.float64))
    which = [_which(rows.sources[key], sources) for key in rows.sources] if not by_rank else []
    if not by_rank:
        out[f"{label}s"] = which
    out = out.sort_values(list(keys), kind="stable").sort_values(total, ascending=False, kind="stable")
    if by_rank:
        out = out.sort_values("_src", kind="stable").reset_index(drop=True)
        out["Time (%)"] = (
            np.concatenate([time_percent(g[total]) for _, g in out.groupby("_src", sort=True)])
            if len(out)
            else np.zeros(0)
        )
        out.insert(0, label, np.asarray(sources.labels, dtype=object)[out["_src"].to_numpy(dtype=np.int64)])
        lead = [label]
    else:
        out = out.reset_index(drop=True)
        out["Time (%)"] = time_percent(out[total])
        lead = [f"{label}s"]
    out = out[[*lead, *columns]]
    ints = {c: np.int64 for c in (total, count_name) if c in out}
    out = out.astype(ints).reset_index(drop=True)
    out.attrs["priority"] = lead  # the rank column stays when columns must go to fit the terminal
    return out


def _which(found: list[int], sources: Sources) -> str:
    """The sources with rows in a group ('0-3,5' for ranks, 'n of N' for files)."""
    if sources.column == "Rank":
        ranks = [s.rank for s in sources.items]
        return compress_ranks([ranks[i] for i in found])  # type: ignore[misc]
    return f"{len(set(found))} of {len(sources.items)}"


def stack_tables(parts: Sequence[Part], name: str, sources: Sources) -> pd.DataFrame | None:
    """The finished tables named `name`, one block per source in label order, a Rank/Source column first."""
    order = {str(s.path): i for i, s in enumerate(sources.items)}
    frames = []
    for part in sorted(parts, key=lambda p: order[p.path]):
        piece = part.pieces.get(name)
        if piece is None or piece.table is None:
            continue
        t = piece.table.copy()
        t.insert(0, sources.column, sources.labels[order[part.path]])
        frames.append(t)
    if not frames:
        return None
    out = pd.concat(frames, ignore_index=True)
    for column in out.columns:  # ids and counts of the exports that have them, not floats for the others' NaN
        kinds = [f[column].dtype for f in frames if column in f]
        if out[column].dtype.kind == "f" and all(k.kind in "iu" for k in kinds):
            out[column] = out[column].astype("Int64")
    out.attrs["priority"] = [sources.column, *frames[0].attrs.get("priority", [])]
    return out


def summarised(
    name: str, parts: Sequence[Part], sources: Sources, by_rank: bool, **spec: Any
) -> pd.DataFrame | None:
    """The rows of piece `name` from every part summarised as nsys stats summarises one export's
    (`stat_table`): `spec` names the key columns, the output columns and the count's name."""
    rows = gather_rows(parts, name, sources, spec["keys"], by_rank)
    if rows is None:
        return None
    return stat_table(rows, sources=sources, by_rank=by_rank, **spec)
