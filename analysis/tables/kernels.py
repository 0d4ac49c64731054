"""The CUDA kernel summary, like `nsys stats -r gpukernsum` (cuda_gpu_kern_sum in newer nsys).

The kernels are read a block at a time (`Trace.blocks`: from the cache, or from the export while it is
cached), and each block's durations are split by launch shape (name, grid, block) as they come: what
stays is the durations alone, since the median needs them all, 4 bytes a kernel (8 for one of 2.1 s or
more); the key columns are let go block by block. So memory grows with the export by those bytes, not by
the four columns read (1M kernels: 4 MB against the ~80 MB pandas held). Nothing here imports pandas
unless asked for a DataFrame: `kernel_table` gives the table as `analysis.trace.results.Rows`, which `harness
kernels` renders without pandas (its import was most of a warm command's time); `kernel_summary` gives
the same table as a DataFrame. Nothing here imports numpy either until a table is computed: the registry
reads `TABLE` on every command.

Statistics as analysis.stats computes them (the way nsys does): total, count, mean, the median (the mean of
the two middle values for an even count), min, max and the sample standard deviation (0 for one kernel),
Avg, Med and StdDev rounded half away from zero to one decimal; largest total first, ties in the order of
(name id, grid, block) as SQLite's GROUP BY leaves them (2022.4), or from nsys 2023 (`ORDER BY total DESC,
instances, name`) by fewer instances, then by name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypedDict, Unpack, get_args

from analysis.errors import OptionsError
from analysis.tables.range_kernels import kernels_in_ranges
from analysis.tables.stats_format import DEFAULT as DEFAULT_FORMAT
from analysis.tables.stats_format import STATS_FORMAT, kernels_by_name, producer
from analysis.tables.table import HTA, KERNEL_STATS, TOP, InSummary, Option, Table, one_frame, one_piece
from analysis.trace.multi import Combined, Grouped, Part, Sources, categories

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from analysis.trace.results import Rows
    from analysis.trace.trace import Trace

KERNSUM_COLUMNS = [
    "Time (%)", "Total Time (ns)", "Instances", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)",
    "StdDev (ns)", "GridXYZ", "BlockXYZ", "Name",
]  # fmt: skip
KINDS = dict(zip(KERNSUM_COLUMNS, "fiiffiifOOO", strict=True))  # the columns' dtype kinds, as pandas has them

Names = Literal["demangled", "base", "mangled"]
By = Literal["shape", "name"]
WHAT = "CUDA kernels"  # its title: "CUDA kernels in SOURCE", whichever way it is computed
GRID = ((32, 16), (0xFFFF, 0xFFFF))  # dimensions packed as (x << 32) + (y << 16) + z
BLOCK = ((22, 11), (0x7FF, 0x7FF))


def dims(value: int, shifts: tuple[int, int], masks: tuple[int, int]) -> str:
    """'%4d %4d %4d' of dimensions packed as (x << s0) + (y << s1) + z, the way nsys prints them; unknown
    for NULL (present in the trace but not three dimensions: a Kineto grid of "zz")."""
    from analysis.readers import NULL  # not at the top: it loads ctypes, which `harness --help` never needs

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


class KernelOptions(TypedDict, total=False):
    """What the kernel tables take besides the trace (`kernel_table`, `kernel_summary`, `kernel_rows_named`).

    names: demangled (default), base (no arguments or templates) or mangled (falls back to demangled
    where the export has no mangled names). by: "name" merges launch shapes (no GridXYZ/BlockXYZ); by
    default the `stats_format` decides (analysis.tables.stats_format: by name from nsys 2023.1, as
    cuda_gpu_kern_sum). range_name: only kernels launched while an NVTX range of that name was open in
    their process.
    """

    names: Names
    by: By | None
    range_name: str | None
    stats_format: str


def _asked(
    trace: Trace,
    names: Names = "demangled",
    by: By | None = None,
    range_name: str | None = None,
    stats_format: str = DEFAULT_FORMAT,
) -> tuple[Names, By, str | None, str]:
    """KernelOptions with their defaults, `by` decided; the trace must have kernels. A value none of the
    tables knows (from Python: the command line's are checked by their options) is refused, not read as
    another."""
    if names not in get_args(Names) or by not in (None, *get_args(By)):
        wrong = f"names={names!r}" if names not in get_args(Names) else f"by={by!r}"
        raise OptionsError(f"{wrong}: names is one of {', '.join(get_args(Names))}; by one of "
                           f"{', '.join(get_args(By))} (None: as the stats format does)")  # fmt: skip
    trace.require("kernels", "CUDA kernel data")
    return names, by or kernel_grouping(trace, stats_format), range_name, stats_format


def kernel_table(trace: Trace, **options: Unpack[KernelOptions]) -> Rows:
    """GPU time per kernel (and launch shape), largest first, in the columns of gpukernsum, without pandas."""
    import numpy as np

    from analysis.stats import durations_by_group, round_half_up
    from analysis.trace.frames import BLOCK_ROWS, NAME_COLUMN
    from analysis.trace.results import Rows  # not at the top: `harness --help` reads TABLE, and not it

    names, by, range_name, stats_format = _asked(trace, **options)
    notes: list[str] = []
    name = NAME_COLUMN[names]
    keys = [name, "grid", "block"] if by == "shape" else [name]
    blocks: Iterable[dict[str, np.ndarray]]
    if range_name is None:
        blocks = trace.blocks("kernels", [*keys, "duration"])
    else:
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


def kernel_summary(trace: Trace, **options: Unpack[KernelOptions]) -> pd.DataFrame:
    """`kernel_table` as a DataFrame."""
    return kernel_table(trace, **options).frame()


# --- several exports: what each contributes, how they combine ---------------------------------------------


def kernel_rows_named(trace: Trace, **options: Unpack[KernelOptions]) -> pd.DataFrame:
    """One row per kernel: Name (and GridXYZ, BlockXYZ by shape; by default as `stats_format` groups
    kernels) as categories, duration."""
    import pandas as pd

    from analysis.joins.runtime import kernel_rows

    names, by, range_name, _ = _asked(trace, **options)
    if range_name is None:
        kern = kernel_rows(trace, ("name_id", "grid", "block", "duration"), names=names)
    else:
        kern = kernels_in_ranges(trace, range_name, names=names, extra=("grid", "block"))
    codes, ids = pd.factorize(kern["name_id"], sort=False)
    strings = trace.strings(ids)
    labels = pd.Index([strings.get(int(i), "") for i in ids], dtype=object)
    if labels.is_unique:
        name = pd.Categorical.from_codes(codes, categories=labels)
    else:
        name = categories(labels[codes])
    out: dict[str, Any] = {"Name": name}
    if by == "shape":
        for col, raw, text in (("GridXYZ", "grid", grid_text), ("BlockXYZ", "block", block_text)):
            c, uniq = pd.factorize(kern[raw], sort=False)
            out[col] = pd.Categorical.from_codes(c, categories=text(pd.Series(uniq)).to_numpy())
    out["duration"] = kern["duration"].to_numpy()
    return pd.DataFrame(out)


def kernel_spec(by: str) -> dict[str, Any]:
    """How kernels summarise over several exports: by name and launch shape, or (`by` "name") by name."""
    keys = ["Name", "GridXYZ", "BlockXYZ"] if by == "shape" else ["Name"]
    return {"keys": keys, "columns": [*KERNEL_STATS, *keys[1:], "Name"]}


def _has_shape(part: Part) -> bool:
    piece = part.pieces.get("kernels")
    if piece is None or piece.rows is None:
        return True
    rows = piece.rows  # a frame, or a worker's rows grouped by their keys (analysis.trace.multi.Grouped)
    return "GridXYZ" in (rows.keys if isinstance(rows, Grouped) else rows.columns)


# --- the table -------------------------------------------------------------------------------------------


def _view(trace: Trace, hta: bool) -> Trace:
    """The trace, or with `hta` Holistic Trace Analysis's view of it (analysis.hta.hta_rules)."""
    if not hta:
        return trace
    from analysis.hta.hta_rules import hta_view

    return hta_view(trace)  # type: ignore[return-value]


def _in_view(compute: Callable[..., Any]) -> Callable[..., Any]:
    """`compute(trace, **options)` of the trace as `hta` asks (`_view`)."""

    def of(trace: Trace, hta: bool = False, **options: Any) -> Any:
        return compute(_view(trace, hta), **options)

    return of


def _combine(out: Combined, parts: Sequence[Part], sources: Sources, by_rank: bool,
             options: dict[str, Any]) -> None:  # fmt: skip
    from analysis.trace.multi_combine import summarised

    # by default each export's rows are grouped as its stats format says: by shape only where all are
    by = options.get("by") or ("shape" if all(_has_shape(p) for p in parts) else "name")
    table = summarised("kernels", parts, sources, by_rank, **kernel_spec(by))
    label = {str(s.path): s.label for s in sources.items}
    shaped = [label[p.path] for p in parts if "kernels" in p.pieces and _has_shape(p)]
    if table is not None and by == "name" and shaped:  # the format of each export's own nsys: it differs
        table.attrs["notes"] = [
            *table.attrs.get("notes", []),
            f"kernels merged by name over every export, also those of {', '.join(shaped)}, whose nsys prints "
            "a row per launch shape (gpukernsum): --by shape or --stats-format 2022.4 gives those rows",
        ]
    out.tables.append(("kernels", table))  # type: ignore[arg-type]


def _prepare(base: bool = False, mangled: bool = False, by: By | None = None, range_name: str | None = None,
             hta: bool = False, stats_format: str = DEFAULT_FORMAT) -> dict[str, Any]:  # fmt: skip
    if base and mangled:
        raise OptionsError("--base and --mangled exclude each other: pick one")
    names = "base" if base else "mangled" if mangled else "demangled"
    return {"names": names, "by": by, "range_name": range_name, "hta": hta, "stats_format": stats_format}


BASE = Option("base", "--base", "Kernel base names (no arguments, templates).")
MANGLED = Option("mangled", "--mangled", "Mangled kernel names, where recorded.")
BY = Option(
    "by", "--by",
    "shape: one row per name and launch shape (gpukernsum, cuda_gpu_kern_gb_sum); name: merge shapes "
    "(cuda_gpu_kern_sum). Default: as --stats-format does.",
    str, None, choices=("shape", "name"), show_default=False,
)  # fmt: skip
RANGE = Option(
    "range_name", "--range", "Only kernels launched inside NVTX ranges of this name.",
    str, None, metavar="<name>", names="an NVTX range's name",
)  # fmt: skip

TABLE = Table(
    "kernels",
    summary="GPU time per CUDA kernel (nsys stats -r gpukernsum).",
    help="GPU time per CUDA kernel, like `nsys stats -r cuda_gpu_kern_sum` (2022.4: gpukernsum).",
    mirrors="nsys stats -r gpukernsum; HTA get_gpu_kernel_breakdown",
    one=one_frame(WHAT, _in_view(kernel_summary)),
    pieces=one_piece("kernels", rows=_in_view(kernel_rows_named)),
    combine=_combine,
    options=(TOP, BASE, MANGLED, BY, RANGE, HTA, STATS_FORMAT),
    prepare=_prepare,
    order=10,
    title="CUDA kernels",
    deciding=("Name", "Total Time (ns)", "Time (%)", "Instances"),
    served_from_cache=True,
    not_kept_with=("hta",),
    without_pandas=one_frame(WHAT, kernel_table),
    in_summary=InSummary(
        (("CUDA kernels", "gpukernsum"),),
        build=lambda by, stats_format: [lambda trace: kernel_summary(trace, stats_format=stats_format)],
        options=lambda by, stats_format: {"by": "name"},  # over several exports: launch shapes merged
    ),
    example="harness kernels report.nsys-rep --by name --top 10",
)
