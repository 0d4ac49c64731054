"""Nesting of time ranges and which range encloses a moment, vectorised with numpy.

Ranges are grouped (by thread for NVTX push/pop, by process for the harness's phases); within a group they
nest or are disjoint. A range's parent is the tightest other range of its group that contains it, which for
nested ranges sorted by (start, longest first) is the nearest earlier one that still covers its end.
"""

from __future__ import annotations

import numpy as np


def sort_ranges(group: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Order (group, start, longest first): the order `parents` expects."""
    return np.lexsort((-end, start, group))


def parents(group: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Index of each range's parent (-1 for none). Arrays must already be in `sort_ranges` order."""
    n = len(start)
    parent = np.arange(n, dtype=np.int64) - 1
    if n:
        parent[0] = -1
        parent[1:][group[1:] != group[:-1]] = -1
    # Candidates for i are i-1 and its ancestors; jump over those that end before i ends.
    while True:
        has = parent >= 0
        bad = np.zeros(n, dtype=bool)
        bad[has] = end[parent[has]] < end[has]
        if not bad.any():
            return parent
        parent[bad] = parent[parent[bad]]


def levels(parent: np.ndarray) -> np.ndarray:
    """Nesting depth of each range: 0 for ranges without a parent."""
    level = np.where(parent < 0, 0, -1)
    while (level < 0).any():
        todo = level < 0
        known = level[parent[todo]] >= 0
        idx = np.flatnonzero(todo)[known]
        level[idx] = level[parent[idx]] + 1
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
        sel = np.flatnonzero(q_group == g)
        cand = np.searchsorted(start[lo:hi], q_start[sel], side="right") - 1 + lo
        cand[cand < lo] = -1
        while True:
            has = cand >= 0
            bad = np.zeros(len(cand), dtype=bool)
            bad[has] = end[cand[has]] < q_end[sel][has]
            if not bad.any():
                break
            cand[bad] = parent[cand[bad]]
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
