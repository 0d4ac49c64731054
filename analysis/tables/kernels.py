"""The CUDA kernel summary, like `nsys stats -r gpukernsum` (cuda_gpu_kern_sum in newer nsys).

The kernels are read a block at a time (`Trace.blocks`: from the cache, or from the export while it is
cached), and each block's durations are split by launch shape (name, grid, block) as they come: what
stays is the durations alone, since the median needs them all, 4 bytes a kernel (8 for one of 2.1 s or
more); the key columns are let go block by block. So memory grows with the export by those bytes, not by
the four columns read (1M kernels: 4 MB against the ~80 MB pandas held). Nothing here imports pandas
unless asked for a DataFrame: `kernel_table` gives the table as `analysis.trace.results.Rows`, which `harness
kernels` renders without pandas (its import was most of a warm command's time); `kernel_summary` gives
the same table as a DataFrame.

Statistics as analysis.stats computes them (the way nsys does): total, count, mean, the median (the mean of
the two middle values for an even count), min, max and the sample standard deviation (0 for one kernel),
Avg, Med and StdDev rounded half away from zero to one decimal; largest total first, ties in the order of
(name id, grid, block) as SQLite's GROUP BY leaves them (2022.4), or from nsys 2023 (`ORDER BY total DESC,
instances, name`) by fewer instances, then by name.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal

import numpy as np

from analysis.readers import NULL
from analysis.stats import durations_by_group, round_half_up
from analysis.tables.stats_format import DEFAULT as DEFAULT_FORMAT
from analysis.tables.stats_format import kernels_by_name, producer
from analysis.trace.frames import BLOCK_ROWS, NAME_COLUMN
from analysis.trace.results import Rows
from analysis.trace.trace import Trace

if TYPE_CHECKING:
    import pandas as pd

KERNSUM_COLUMNS = [
    "Time (%)", "Total Time (ns)", "Instances", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)",
    "StdDev (ns)", "GridXYZ", "BlockXYZ", "Name",
]  # fmt: skip
KINDS = dict(zip(KERNSUM_COLUMNS, "fiiffiifOOO", strict=True))  # the columns' dtype kinds, as pandas has them

Names = Literal["demangled", "base", "mangled"]
By = Literal["shape", "name"]
GRID = ((32, 16), (0xFFFF, 0xFFFF))  # dimensions packed as (x << 32) + (y << 16) + z
BLOCK = ((22, 11), (0x7FF, 0x7FF))


def dims(value: int, shifts: tuple[int, int], masks: tuple[int, int]) -> str:
    """'%4d %4d %4d' of dimensions packed as (x << s0) + (y << s1) + z, the way nsys prints them; unknown
    for NULL (present in the trace but not three dimensions: a Kineto grid of "zz")."""
    if value == NULL:
        return "unknown"
    return f"{value >> shifts[0]:4d} {(value >> shifts[1]) & masks[0]:4d} {value & masks[1]:4d}"


def dims_text(packed: pd.Series, shifts: tuple[int, int], masks: tuple[int, int]) -> pd.Series:
    import pandas as pd

    return pd.Series([dims(v, shifts, masks) for v in packed.tolist()], index=packed.index)


def grid_text(packed: pd.Series) -> pd.Series:
    return dims_text(packed, *GRID)


def block_text(packed: pd.Series) -> pd.Series:
    return dims_text(packed, *BLOCK)


def title(source: str) -> str:
    """The kernels table's title, whichever way it is computed."""
    return f"CUDA kernels in {source}"


def kernel_table(
    trace: Trace,
    *,
    names: Names = "demangled",
    by: By | None = None,
    range_name: str | None = None,
    stats_format: str = DEFAULT_FORMAT,
) -> Rows:
    """GPU time per kernel (and launch shape), largest first, in the columns of gpukernsum, without pandas.

    names: demangled (default), base (no arguments or templates) or mangled (falls back to demangled
    where the export has no mangled names). by="name" merges launch shapes (no GridXYZ/BlockXYZ); by
    default the `stats_format` decides (analysis.tables.stats_format: by name from nsys 2023.1, as
    cuda_gpu_kern_sum). range_name keeps only kernels launched while an NVTX range of that name was open in
    their process.
    """
    trace.require("kernels", "CUDA kernel data")
    by = by or kernel_grouping(trace, stats_format)
    notes: list[str] = []
    name = NAME_COLUMN[names]
    keys = [name, "grid", "block"] if by == "shape" else [name]
    blocks: Iterable[dict[str, np.ndarray]]
    if range_name is None:
        blocks = trace.blocks("kernels", [*keys, "duration"])
    else:
        # imported here: it imports pandas, which the table without a range never needs
        from analysis.tables.nvtx_gpu import kernels_in_ranges

        kern = kernels_in_ranges(trace, range_name, names=names, extra=("grid", "block"))
        notes += kern.attrs.get("notes", [])
        given = ["name_id", *keys[1:], "duration"]  # kernels_in_ranges names the name column name_id
        blocks = [
            {
                k: kern[c].to_numpy()[lo : lo + BLOCK_ROWS]
                for k, c in zip([*keys, "duration"], given, strict=True)
            }
            for lo in range(0, len(kern), BLOCK_ROWS)
        ]
    rows = []
    for key, durations in durations_by_group(blocks, keys):  # one group's durations at a time, let go after
        count = len(durations)
        total = int(durations.sum())
        half = count // 2
        part = np.partition(durations, [half - 1, half] if count > 1 else [half])
        median = float(part[half]) if count % 2 else (float(part[half - 1]) + float(part[half])) / 2
        mean = float(total) / count
        std = 0.0
        if count > 1:
            std = float(np.sqrt(np.square(durations - mean).sum() / (count - 1)))
        shape = [dims(key[1], *GRID), dims(key[2], *BLOCK)] if by == "shape" else []
        rows.append([total, count, mean, median, int(part.min()), int(part.max()), std, *shape, key[0]])
        del part, durations
    strings = trace.strings({r[-1] for r in rows})
    for r in rows:
        r.insert(-1, strings.get(r[-1], ""))
    rows.sort(key=lambda r: (r[-1], *r[7:-2]))  # ties: name id, grid and block text ascending
    if kernels_by_name(stats_format, producer(trace)):  # 2023's reports: ties by fewer instances, then name
        rows.sort(key=lambda r: (-r[0], r[1], r[-2]))
    else:
        rows.sort(key=lambda r: -r[0])  # stable: largest total first
    totals = np.array([r[0] for r in rows], dtype=np.int64)
    whole = float(totals.sum())
    share = round_half_up(totals.astype(np.float64) * 100.0 / whole) if whole else np.zeros(len(rows))
    rounded = round_half_up(np.array([[*r[2:4], r[6]] for r in rows], dtype=np.float64).reshape(-1, 3))
    columns = [c for c in KERNSUM_COLUMNS if by == "shape" or c not in ("GridXYZ", "BlockXYZ")]
    table = [
        [pct, r[0], r[1], avg, med, r[4], r[5], std, *r[7:-1]]
        for pct, r, (avg, med, std) in zip(share.tolist(), rows, rounded.tolist(), strict=True)
    ]
    return Rows.computed(columns, [KINDS[c] for c in columns], table, {"notes": [*trace.notes, *notes]})


def kernel_grouping(trace: Trace, stats_format: str = DEFAULT_FORMAT) -> By:
    """How the kernel summary of `stats_format` groups kernels: by name (2023.1 and later) or by shape."""
    return "name" if kernels_by_name(stats_format, producer(trace)) else "shape"


def kernel_summary(
    trace: Trace,
    *,
    names: Names = "demangled",
    by: By | None = None,
    range_name: str | None = None,
    stats_format: str = DEFAULT_FORMAT,
) -> pd.DataFrame:
    """`kernel_table` as a DataFrame."""
    table = kernel_table(trace, names=names, by=by, range_name=range_name, stats_format=stats_format)
    return table.frame()
