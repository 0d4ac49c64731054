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


def _nested(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """n ranges on 3 threads, each thread's properly nested (a tree of random depth) or disjoint."""
    group, start, end = [], [], []
    for thread in range(3):
        stack: list[int] = []
        t = 0
        for _ in range(n // 3):
            t += int(rng.integers(1, 5))
            while stack and rng.random() < 0.4:  # close some open ranges
                end[stack.pop()] = t
                t += 1
            group.append(thread)
            start.append(t)
            end.append(-1)
            stack.append(len(start) - 1)
        for i in reversed(stack):
            t += 1
            end[i] = t
    return np.array(group), np.array(start), np.array(end)


def test_parents_by_blocks_and_through_an_order_equal_the_one_pass(monkeypatch) -> None:
    import analysis.intervals as iv

    group, start, end = _nested(np.random.default_rng(7), 3000)
    order = sort_ranges(group, start, end)
    whole = parents(group[order], start[order], end[order])
    assert (whole >= 0).sum() > 1000 and levels(whole).max() >= 4  # a real tree, deep and wide
    monkeypatch.setattr(iv, "BLOCK", 64)  # many blocks, parents in earlier blocks and in the same one
    assert parents(group[order], start[order], end[order]).tolist() == whole.tolist()
    assert parents(group, start, end, order).tolist() == whole.tolist()  # no sorted copies
    # the walk up by levels against a walk per range
    depth = [0 if p < 0 else -1 for p in whole]
    for i, p in enumerate(whole):
        if p >= 0:
            depth[i] = depth[p] + 1  # parents come first in this order
    assert levels(whole).tolist() == depth
    # enclosing in query blocks against one block
    q = np.sort(np.random.default_rng(8).integers(0, int(end.max()), 500))
    qg = np.random.default_rng(9).integers(0, 3, 500)
    hit = enclosing(group[order], start[order], end[order], whole, qg, q, q + 1)
    monkeypatch.setattr(iv, "BLOCK", 1 << 18)
    assert hit.tolist() == enclosing(group[order], start[order], end[order], whole, qg, q, q + 1).tolist()
    assert (hit >= 0).sum() > 100
