"""Kernels and the calls that launched them, a block of kernels at a time.

`analysis.joins.runtime.kernel_launches` joins every kernel to its call at once: at 4M kernels the frame of
nine
int64 columns and the join's tables held ~660 MB. Here the kernels and the CUDA runtime calls are read as
two streams (`Trace.blocks`) and merged on correlationId: nsys records both in order of their ids, so the
calls a block of kernels needs are a short run of the runtime table, kept in a buffer until no kernel to
come can ask for them. Where the export is not in that order (ids that go back, a call recorded twice, a
kernel without an id) `Unordered` is raised and the caller takes the whole join.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd

from analysis.joins.runtime import RUNTIME_COLUMNS
from analysis.readers import NULL
from analysis.readers.global_ids import pid_of
from analysis.trace.frames import BLOCK_ROWS, NAME_COLUMN
from analysis.trace.trace import Trace

CALL_FIELDS = ("has_call", "call_start", "call_end", "global_tid", "api_id")
# kernels per block of a one-pass table: a block's temporaries (nvtx-gpu: ~6 credits a kernel) and the
# calls held for it (~6 runtime calls a kernel) are the memory a block takes
SWEEP_ROWS = 1 << 16


class Unordered(Exception):
    """The export is not in the order a one-pass table needs: the whole-table way gives the answer."""


class Stream:
    """Blocks of a table in order, read only as far as needed: `last` is where the blocks read so far end
    (an id, a start); `_append` keeps a block, `_pass` checks one that is not kept."""

    blocks: Iterator[Any]
    last: int
    done: bool

    def read_past(self, limit: int) -> None:
        """Read until a block that ends past `limit` is in (or the blocks run out)."""
        while not self.done and self.last <= limit:
            block = next(self.blocks, None)
            if block is None:
                self.done = True
                return
            self._append(block)

    def drain(self) -> None:
        """Read the rest, checked (their order, what they count for notes), none kept."""
        for block in self.blocks:
            self._pass(block)
        self.done = True

    def _append(self, block: Any) -> None:
        raise NotImplementedError

    def _pass(self, block: Any) -> None:
        raise NotImplementedError


class _Calls(Stream):
    """The runtime calls read so far whose correlationId a kernel to come may have, in id order."""

    def __init__(self, blocks: Iterator[dict[str, np.ndarray]]) -> None:
        self.blocks = blocks
        self.cols = {c: np.zeros(0, dtype=np.int64) for c in RUNTIME_COLUMNS}
        self.last = NULL  # the largest id read: ids must grow strictly (no call recorded twice)
        self.low = NULL  # ids below it were let go
        self.done = False

    def _pass(self, block: dict[str, np.ndarray]) -> None:
        self._check(block["correlation_id"])  # the whole join would note calls recorded twice

    def _check(self, corr: np.ndarray) -> np.ndarray:
        keep = corr != NULL
        ids = corr[keep]
        if len(ids) and (ids[0] <= self.last or (np.diff(ids) <= 0).any()):
            raise Unordered("runtime calls not in strictly growing correlationId order")
        if len(ids):
            self.last = int(ids[-1])
        return keep

    def _append(self, block: dict[str, np.ndarray]) -> None:
        keep = self._check(block["correlation_id"])
        self.cols = {c: np.concatenate((v, block[c][keep])) for c, v in self.cols.items()}

    def drop_below(self, low: int) -> None:
        corr = self.cols["correlation_id"]
        cut = int(np.searchsorted(corr, low, side="left"))
        if cut:
            self.cols = {c: v[cut:].copy() for c, v in self.cols.items()}
        self.low = max(self.low, low)

    def find(self, corr: np.ndarray, pid: np.ndarray) -> np.ndarray:
        """Position in the buffer of each kernel's call, -1: none (no call with its id and process)."""
        if len(corr) and int(corr.min()) < self.low:
            raise Unordered("a kernel's correlationId is below calls already let go")
        ids = self.cols["correlation_id"]
        pos = np.searchsorted(ids, corr)
        inside = pos < len(ids)
        at = np.minimum(pos, max(len(ids) - 1, 0))
        if not len(ids):
            return np.full(len(corr), -1, dtype=np.int64)
        found = inside & (ids[at] == corr)
        found &= pid_of(self.cols["global_tid"][at]) == pid_of(pid)
        return np.where(found, at, -1)


def launch_blocks(
    trace: Trace,
    fields: tuple[str, ...],
    names: str = "demangled",
    rows: int = BLOCK_ROWS,
    notes: list[str] | None = None,
) -> Iterator[dict[str, np.ndarray]]:
    """Blocks of kernels (`fields` of the kernels frame, name_id in the style `names`) with their launch
    call as `kernel_launches` gives them (CALL_FIELDS: NULL where a kernel has no call), in the kernels'
    order. Raises `Unordered` (maybe after some blocks) where the merge on correlationId cannot be sure;
    `notes` gets the frames' notes, kernels' first (as the whole join adds them)."""
    wanted = list(dict.fromkeys([*fields, "correlation_id", "global_pid"]))
    columns = [NAME_COLUMN[names] if f == "name_id" else f for f in wanted]
    kernel_notes: list[str] = []
    call_notes: list[str] = []
    calls = (
        _Calls(trace.blocks("runtime", RUNTIME_COLUMNS, rows, notes=call_notes))
        if trace.has("runtime")
        else None
    )
    for raw in trace.blocks("kernels", columns, rows, notes=kernel_notes):
        block = {f: raw[c] for f, c in zip(wanted, columns, strict=True)}
        corr = block["correlation_id"]
        at = np.full(len(corr), -1, dtype=np.int64)
        if calls is not None and len(corr):
            if (corr == NULL).any():
                raise Unordered("kernels without a correlationId")
            calls.read_past(int(corr.max()))
            at = calls.find(corr, block["global_pid"])
        out = {f: block[f] for f in fields} | _call_columns(calls, at)
        if calls is not None and len(corr):
            calls.drop_below(int(corr.min()))
        yield out
    if calls is not None:
        calls.drain()
    if notes is not None:
        for text in [*kernel_notes, *call_notes]:
            if text not in notes:
                notes.append(text)


def _call_columns(calls: _Calls | None, at: np.ndarray) -> dict[str, np.ndarray]:
    has = at >= 0
    out: dict[str, np.ndarray] = {"has_call": has}
    for col, src in zip(CALL_FIELDS[1:], ("start", "end", "global_tid", "name_id"), strict=True):
        values = np.full(len(at), NULL, dtype=np.int64)
        if calls is not None:
            values[has] = calls.cols[src][at[has]]
        out[col] = values
    return out


def numbered(*keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(number of each credit's key tuple, in order of first appearance; first credit of each number)."""
    combined = np.zeros(len(keys[0]), dtype=np.int64)
    for values in keys:
        codes, uniques = pd.factorize(values)
        combined *= max(len(uniques), 1)
        combined += codes
    local, uniques = pd.factorize(combined)
    first = np.empty(len(uniques), dtype=np.int64)
    first[local[::-1]] = np.arange(len(local) - 1, -1, -1)
    return local, first
