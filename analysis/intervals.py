"""Nesting of time ranges and which range encloses a moment, vectorised with numpy.

Ranges are grouped (by thread for NVTX push/pop, by process for the harness's phases); within a group they
nest or are disjoint. A range's parent is the tightest other range of its group that contains it, which for
nested ranges sorted by (start, longest first) is the nearest earlier one that still covers its end.
"""

from __future__ import annotations

import numpy as np

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
