"""The statistics every `nsys stats` summary prints, computed the way it computes them.

Total, count, mean, median (the mean of the two middle values for an even count), min, max and the sample
standard deviation (n - 1; 0 for a single value), grouped by key columns. Avg, Med and StdDev are rounded to
one decimal half away from zero, like SQLite's round(); Time (%) is each row's share of the listed total.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from analysis.errors import ExportError

if TYPE_CHECKING:  # pandas is imported where used: member and round_half_up serve pandas-free tables
    import pandas as pd

STAT_COLUMNS = ["Total Time (ns)", "Instances", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)", "StdDev (ns)"]
# an int64 total wraps round past this (292 years of ns): times that add up to it are not a capture's
TOTAL_MAX = 2**63
PAST_TOTAL = (
    "times that add up to more than 2**63 ns (292 years) in one row: not a capture's times (a damaged "
    "export or trace): export or record it again"
)


def round_half_up(values: pd.Series | np.ndarray, digits: int = 1) -> np.ndarray:
    """Round half away from zero (SQLite's round), not half to even (numpy's)."""
    x = np.asarray(values, dtype=np.float64)
    scale = 10.0**digits
    return np.sign(x) * np.floor(np.abs(x) * scale + 0.5) / scale


def describe(
    df: pd.DataFrame,
    keys: Sequence[str],
    value: str = "duration",
    *,
    prefix: str = "",
    unit: str = "ns",
    count_name: str = "Instances",
    total_name: str = "Total Time",
) -> pd.DataFrame:
    """One row per group of `keys`: the keys, then Total, count, Avg, Med, Min, Max, StdDev of `value`.

    Groups come out in the order of their first appearance; callers sort.
    """
    group, first = group_ids(df, keys)
    out = aggregate(group, df[value].to_numpy())
    for k in reversed(keys):
        out.insert(0, k, df[k].to_numpy()[first])
    out["std"] = out["std"].fillna(0.0)
    for col in ("mean", "median", "std"):
        out[col] = round_half_up(out[col])
    names = {
        "sum": f"{total_name} ({unit})",
        "size": count_name,
        "mean": f"{prefix}Avg ({unit})",
        "median": f"{prefix}Med ({unit})",
        "min": f"{prefix}Min ({unit})",
        "max": f"{prefix}Max ({unit})",
        "std": f"{prefix}StdDev ({unit})",
    }
    return out.rename(columns=names)


BLOCK = 1 << 20  # rows per groupby


def member(values: np.ndarray, wanted: np.ndarray, block: int = BLOCK) -> np.ndarray:
    """np.isin(values, wanted) for integer arrays, a block of `values` at a time: through a table of the
    keys' span where it is no longer than `values` (string ids, correlationIds), else against the keys
    sorted. np.isin sorts both arrays joined (6M runtime calls against 1M kernels: ~300 MB at once)."""
    test = membership(wanted, len(values))
    out = np.zeros(len(values), dtype=bool)
    for lo in range(0, len(values), block):
        out[lo : lo + block] = test(values[lo : lo + block])
    return out


def distinct(values: np.ndarray) -> np.ndarray:
    """np.unique of a 1-D array (its distinct values, sorted) without np.unique, which imports numpy.ma
    (numpy 2.4: ~0.06 s of a cold `harness kernels`, more on a busy machine)."""
    out = np.sort(values)
    return out[np.concatenate(([True], out[1:] != out[:-1]))] if len(out) else out


def membership(wanted: np.ndarray, n: int) -> Callable[[np.ndarray], np.ndarray]:
    """A test of integer arrays against `wanted` (`member`'s), prepared once for blocks of `n` values in
    all: a table of the keys' span where it is no longer than that (no sort: 6M keys), else the keys
    sorted."""
    wanted = np.asarray(wanted)
    if not len(wanted):
        return lambda part: np.zeros(len(part), dtype=bool)
    low, high = int(wanted.min()), int(wanted.max())
    if high - low < max(n, 1 << 16):
        table = np.zeros(high - low + 1, dtype=bool)
        table[wanted - low] = True

        def in_table(part: np.ndarray) -> np.ndarray:
            hit = np.take(table, part - low, mode="clip")  # no boolean indexing: a third of the time
            hit &= (part >= low) & (part <= high)  # (part - low wraps round for the NULL sentinel)
            return hit

        return in_table

    keys = distinct(wanted)

    def in_keys(part: np.ndarray) -> np.ndarray:
        pos = np.searchsorted(keys, part)
        np.minimum(pos, len(keys) - 1, out=pos)
        return keys[pos] == part

    return in_keys


def aggregate(group: np.ndarray, values: np.ndarray) -> pd.DataFrame:
    """sum, size, mean, median, min, max, std of `values` per group (0, 1, ... in that order).

    Past BLOCK rows, a block of whole groups at a time: pandas' groupby of 6M values holds several times
    their size at once. Each group keeps its values in their order, so each figure is computed as one
    groupby would (the sums and Welford's variance alike)."""
    import pandas as pd

    stats = ["sum", "size", "mean", "median", "min", "max", "std"]
    if len(values) and float(np.abs(values).sum(dtype=np.float64)) >= TOTAL_MAX / 2:  # a total could wrap
        sums = pd.Series(values, dtype=np.float64).groupby(group).sum()
        if (sums.abs() >= TOTAL_MAX).any():
            raise ExportError(PAST_TOTAL)
    if len(group) <= BLOCK:
        return pd.Series(values).groupby(group, sort=True).agg(stats).reset_index(drop=True)
    order = np.argsort(group, kind="stable")
    g = group[order]
    bounds = np.concatenate(([0], np.flatnonzero(g[1:] != g[:-1]) + 1, [len(g)]))  # where groups start
    del g
    parts, lo = [], 0
    while lo < len(order):
        i = np.searchsorted(bounds, lo + BLOCK, side="right") - 1  # whole groups, up to BLOCK rows
        hi = int(bounds[i]) if bounds[i] > lo else int(bounds[np.searchsorted(bounds, lo, side="right")])
        take = order[lo:hi]
        parts.append(pd.Series(values[take]).groupby(group[take], sort=True).agg(stats))
        lo = hi
    return pd.concat(parts).reset_index(drop=True)


def factorize(values: np.ndarray | pd.Series, block: int = 1 << 18) -> tuple[np.ndarray, np.ndarray]:
    """pd.factorize of integers (codes in order of first appearance, the uniques), a block at a time:
    pandas sizes its hash table for every value (6M values: ~100 MB), here for a block and the uniques.
    Other dtypes go to pd.factorize as they are."""
    import pandas as pd

    values = values.to_numpy() if isinstance(values, pd.Series) and values.dtype.kind in "iu" else values
    if not isinstance(values, np.ndarray) or values.dtype.kind not in "iu" or len(values) <= block:
        codes, uniques = pd.factorize(values, sort=False, use_na_sentinel=False)
        return codes, np.asarray(uniques)
    return factorize_blocks(len(values), lambda lo, hi: values[lo:hi], block, np.intp)


def factorize_blocks(
    n: int, part: Callable[[int, int], np.ndarray], block: int, dtype: Any = None
) -> tuple[np.ndarray, np.ndarray]:
    """`factorize` of n integers that `part(lo, hi)` gives a block at a time, each block asked for twice
    (its uniques, then its codes) so that the n values are never held at once. Codes are int32 where the
    uniques allow, unless `dtype` says."""
    import pandas as pd

    blocks = range(0, n, block)
    firsts = [pd.unique(part(lo, lo + block)) for lo in blocks]
    uniques = pd.unique(np.concatenate([np.zeros(0, dtype=np.int64), *firsts]))
    del firsts
    index = pd.Index(uniques)
    codes = np.empty(n, dtype=dtype or (np.int32 if len(uniques) < 2**31 else np.int64))
    for lo in blocks:
        codes[lo : lo + block] = index.get_indexer(part(lo, lo + block))
    return codes, uniques


def _small_codes(column: pd.Series, limit: int) -> tuple[np.ndarray | None, int]:
    """Integers of a short span (ids into a string table) as codes by themselves: value - min, and the
    span (under `limit`); (None, 0) for others, which are factorized."""
    if column.dtype.kind not in "iu" or not len(column):
        return None, 0
    values = column.to_numpy()
    low, high = int(values.min()), int(values.max())
    size = high - low + 1
    if size > min(len(values), limit):
        return None, 0
    return values - low, size


def group_ids(df: pd.DataFrame, keys: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(group number of each row, numbered in order of first appearance; first row of each group).

    One integer key built from the columns' codes groups far faster than pandas' multi-column groupby
    (1M kernels by name and launch shape: 0.13 s of 0.2 s there).
    """
    codes = np.zeros(len(df), dtype=np.int64)
    span = 1
    for k in keys:
        c, size = _small_codes(df[k], (1 << 62) // span)
        if c is None:
            c, uniques = factorize(df[k])
            size = max(len(uniques), 1)
        codes *= size
        codes += c
        span *= size
        del c
    group, uniques = factorize(codes)
    first = np.empty(len(uniques), dtype=np.int64)
    first[group[::-1]] = np.arange(len(group) - 1, -1, -1)
    return group, first


def name_codes(
    ids: np.ndarray | pd.Series, names: Mapping[int, str], missing: str | None = None
) -> tuple[np.ndarray, np.ndarray, pd.Series]:
    """Rows' string ids as an integer code per name: (code of each row, the name of each code, the smallest
    id of each code). Names are looked up once per distinct id, never as a string per row (6M CUDA calls:
    more memory than the calls themselves); two ids with one name share a code. An id with no name gets
    `missing`, or code -1 when `missing` is None."""
    import pandas as pd

    per_row, distinct = pd.factorize(np.asarray(ids))
    named = pd.Series(distinct).map(names)
    if missing is not None:
        named = named.fillna(missing)
    codes, labels = pd.factorize(named)
    first_id = pd.Series(distinct).groupby(codes).min()
    return codes[per_row], labels.to_numpy(), first_id


def figures(values: np.ndarray) -> tuple[int, int, float, float, int, int, float]:
    """(total, count, mean, median, min, max, std) of one group's integer values, as `aggregate` gives
    them: the median the mean of the two middle values for an even count, the sample standard deviation
    two-pass (mean, then squared deviations; 0 for a single value). For tables built a block at a time
    that hold only each group's values (4 bytes each where they fit), not a frame of them."""
    count = len(values)
    if abs(float(values.sum(dtype=np.float64))) >= TOTAL_MAX:  # the int64 sum would wrap round
        raise ExportError(PAST_TOTAL)
    total = int(values.sum(dtype=np.int64))
    half = count // 2
    part = np.partition(values, [half - 1, half] if count > 1 else [half])
    median = float(part[half]) if count % 2 else (float(part[half - 1]) + float(part[half])) / 2
    low, high = int(part.min()), int(part.max())
    del part
    mean = float(total) / count
    std = 0.0
    if count > 1:  # squared in place: one float64 array of the group, not two (4M credits: 32 MB each)
        deviation = values - mean
        np.square(deviation, out=deviation)
        std = float(np.sqrt(deviation.sum() / (count - 1)))
        del deviation
    return total, count, mean, median, low, high, std


def figures_table(
    rows: Iterable[Sequence[Any]], columns: Sequence[str], count_name: str = "Instances"
) -> pd.DataFrame:
    """Rows of `figures` each followed by `columns` as a summary: STAT_COLUMNS (the count named
    `count_name`), total, count, Min and Max as int64 (also with no rows), Avg, Med and StdDev rounded
    half up."""
    import pandas as pd

    stat = [STAT_COLUMNS[0], count_name, *STAT_COLUMNS[2:]]
    out = pd.DataFrame(rows, columns=[*stat, *columns])
    return as_nsys_writes(out.astype({c: np.int64 for c in (stat[0], count_name)}))


def as_nsys_writes(table: pd.DataFrame) -> pd.DataFrame:
    """A table of nsys's figure columns as every table of them writes them: Min and Max whole nanoseconds
    (int64); Avg, Med (of an even count, half way between two) and StdDev to a tenth, rounded half up."""
    table = table.astype({"Min (ns)": np.int64, "Max (ns)": np.int64})
    for col in ("Avg (ns)", "Med (ns)", "StdDev (ns)"):
        table[col] = round_half_up(table[col].astype(np.float64))
    return table


class Repeats:
    """Whether any integer (a correlationId) comes twice across the blocks handed to `seen`, through a
    table of one bit per id of the ids' span (24M runtime calls with ids 70M apart: ~9 MB), not the ids
    themselves (194 MB and a sort). NULL is never a repeat. `seen` returns None once the span passes
    `limit` ids: the caller then answers another way."""

    def __init__(self, limit: int = 1 << 30) -> None:  # 128 MB of bits at most
        self.limit = limit
        self.low = 0
        self.bits = np.zeros(0, dtype=np.uint8)  # id low + i is bit i % 8 of byte i // 8

    def seen(self, ids: np.ndarray, null: int) -> bool | None:
        ids = ids[ids != null]
        if not len(ids):
            return False
        low, high = int(ids.min()), int(ids.max())
        if not len(self.bits):
            self.low = low - low % 8
        new_low = min(low - low % 8, self.low)
        new_high = max(high, self.low + 8 * len(self.bits) - 1)
        if new_high - new_low + 1 > self.limit:
            return None
        if new_low < self.low or new_high >= self.low + 8 * len(self.bits):
            size = (new_high - new_low) // 8 + 1
            if new_low == self.low:  # grown at the top: room for more blocks of the same kind
                size = max(size, 2 * len(self.bits))
            bits = np.zeros(size, dtype=np.uint8)
            at = (self.low - new_low) // 8
            bits[at : at + len(self.bits)] = self.bits
            self.bits, self.low = bits, new_low
        at = ids - self.low
        at.sort()
        if (at[1:] == at[:-1]).any():
            return True
        byte = at >> 3
        bit = np.left_shift(np.uint8(1), (at & 7).astype(np.uint8))
        if (self.bits[byte] & bit).any():
            return True
        starts = np.flatnonzero(np.concatenate(([True], byte[1:] != byte[:-1])))
        self.bits[byte[starts]] |= np.bitwise_or.reduceat(bit, starts)
        return False


def time_percent(total: pd.Series) -> np.ndarray:
    """Each row's share of the sum of `total`, in percent, rounded to one decimal."""
    whole = float(total.astype("float64").sum())  # an int64 sum could wrap round
    if whole == 0:
        return np.zeros(len(total))
    return round_half_up(total.astype("float64") * 100.0 / whole)


def order_like_nsys(df: pd.DataFrame, total: str, tiebreak: Sequence[str]) -> pd.DataFrame:
    """Largest total first; ties in the order SQLite's GROUP BY left them (ascending `tiebreak`)."""
    out = df.sort_values(list(tiebreak), kind="stable")
    return out.sort_values(total, ascending=False, kind="stable").reset_index(drop=True)


def narrow(duration: np.ndarray) -> np.ndarray:
    """Durations in 2 bytes where they fit (under 65.5 us: most kernels and runtime calls of a training
    step), else 4, else 8: a table built a block at a time keeps them, and they are what grows with the
    export. `figures` gives the same numbers from any integer type."""
    if not len(duration) or duration.min() < 0:
        return duration
    top = int(duration.max())
    return duration.astype(np.uint16 if top < 2**16 else np.int32 if top < 2**31 else np.int64)


def durations_by_group(
    blocks: Iterable[dict[str, np.ndarray]], keys: list[str]
) -> Iterator[tuple[tuple[int, ...], np.ndarray]]:
    """(key values, durations) of each group of rows with equal `keys` (groups in no particular order),
    each group's durations in the order of its rows. A block at a time: each key coded (`_KeyCodes`), the
    codes combined into one integer, the groups numbered through a table of that integer's span where it
    is short (else sorted), and the durations split by group with a radix sort of the group numbers."""
    index: dict[tuple[int, ...], int] = {}
    parts: list[list[np.ndarray]] = []
    coders = {k: _KeyCodes() for k in keys}
    for block in blocks:
        durations = narrow(np.asarray(block["duration"], dtype=np.int64))
        if not len(durations):
            continue
        code = np.zeros(len(durations), dtype=np.int64)
        decode = []
        span = 1
        for k in keys:
            codes, size, values = coders[k](np.asarray(block[k]))
            code *= size
            code += codes
            span *= size
            decode.append((size, values))
            del codes
        if span <= 1 << 22:
            present = np.zeros(span, dtype=bool)
            present[code] = True
            found = np.flatnonzero(present)
            del present
            number = np.empty(span, dtype=np.int32)
            number[found] = np.arange(len(found), dtype=np.int32)
            group = number[code]
            del number
        else:
            found, group = np.unique(code, return_inverse=True)
            group = group.reshape(-1)
        del code
        ordered = group.astype(np.int16 if len(found) < 2**15 else np.int32)  # stable: radix sort
        order = np.argsort(ordered, kind="stable")
        bounds = np.cumsum(np.bincount(group, minlength=len(found)))[:-1]
        del group, ordered
        columns = []
        for size, values in reversed(decode):  # each group's key values from its combined code
            found, rest = np.divmod(found, size)
            columns.append(values(rest).tolist())
        for key, piece in zip(zip(*reversed(columns), strict=True), np.split(durations[order], bounds),
                              strict=True):  # fmt: skip
            g = index.setdefault(key, len(parts))
            if g == len(parts):
                parts.append([])
            parts[g].append(piece)
        del order
    for key, g in index.items():
        pieces = parts[g]
        parts[g] = []
        yield key, pieces[0] if len(pieces) == 1 else np.concatenate(pieces)


class _KeyCodes:
    """Codes of one key column's values, block after block: (code of each value, how many codes, code ->
    value). The value less the block's smallest where their span is no longer than the block (string
    ids), else its place among the distinct values seen so far, kept sorted: a search per value, and a
    sort only of values not seen before, not of every block (launch shapes: np.unique of each block of
    1M kernels was a third of `kernels`' grouping)."""

    def __init__(self) -> None:
        self.known = np.empty(0, dtype=np.int64)

    def __call__(self, values: np.ndarray) -> tuple[np.ndarray, int, Callable[[np.ndarray], np.ndarray]]:
        low, high = int(values.min()), int(values.max())
        if high - low < max(len(values), 1 << 16):
            return values - low, high - low + 1, lambda c: c + low
        new = values
        if len(self.known):
            at = np.searchsorted(self.known, values)
            miss = self.known[np.minimum(at, len(self.known) - 1)] != values
            new = values[miss]
        if len(new):
            self.known = distinct(np.concatenate((self.known, new)))
            at = np.searchsorted(self.known, values)
        known = self.known
        return at, len(known), lambda c: known[c]


def pair_keys(
    pids: np.ndarray, ids: np.ndarray, other_pids: np.ndarray, other_ids: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(process, id) pairs of two tables as one int64 each, equal exactly where the pairs are equal: what
    `member` tests 6M CUDA calls' pairs with, where a pandas MultiIndex builds a hash of tuples. Each key
    is the process's rank among the few processes times the ids' span, plus the id's offset in it, built in
    place (one int64 array per table)."""
    import pandas as pd

    processes = distinct(np.concatenate([pd.unique(pids), pd.unique(other_pids)]))
    spans = [(int(x.min()), int(x.max())) for x in (ids, other_ids) if len(x)]
    low, high = min((lo for lo, _ in spans), default=0), max((hi for _, hi in spans), default=0)
    span = high - low + 1
    if span * max(len(processes), 1) >= 2**62:  # ids spread too wide (a NULL among them): numbered instead
        n = len(pids)
        process = np.searchsorted(processes, np.concatenate([pids, other_pids]))
        code, uniques = pd.factorize(np.concatenate([ids, other_ids]))
        key = process.astype(np.int64) * len(uniques) + code
        return key[:n], key[n:]

    def keyed(p: np.ndarray, i: np.ndarray) -> np.ndarray:
        key = np.searchsorted(processes, p).astype(np.int64, copy=False)
        key *= span
        key -= low  # before adding the ids: no sum of two large ids wraps round
        key += i
        return key

    return keyed(pids, ids), keyed(other_pids, other_ids)
