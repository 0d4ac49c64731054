"""Time ranges, vectorised with numpy: how they nest, and events against many windows at once.

Nesting: ranges are grouped (by thread for NVTX push/pop, by process for the harness's phases); within a group
they nest or are disjoint. A range's parent is the tightest other range of its group that contains it, which
for nested ranges sorted by (start, longest first) is the nearest earlier one that still covers its end.

Windows (steps, phase ranges, gaps), for the health checks and rules that line up a capture's events per
step: each process's events sorted once and every window's bounds searched, not every event compared once
per window (hundreds of steps by millions of calls). Windows are half-open, [start, end), as the checks read
them; `clipped_sums` gives the time of intervals inside each window.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

BLOCK = 1 << 18  # ranges per block in `parents`


def sort_ranges(group: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Order (group, start, longest first): the order `parents` expects."""
    return np.lexsort((-end, start, group))


def parents(
    group: np.ndarray, start: np.ndarray, end: np.ndarray, order: np.ndarray | None = None
) -> np.ndarray:
    """Index of each range's parent (-1 for none), in `sort_ranges` order: the arrays are in that order,
    or `order` puts them in it (then no sorted copy of them is made: 1.8M ranges, 42 MB)."""
    n = len(start)

    def at(values: np.ndarray, i: np.ndarray) -> np.ndarray:
        return values[i] if order is None else values[order[i]]

    parent = np.arange(-1, n - 1, dtype=np.int64)
    # Candidates for i are i-1 and its ancestors; jump over those that end before i ends. A block at a
    # time, in order: the ranges before a block have their parents already, so a block's temporaries are
    # all the memory this takes (1.8M NVTX ranges: ~60 MB at once otherwise).
    for lo in range(0, n, BLOCK):
        todo = np.arange(max(lo, 1), min(lo + BLOCK, n))
        first = at(group, todo) != at(group, todo - 1)  # the first range of its group has no parent
        parent[todo[first]] = -1
        todo = todo[~first]
        while len(todo):
            todo = todo[at(end, parent[todo]) < at(end, todo)]
            parent[todo] = parent[parent[todo]]
            todo = todo[parent[todo] >= 0]
    return parent


def levels(parent: np.ndarray) -> np.ndarray:
    """Nesting depth of each range: 0 for ranges without a parent (int32: the count of its ancestors,
    found by walking up from the ranges that have one, one level a round)."""
    level = (parent >= 0).astype(np.int32)
    at = np.flatnonzero(level)
    up = parent[at]
    while len(at):
        up = parent[up]
        deeper = up >= 0
        at, up = at[deeper], up[deeper]
        level[at] += 1
    return level


def enclosing(
    group: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    parent: np.ndarray,
    q_group: np.ndarray,
    q_start: np.ndarray,
    q_end: np.ndarray,
) -> np.ndarray:
    """For each query [q_start, q_end] the innermost range of the same group containing it, or -1.

    The range arrays are in `sort_ranges` order with `parent` from `parents`.
    """
    out = np.full(len(q_start), -1, dtype=np.int64)
    if not len(start) or not len(q_start):
        return out
    bounds = {g: (lo, hi) for g, lo, hi in _runs(group)}
    for g in np.unique(q_group):
        if g not in bounds:
            continue
        lo, hi = bounds[g]
        where = np.flatnonzero(q_group == g)
        for at in range(0, len(where), BLOCK):  # a block of queries at a time: their temporaries are small
            sel = where[at : at + BLOCK]
            cand = np.searchsorted(start[lo:hi], q_start[sel], side="right") - 1 + lo
            cand[cand < lo] = -1
            todo = np.flatnonzero(cand >= 0)
            q = q_end[sel]
            while len(todo):
                todo = todo[end[cand[todo]] < q[todo]]
                cand[todo] = parent[cand[todo]]
                todo = todo[cand[todo] >= 0]
            out[sel] = cand
    return out


def _runs(group: np.ndarray) -> list[tuple[int, int, int]]:
    """(value, first index, end index) of each run of equal values in a sorted array."""
    if not len(group):
        return []
    cuts = np.flatnonzero(group[1:] != group[:-1]) + 1
    firsts = np.concatenate(([0], cuts))
    ends = np.concatenate((cuts, [len(group)]))
    return [(int(group[a]), int(a), int(b)) for a, b in zip(firsts, ends, strict=True)]


def slices(
    pid: np.ndarray, t: np.ndarray, windows: pd.DataFrame
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(order, lo, hi): `order` sorts the events (`pid`, time `t`) by process and time; window i (rows of
    pid, start, end) holds the events order[lo[i]:hi[i]], those of its process with start <= t < end,
    compared as `t`'s dtype compares (a float `t` against its windows as floats)."""
    order = np.lexsort((t, pid))
    ps, ts = pid[order], t[order]
    w_pid = windows["pid"].to_numpy()
    starts, ends = windows["start"].to_numpy(), windows["end"].to_numpy()
    lo, hi = np.zeros(len(windows), dtype=np.int64), np.zeros(len(windows), dtype=np.int64)
    for p in np.unique(w_pid):
        at = w_pid == p
        a, b = np.searchsorted(ps, p, "left"), np.searchsorted(ps, p, "right")
        times = ts[a:b]
        lo[at] = a + np.searchsorted(times, starts[at].astype(times.dtype), "left")
        hi[at] = a + np.searchsorted(times, ends[at].astype(times.dtype), "left")
    return order, lo, np.maximum(hi, lo)


def in_windows(
    pid: np.ndarray, t: np.ndarray, weights: dict[str, np.ndarray | None], windows: pd.DataFrame
) -> dict[str, np.ndarray]:
    """Per window (`slices`): its events counted (a weight of None) or each weight summed over them."""
    order, lo, hi = slices(pid, t, windows)
    out = {}
    for k, w in weights.items():
        if w is None:
            out[k] = hi - lo
        else:
            total = np.concatenate(([0], np.cumsum(w[order], dtype=np.int64)))
            out[k] = total[hi] - total[lo]
    return out


def covered(pid: np.ndarray, t: np.ndarray, spans: list[tuple[int, int, int]]) -> np.ndarray:
    """Which events (`pid`, time `t`) lie in a span (start, end, pid) of their process: start <= t < end."""
    inside = np.zeros(len(t), dtype=bool)
    spans = [(s, e, p) for s, e, p in spans if s < e]  # an empty span holds nothing
    for p in {p for _, _, p in spans}:
        mine = np.flatnonzero(pid == p)
        inside[mine] = _open_at(t[mine], [(s, e) for s, e, q in spans if q == p])
    return inside


def covered_any(t: np.ndarray, spans: list[tuple[int, int]]) -> np.ndarray:
    """Which times `t` lie in a span (start, end) of any process: start <= t < end."""
    return _open_at(t, [(s, e) for s, e in spans if s < e])


def _open_at(t: np.ndarray, spans: list[tuple[int, int]]) -> np.ndarray:
    """Spans (each ending after it starts) open at each t: those started by t less those ended by t."""
    if not spans:
        return np.zeros(len(t), dtype=bool)
    kind = np.result_type(t.dtype, np.int64)
    starts = np.sort(np.array([s for s, _ in spans]).astype(kind))
    ends = np.sort(np.array([e for _, e in spans]).astype(kind))
    at = t.astype(kind, copy=False)
    return np.searchsorted(starts, at, "right") > np.searchsorted(ends, at, "right")


def clipped_sums(starts: np.ndarray, ends: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per window [lo[i], hi[i]): sum over k of clip(ends[k], lo, hi) - clip(starts[k], lo, hi), the time of
    the intervals (start, end) inside it (0 where hi < lo), in integers. Each clip is min(v, hi) plus
    max(0, lo - v), summed from the sorted values and their running sums, measured from the smallest time
    so that no running sum of large clock values wraps."""
    lo, hi = np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64)
    out = np.zeros(len(lo), dtype=np.int64)
    if not len(starts) or not len(lo):
        return out
    starts, ends = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
    base = min(starts.min(), ends.min(), lo.min(), hi.min())

    def clips(values: np.ndarray) -> np.ndarray:
        v = np.sort(values - base)
        run = np.concatenate(([0], np.cumsum(v)))
        x_hi, x_lo = hi - base, lo - base
        below_hi = np.searchsorted(v, x_hi, "left")
        below_lo = np.searchsorted(v, x_lo, "left")
        return run[below_hi] + x_hi * (len(v) - below_hi) + x_lo * below_lo - run[below_lo]

    ok = lo <= hi
    out[ok] = (clips(ends) - clips(starts))[ok]
    return out
