"""nvtx-gpu's thread mode in one pass over time: kernels with their launch calls a block at a
time (`analysis.joins.launch_join`), the NVTX push/pop ranges a block at a time beside them, and the credits
(kernel, range) aggregated per row group as each block is done. What grows with the export is the credits'
durations (4 bytes each, for the exact medians); the rest is a block's worth.

A block of kernels needs the ranges that can hold one of its launch calls: those that start before the
block's last call and end after its first. The ranges come in start order, and a range that ended before
a block's first call is let go (the calls to come start later): within a thread, the tightest range around
a call found among those is the one found among all (`analysis.intervals`: the ranges let go end before
any range kept and are never a parent of one). Where the export is not in that order (ranges or calls
going back in time), `Unordered` is raised and the caller takes the whole-table way.

The rows are the same as `analysis.joins.nvtx_credits._credits` makes them, numbered in the same order (first
appearance among the credits: every kernel's innermost range in kernel order, then the ranges around
those, ...), and each row's durations are kept in that order, so the statistics are the same to the bit.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis.intervals import enclosing, parents, sort_ranges
from analysis.joins.launch_join import SWEEP_ROWS, Stream, Unordered, launch_blocks, numbered
from analysis.nvtx_names import grouped_categories
from analysis.readers import trim_heap
from analysis.readers.global_ids import thread_key
from analysis.stats import figures, narrow
from analysis.trace.trace import Trace

NO_THREAD = -1
RANGE_READ = ["start", "end", "global_tid", "pushpop", "name", "domain"]
LEVEL_SHIFT = 40  # first appearance: level << 40 | kernel row
TRIM_EVERY = 8  # blocks between two trims of the heap


@dataclass
class Swept:
    """What `_credits` hands to its table: per row group (in order of first appearance) its range label
    code (-1: none), thread key, kernel name id, NVTX Inst, and its durations' figures; the label table
    (code -> (name, style)), whether names carry PyTorch's fields, notes, and how many credits repeated a
    kernel in its row (nested ranges of one name)."""

    label: np.ndarray
    thread: np.ndarray
    name_id: np.ndarray
    nvtx_inst: np.ndarray
    figures: list[tuple]  # stats.figures of each row's durations
    table: dict[int, tuple[str, str]]
    fields: bool
    notes: list[str]
    twice: int


class _Labels:
    """Range label codes across blocks: (grouped name, domain) -> code, as `_range_codes` prints them."""

    def __init__(self, by: str) -> None:
        self.by = by
        self.names: dict[str, int] = {}  # name -> grouped name code
        self.grouped: dict[str, int] = {}
        self.codes: dict[tuple[int, str | None], int] = {}
        self.table: dict[int, tuple[str, str]] = {}
        self.fields = False
        self._texts: list[str] = []  # the grouped names in code order, refreshed when a code is past it

    def of(self, name: object, domain: object) -> np.ndarray:
        """The label code of each range of a block (name and domain as Categoricals or object arrays)."""
        n_codes, n_uniques = pd.factorize(np.asarray(name, dtype=object) if not _is_cat(name) else name)
        d_codes, d_uniques = pd.factorize(np.asarray(domain, dtype=object) if not _is_cat(domain) else domain)
        grouped = self._grouped([str(u) for u in n_uniques])
        n_d = len(d_uniques) + 1
        pairs = np.unique(n_codes.astype(np.int64) * n_d + d_codes + 1)
        out_of_pair = np.empty(len(pairs), dtype=np.int64)
        for i, pair in enumerate(pairs.tolist()):
            n, d = divmod(pair, n_d)
            dom = None if d == 0 else str(d_uniques[d - 1])
            key = (grouped[n] if n >= 0 else -1, dom)
            code = self.codes.get(key)
            if code is None:
                code = self.codes[key] = len(self.codes)
                label = self._text(key[0])
                if label is not None and dom is not None:
                    label = f"{dom}:{label}"
                self.table[code] = (label, "PushPop")  # type: ignore[assignment]
            out_of_pair[i] = code
        return out_of_pair[np.searchsorted(pairs, n_codes.astype(np.int64) * n_d + d_codes + 1)]

    def _grouped(self, names: list[str]) -> list[int]:
        new = [n for n in names if n not in self.names]
        if new:
            cat, fields = grouped_categories(pd.Categorical(new, categories=new), self.by)
            self.fields |= fields
            for text, label in zip(new, cat.astype(object), strict=True):
                self.names[text] = self.grouped.setdefault(str(label), len(self.grouped))
        return [self.names[n] for n in names]

    def _text(self, grouped: int) -> str | None:
        if grouped < 0:
            return None
        if len(self._texts) <= grouped:
            self._texts = list(self.grouped)
        return self._texts[grouped]


def _is_cat(values: object) -> bool:
    return isinstance(values, pd.Categorical)


@dataclass
class _Ranges(Stream):
    """The push/pop ranges that can still hold a call: start, end, thread (global tid), label code, and a
    number that names each range across blocks."""

    blocks: Iterator[dict[str, object]]
    labels: _Labels
    cols: dict[str, np.ndarray] = field(default_factory=dict)
    last: int = -(2**63)  # the latest start read
    done: bool = False
    count: int = 0

    def _pass(self, block: dict[str, object]) -> None:
        self._checked(block)  # order checked and names seen, for the notes (as the whole frame is read)

    def _checked(self, block: dict[str, object]) -> np.ndarray:
        """The block's label codes, its start order checked (every range's name counts for the note)."""
        start = np.asarray(block["start"])
        if len(start):
            if start[0] < self.last or (np.diff(start) < 0).any():
                raise Unordered("NVTX ranges not in start order")
            self.last = int(start[-1])
        return self.labels.of(block["name"], block["domain"])

    def _append(self, block: dict[str, object]) -> None:
        start = np.asarray(block["start"])
        n = len(start)
        uid = np.arange(self.count, self.count + n, dtype=np.int64)
        self.count += n
        if not n:
            return
        label = self._checked(block)
        push = np.asarray(block["pushpop"], dtype=bool)
        new = {"start": start, "end": np.asarray(block["end"]), "global_tid": np.asarray(block["global_tid"])}
        new |= {"label": label, "uid": uid}
        if not push.all():
            new = {c: v[push] for c, v in new.items()}
        self.cols = {c: np.concatenate((self.cols[c], v)) if self.cols else v for c, v in new.items()}

    def drop_ended_before(self, time: int) -> None:
        if self.cols and (self.cols["end"] < time).any():
            keep = self.cols["end"] >= time
            self.cols = {c: v[keep] for c, v in self.cols.items()}


@dataclass
class _Rows:
    """The row groups found so far: key (label, thread, name id) -> number, each one's first appearance,
    durations (pieces, with the level and block that put them in the order of the credits), NVTX Inst."""

    index: dict[tuple[int, int, int], int] = field(default_factory=dict)
    first: list[int] = field(default_factory=list)
    pieces: list[list[tuple[int, int, np.ndarray]]] = field(default_factory=list)
    inst: list[int] = field(default_factory=list)

    def numbers(
        self, label: np.ndarray, thread: np.ndarray, name: np.ndarray, first: np.ndarray
    ) -> np.ndarray:
        """The row number of each distinct (label, thread, name) of a block, new ones added; `first` is
        each one's first appearance in the block."""
        out = np.empty(len(label), dtype=np.int64)
        for i, key in enumerate(zip(label.tolist(), thread.tolist(), name.tolist(), strict=True)):
            g = self.index.get(key)
            if g is None:
                g = self.index[key] = len(self.first)
                self.first.append(int(first[i]))
                self.pieces.append([])
                self.inst.append(0)
            elif first[i] < self.first[g]:
                self.first[g] = int(first[i])
            out[i] = g
        return out


def thread_sweep(
    trace: Trace,
    names: str = "demangled",
    exclusive: bool = False,
    *,
    by_name: bool,
    ranged_only: bool,
    by: str = "raw",
    rows: int = SWEEP_ROWS,
) -> Swept:
    """The row groups of thread-mode attribution (`_credits` with by_thread), a block of `rows` kernels at
    a time. Raises `Unordered` where the export is not in time order."""
    frame_notes: list[str] = []
    range_notes: list[str] = []
    labels = _Labels(by)
    ranges = _Ranges(trace.blocks("nvtx", RANGE_READ, rows, notes=range_notes), labels)
    found = _Rows()
    carried = _Carried()
    threshold = -(2**63)
    twice = 0
    row0 = 0
    fields = ("name_id", "duration", "global_pid")
    for index, block in enumerate(launch_blocks(trace, fields, names, rows, notes=frame_notes)):
        n = len(block["duration"])
        has = block["has_call"]
        calls = np.flatnonzero(has)
        inner = np.full(n, -1, dtype=np.int64)
        if len(calls):
            c_start = block["call_start"][calls]
            low, high = int(c_start.min()), int(c_start.max())
            if low < threshold:
                raise Unordered("launch calls going back in time across blocks")
            threshold = low
            ranges.read_past(high)
            ranges.drop_ended_before(low)
            carried.drop_ended_before(low)
            inner, parent, r = _innermost(ranges.cols, block, calls)
        else:
            parent, r = np.zeros(0, dtype=np.int64), {}
        if index % TRIM_EVERY == TRIM_EVERY - 1:
            trim_heap()  # the rows' small pieces of durations, freed blocks' temporaries between them
        twice += _credit_block(
            block, inner, parent, r, found, carried, index, row0, exclusive, by_name, ranged_only
        )
        row0 += n
    ranges.drain()  # the rest, for their notes and names (as the whole frame is read)
    return _result(found, labels, [*frame_notes, *range_notes], twice)


def _innermost(
    cols: dict[str, np.ndarray], block: dict[str, np.ndarray], calls: np.ndarray
) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """(innermost range around each kernel's call as a position in the sorted ranges, or -1; each sorted
    range's parent position; the ranges' columns in sorted order)."""
    n = len(block["duration"])
    inner = np.full(n, -1, dtype=np.int64)
    if not cols or not len(cols["start"]):
        return inner, np.zeros(0, dtype=np.int64), {}
    order = sort_ranges(cols["global_tid"], cols["start"], cols["end"])
    r = {c: v[order] for c, v in cols.items()}
    parent = parents(r["global_tid"], r["start"], r["end"])
    hit = enclosing(
        r["global_tid"],
        r["start"],
        r["end"],
        parent,
        block["global_tid"][calls],
        block["call_start"][calls],
        block["call_end"][calls],
    )
    inner[calls] = hit
    return inner, parent, r


class _Carried:
    """(range, row) pairs counted for NVTX Inst whose range may hold calls of blocks to come."""

    def __init__(self) -> None:
        self.uid = np.zeros(0, dtype=np.int64)
        self.row = np.zeros(0, dtype=np.int64)
        self.end = np.zeros(0, dtype=np.int64)

    def drop_ended_before(self, time: int) -> None:
        keep = self.end >= time
        if not keep.all():
            self.uid, self.row, self.end = self.uid[keep], self.row[keep], self.end[keep]

    def new(self, uid: np.ndarray, row: np.ndarray, end: np.ndarray, n_rows: int) -> np.ndarray:
        """Which of the block's distinct pairs were not counted before; those are carried from now on."""
        span = n_rows + 1
        fresh = ~np.isin((uid + 1) * span + row, (self.uid + 1) * span + self.row)
        self.uid = np.concatenate((self.uid, uid[fresh]))
        self.row = np.concatenate((self.row, row[fresh]))
        self.end = np.concatenate((self.end, end[fresh]))
        return fresh


def _credit_block(
    block: dict[str, np.ndarray],
    inner: np.ndarray,
    parent: np.ndarray,
    r: dict[str, np.ndarray],
    found: _Rows,
    carried: _Carried,
    index: int,
    row0: int,
    exclusive: bool,
    by_name: bool,
    ranged_only: bool,
) -> int:
    """Credit a block of kernels to their rows; how many credits repeated a kernel in its row."""
    n = len(inner)
    launch = [np.arange(n, dtype=np.int64)]
    rng = [inner]
    level = [np.zeros(n, dtype=np.int64)]
    if not exclusive and len(parent):
        cur_launch, cur = launch[0][inner >= 0], parent[inner[inner >= 0]]
        depth = 1
        while len(cur):
            keep = cur >= 0
            cur_launch, cur = cur_launch[keep], cur[keep]
            if not len(cur):
                break
            launch.append(cur_launch)
            rng.append(cur)
            level.append(np.full(len(cur), depth, dtype=np.int64))
            cur = parent[cur]
            depth += 1
    launch_a, rng_a, level_a = np.concatenate(launch), np.concatenate(rng), np.concatenate(level)
    del launch, rng, level
    if ranged_only:
        hit = rng_a >= 0
        launch_a, rng_a, level_a = launch_a[hit], rng_a[hit], level_a[hit]
    if not len(launch_a):
        return 0
    ranged = rng_a >= 0
    at = np.maximum(rng_a, 0)
    none = len(r) == 0
    label = np.where(ranged, -1 if none else r["label"][at], -1)
    l_key = _launch_thread(block)
    r_key = np.zeros(0, dtype=np.int64) if none else thread_key(r["global_tid"], r["global_tid"])
    thread = np.where(ranged, 0 if none else r_key[at], l_key[launch_a])
    name = block["name_id"][launch_a] if by_name else np.zeros(len(launch_a), dtype=np.int64)
    uid = np.where(ranged, -1 if none else r["uid"][at], -1)
    end = np.where(ranged, 0 if none else r["end"][at], 2**63 - 1)
    del at, r_key
    # the block's rows, numbered here, then as rows of the whole table
    local, first_at = numbered(label, thread, name)
    appear = (level_a[first_at] << LEVEL_SHIFT) | (row0 + launch_a[first_at])
    rows_of = found.numbers(label[first_at], thread[first_at], name[first_at], appear)
    group = rows_of[local]
    _count_instances(found, carried, uid, group, end)
    twice = 0
    counts = np.ones(len(group), dtype=bool)
    if not exclusive:
        pair = local * n + launch_a
        order = np.argsort(pair, kind="stable")
        pair = pair[order]
        again = np.zeros(len(pair), dtype=bool)
        again[1:] = pair[1:] == pair[:-1]
        counts[order[again]] = False
        twice = int(again.sum())
    duration = narrow(block["duration"])
    _keep_durations(found, group[counts], level_a[counts], duration[launch_a[counts]], index)
    return twice


def _launch_thread(block: dict[str, np.ndarray]) -> np.ndarray:
    """The launching thread's key (PID << 24 | TID) of each kernel; NO_THREAD without its call."""
    key = thread_key(block["global_pid"], block["global_tid"])
    key[~block["has_call"]] = NO_THREAD
    return key


def _count_instances(
    found: _Rows, carried: _Carried, uid: np.ndarray, group: np.ndarray, end: np.ndarray
) -> None:
    """NVTX Inst: distinct ranges per row (no range counts as one), pairs of earlier blocks not again."""
    n_rows = len(found.first)
    pair, first = np.unique((uid + 1) * (n_rows + 1) + group, return_index=True)
    p_uid, p_row = pair // (n_rows + 1) - 1, pair % (n_rows + 1)
    fresh = carried.new(p_uid, p_row, end[first], n_rows)
    for g, c in zip(*np.unique(p_row[fresh], return_counts=True), strict=True):
        found.inst[int(g)] += int(c)


def _keep_durations(
    found: _Rows, group: np.ndarray, level: np.ndarray, duration: np.ndarray, index: int
) -> None:
    """Each row's durations of the block, a piece per level (the credits' order is level, then kernel)."""
    if not len(group):
        return
    top = int(level.max()) + 1
    cell = group * top + level
    order = np.argsort(cell, kind="stable")
    cell = cell[order]
    values = duration[order]
    cuts = np.flatnonzero(cell[1:] != cell[:-1]) + 1
    for lo, hi in zip(np.concatenate(([0], cuts)), np.concatenate((cuts, [len(cell)])), strict=True):
        g, lv = divmod(int(cell[lo]), top)
        found.pieces[g].append((lv, index, values[lo:hi].copy()))


def _result(found: _Rows, labels: _Labels, notes: list[str], twice: int) -> Swept:
    order = np.argsort(np.asarray(found.first, dtype=np.int64), kind="stable")
    keys = list(found.index)
    label = np.array([keys[g][0] for g in order], dtype=np.int64)
    thread = np.array([keys[g][1] for g in order], dtype=np.int64)
    name_id = np.array([keys[g][2] for g in order], dtype=np.int64)
    inst = np.asarray(found.inst, dtype=np.int64)[order]
    stats = []
    for g in order:  # each row's durations in the credits' order: the same sums to the bit
        pieces = sorted(found.pieces[g], key=lambda p: (p[0], p[1]))
        found.pieces[g] = []
        stats.append(figures(pieces[0][2] if len(pieces) == 1 else np.concatenate([p[2] for p in pieces])))
    return Swept(label, thread, name_id, inst, stats, labels.table, labels.fields, notes, twice)
