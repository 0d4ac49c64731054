"""The trace as Holistic Trace Analysis (HTA 0.5.0) loads it: a view of a `Trace` with HTA's two load rules.

The trace model keeps every event with exact nanoseconds. HTA, while loading a Kineto trace, changes it in
two ways (hta/common/trace_parser.py `round_down_time_stamps`, hta/common/trace.py
`_filter_irrelevant_gpu_kernels`); `HtaView` applies the same rules so that any table of analysis/ computed
on the view gives HTA's numbers:

1. Rounding inward (only for traces whose timestamps are floats, i.e. nanosecond-resolution Kineto traces):
   start := ceil(ts), end := floor(ts + dur), in microseconds and in float64 arithmetic as HTA does it.
   An event shorter than the rounding would leave gets duration 0 here (HTA keeps a negative duration; in
   the fixtures only CUDA runtime calls, which no HTA table times).
2. The last profiler step dropped (when two or more `ProfilerStep#` names occur): CPU-side events (CUDA
   calls, annotations, operators) are kept when they start before the last `ProfilerStep#` starts, GPU
   events (kernels, copies, sets, syncs) when the CUDA call with their correlation id is kept.

Times stay in nanoseconds (whole microseconds × 1000 after rounding). Nothing is cached: the view is
computed from the trace's (cached) columns each time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from analysis.joins.runtime import _call_key
from analysis.readers import valid_duration
from analysis.readers.global_ids import PROCESS_MASK
from analysis.trace.frames import FRAMES, GPU_WORK, TIMED
from analysis.trace.trace import NULL, Trace
from analysis.trace.view import TraceView

CPU_FRAMES = ("runtime", "nvtx", "cpu_ops", "osrt")
STEP_MARK = "ProfilerStep"
EXACT_FLOAT = 2**53  # ns values below this convert to float64 without loss


def hta_view(trace: Trace) -> HtaView:
    """`trace` as HTA loads it (the same view when it already is one)."""
    return trace if isinstance(trace, HtaView) else HtaView(trace)


class HtaView(TraceView):
    """A `Trace` whose frames follow HTA's load rules; everything else is the underlying trace's."""

    def __init__(self, base: Trace) -> None:
        super().__init__(base)
        self._notes: list[str] = []
        self._keep: dict[str, np.ndarray | None] = {}
        self._times: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._last_step: int | bool | None = False  # False: not worked out yet
        self.rounding = bool(self.meta.get("float_times"))

    def __repr__(self) -> str:
        return f"HtaView({self.base!r})"

    @property
    def notes(self) -> list[str]:  # type: ignore[override]
        """The trace's notes and the view's own (what the rules did)."""
        return [*self.base.notes, *(n for n in self._notes if n not in self.base.notes)]

    def note(self, text: str) -> None:
        if text not in self._notes:
            self._notes.append(text)

    # --- the rules ---------------------------------------------------------------------------------------

    def last_step_start(self) -> int | None:
        """Start (ns, rounded) of the last `ProfilerStep#` range when there are two or more step names."""
        if self._last_step is not False:
            return self._last_step  # type: ignore[return-value]
        starts: list[np.ndarray] = []
        names: list[pd.Series] = []
        if self.base.has("nvtx"):
            r = self.base._columns("nvtx", ["start", "end", "name"])
            name = pd.Series(r["name"]).astype(str)
            hit = name.str.contains(STEP_MARK, regex=False).to_numpy()
            starts.append(self.times("nvtx")[0][hit])
            names.append(name[hit])
        if self.base.has("cpu_ops"):
            ids = np.asarray(self.base._columns("cpu_ops", ["name_id"])["name_id"])
            strings = self.base.strings(np.unique(ids))
            hit = np.isin(ids, [i for i, s in strings.items() if STEP_MARK in s])
            starts.append(self.times("cpu_ops")[0][hit])
            names.append(pd.Series(ids[hit]).map(strings))
        every = pd.concat(names, ignore_index=True) if names else pd.Series(dtype=object)
        self._last_step = None
        rounded = "; times rounded inward to whole µs" if self.rounding else ""
        if every.nunique() >= 2:
            start = np.concatenate(starts)
            self._last_step = int(start.max())
            self.note(
                f"HTA's load rules: the last profiler step ({every.iloc[int(start.argmax())]}) is left out"
                + rounded
            )
        elif self.rounding:
            self.note("HTA's load rules: times rounded inward to whole µs")
        else:  # the numbers are those without the rules: said, not left to look like HTA's
            steps = f"one profiler step ({every.iloc[0]})" if len(every) else f"no {STEP_MARK} ranges"
            rounds = (
                "HTA rounds only a Kineto trace's fractional µs, and this nsys export's times are kept to "
                "the ns"
                if self.base.format == "nsys-sqlite"
                else "no fraction of a µs in its times to round"
            )
            self.note(
                f"HTA's load rules change nothing here: the trace has {steps} (HTA leaves out the last of "
                f"two or more) and {rounds}"
            )
        return self._last_step

    def times(self, frame: str) -> tuple[np.ndarray, np.ndarray]:
        """(start, end) of every row of `frame` (ns), rounded inward to whole µs when the rule applies."""
        if frame not in self._times:
            raw = self.base._columns(frame, ["start", "end"])
            start, end = np.asarray(raw["start"], dtype=np.int64), np.asarray(raw["end"], dtype=np.int64)
            if self.rounding and len(start):
                start, end = _round_inward(start, end)
            self._times[frame] = (start, end)
        return self._times[frame]

    def keep(self, frame: str) -> np.ndarray | None:
        """Rows of `frame` that HTA keeps (None: all)."""
        if frame in self._keep:
            return self._keep[frame]
        last = self.last_step_start()
        mask = None
        if last is not None and frame in CPU_FRAMES and self.base.has(frame):
            mask = self.times(frame)[0] < last
        elif last is not None and frame in (*GPU_WORK, "syncs") and self.base.has(frame):
            launched = np.empty(0, dtype=np.int64)  # (process, correlationId): ids repeat across processes
            if self.base.has("runtime"):
                calls = self.base._columns("runtime", ["correlation_id", "global_tid"])
                corr, tid = (np.asarray(calls[c]) for c in ("correlation_id", "global_tid"))
                kept = self.keep("runtime")
                if kept is not None:
                    corr, tid = corr[kept], tid[kept]
                launched = _call_key(corr[corr != NULL], tid[corr != NULL] & PROCESS_MASK)
            ev = self.base._columns(frame, ["correlation_id", "global_pid"])
            corr = np.asarray(ev["correlation_id"])
            mask = np.isin(_call_key(corr, np.asarray(ev["global_pid"])), launched) & (corr != NULL) | (
                (corr == NULL) & (self.times(frame)[0] < last)
            )
        self._keep[frame] = mask
        return mask

    def holds(self, frame: str, columns: Sequence[str]) -> bool:
        return True  # the rules work on the base trace's whole columns: no table reads its frames in parts

    def _columns(self, frame: str, columns: list[str], keep: bool = True) -> dict[str, Any]:
        if frame in ("threads", "strings"):
            return self.base._columns(frame, columns)
        if frame == "nvtx":
            columns = list(FRAMES["nvtx"])
        raw = self.base._columns(frame, columns)
        keep = self.keep(frame) if self.base.has(frame) else None
        out: dict[str, Any] = {}
        for col in columns:
            if frame in TIMED and col in ("start", "end") and self.rounding and self.base.has(frame):
                value: Any = self.times(frame)[0 if col == "start" else 1]
            elif col == "duration" and self.rounding and self.base.has(frame):
                value = valid_duration(*self.times(frame))
            else:
                value = raw[col]
            out[col] = _take(value, keep)
        return out


def _take(value: Any, keep: np.ndarray | None) -> Any:
    if keep is None:
        return value
    if isinstance(value, pd.Series):
        return value[keep].reset_index(drop=True)
    return np.asarray(value)[keep]


def _round_inward(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """HTA's ceil(ts), floor(ts + dur) on the float64 microseconds it parsed; back to ns, end >= start."""
    start_us = _as_float_us(start)
    dur_us = (end - start).astype(np.float64) / 1000.0  # durations are far below 2**53 ns
    new_start = np.ceil(start_us)
    new_end = np.floor(start_us + dur_us)
    new_end = np.maximum(new_end, new_start)
    return new_start.astype(np.int64) * 1000, new_end.astype(np.int64) * 1000


def _as_float_us(ns: np.ndarray) -> np.ndarray:
    """ns / 1000 as the float64 closest to the exact quotient (what parsing the µs text gives)."""
    if len(ns) and int(np.abs(ns).max()) < EXACT_FLOAT:
        return ns.astype(np.float64) / 1000.0
    return np.array([int(v) / 1000 for v in ns.tolist()], dtype=np.float64)
