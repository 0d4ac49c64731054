"""Range nesting and the innermost enclosing range, on hand-made intervals."""

from __future__ import annotations

import numpy as np

from analysis.intervals import enclosing, levels, parents, sort_ranges

# thread 1: A[0,100] > B[10,50] > C[20,30], D[60,90]; thread 2: E[0,100]
GROUP = np.array([1, 1, 1, 1, 2])
START = np.array([10, 0, 20, 60, 0])
END = np.array([50, 100, 30, 90, 100])


def test_parents_and_levels() -> None:
    order = sort_ranges(GROUP, START, END)
    assert order.tolist() == [1, 0, 2, 3, 4]
    parent = parents(GROUP[order], START[order], END[order])
    assert parent.tolist() == [-1, 0, 1, 0, -1]
    assert levels(parent).tolist() == [0, 1, 2, 1, 0]


def test_enclosing() -> None:
    order = sort_ranges(GROUP, START, END)
    g, s, e = GROUP[order], START[order], END[order]
    parent = parents(g, s, e)
    q_group = np.array([1, 1, 1, 1, 2, 3])
    q_start = np.array([25, 35, 55, 95, 5, 5])
    q_end = np.array([26, 60, 56, 96, 6, 6])
    # C; [35,60] leaves B so A; between B and D: A; A; E; no ranges in group 3
    assert enclosing(g, s, e, parent, q_group, q_start, q_end).tolist() == [2, 0, 0, 0, 4, -1]
