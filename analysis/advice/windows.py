"""Events against many time windows at once (steps, phase ranges, gaps), for the health checks and rules that
line up a capture's events per step: each process's events sorted once and every window's bounds searched,
not every event compared once per window (hundreds of steps by millions of calls). Windows are half-open,
[start, end), as the checks read them."""

from __future__ import annotations

import numpy as np
import pandas as pd


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
    for p in pd.unique(w_pid):
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
