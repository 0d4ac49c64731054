"""A trace as a Chrome trace (JSON, optionally gzipped) that Perfetto UI and chrome://tracing open.

What it holds, in the categories Kineto uses where Kineto has one (so the harness's own Kineto reader reads
the file back into the same frames, and `harness kernels FILE` equals `harness kernels REPORT`):

- complete events (`ph` X): kernels (`kernel`), memory copies (`gpu_memcpy`, named as Kineto names them so
  their kinds survive), memory sets (`gpu_memset`), synchronisations (`cuda_sync`), CUDA API calls
  (`cuda_runtime`), NVTX ranges (`user_annotation`; GPU ranges of a Kineto trace: `gpu_user_annotation`),
  CPU operators of a Kineto trace (`cpu_op`) and OS runtime calls (`os_runtime`, a category of ours);
- the harness's steps and phases (NVTX ranges named `step`, `forward`, …) once more, on a track of their
  own (`harness_phase`, which no reader takes for NVTX);
- flow arrows (`s` at the launching call, `f` with `bp: e` at the GPU work), joined by process and
  correlation id, as Kineto's `ac2g` flows;
- metadata (`M`): process and thread names; a GPU is a process of its own, its streams are its threads.

Times are microseconds written as exact decimals of the nanoseconds (123.456), which the Kineto reader
turns back into the same nanoseconds. The file is written a chunk of rows at a time: memory holds a block
of each table (Trace.blocks; an nsys export's NVTX ranges a chunk of the export at a time, their names
resolved per chunk) and 20 bytes per GPU operation for the arrows, never the text of the whole file.
A window (`--step`, `--phase`, `--start/--end`: analysis.views.timeline.window_of) keeps the events that
overlap it.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import numpy as np
import pandas as pd
from isal import igzip

from analysis.errors import AnalysisError, ExportError
from analysis.joins.nvtx_ranges import note_open_ranges
from analysis.outputs import open_output, shown
from analysis.readers import NULL, trim_heap
from analysis.readers.global_ids import ID_MASK, pid_of, thread_key
from analysis.readers.kineto_build import GPU_PROCESS
from analysis.trace.trace import Trace
from analysis.views.chrome_lines import (
    _dims,
    _ints,
    _key,
    _memop_names,
    _meta,
    _pid_tid,
    _pid_tid_one,
    _us,
)
from analysis.views.timeline import OPEN, time_zero, zero_words
from workloads.names import COMM_PHASES, GENERATE_PHASES, MEASURED, STEP, TRAIN_PHASES, WARMUP

CHUNK = 50_000  # rows formatted and written at a time
NVTX_CHUNK = 10_000  # NVTX ranges at a time: PyTorch's names run to ~500 characters (a line and its join)
_X = '{"ph":"X","cat":"CAT","name":%s,"pid":%d,"tid":%d,"ts":%s,"dur":%s'  # a complete event, to be ended
GPU_PID = 1 << 30  # + device: the process a GPU's streams are shown under (clear of real pids)
HARNESS_PID = GPU_PID - 1  # the track of the harness's steps and phases
PHASES = frozenset((*TRAIN_PHASES, *GENERATE_PHASES, *COMM_PHASES))
HARNESS_RANGES = frozenset((STEP, MEASURED, WARMUP, *PHASES))
GPU_COLUMNS = {
    "kernels": ["grid", "block", "name_id"],
    "memcpy": ["bytes", "copy_kind", "src_kind", "dst_kind"],
    "memset": ["bytes", "mem_kind"],
    "syncs": ["name_id"],
}


@dataclass
class Written:
    """What a Chrome trace holds: events per kind, the window they were cut to (ns; None: all), and what
    was left out and why (the trace's notes: the same words and counts as every table's)."""

    path: Path
    counts: dict[str, int] = field(default_factory=dict)
    window: tuple[int, int] | None = None
    notes: list[str] = field(default_factory=list)
    origin: int = 0  # timeline.time_zero: the zero of --start/--end, of the window and of `health`'s times
    origin_words: str = "the session's start"  # timeline.zero_words
    warnings: list[str] = field(default_factory=list)  # the capture failed its health checks: so it says

    def window_words(self) -> str:
        """The window in seconds from the origin, as --start/--end take it and `health` says times, however
        it was given (a step, a phase or --start/--end): `window 1.5..2 s from the session's start`,
        `from 1.5 s …` or `up to 2 s …`; "" for none."""
        if self.window is None:
            return ""
        lo, hi = self.window

        def at(t: int) -> str:
            return _seconds((t - self.origin) / 1e9)

        unit = f" s from {self.origin_words}"
        if hi == OPEN:  # the end not given (a value given past it is said as given)
            return f"from {at(lo)}{unit}"
        if lo == -OPEN:
            return f"up to {at(hi)}{unit}"
        return f"window {at(lo)}..{at(hi)}{unit}"


def _seconds(s: float) -> str:
    """Seconds to the nanosecond, as --start/--end would take them back (`7.388623341`, `0.1`); a value
    given far past any capture as given (`9e+09`)."""
    return f"{s:.9f}".rstrip("0").rstrip(".") if abs(s) < 1e6 else f"{s:g}"


class EmptyWindow(ExportError):
    """A window that holds no event: nothing is written (the file would say nothing)."""


def write_chrome_trace(trace: Trace, path: str | Path, window: tuple[int, int] | None = None) -> Written:
    """Write `trace` to `path` as a Chrome trace (gzipped when the name ends in .gz, in any case, as the
    readers take it); what it holds. A file appears whole or not at all (written beside it, then renamed);
    `-`, a device or a pipe is written as a stream (analysis.outputs). A window that holds no event is
    EmptyWindow, and no file is left."""
    written = Written(Path(path), window=window, origin_words=zero_words(trace))
    if window is not None:
        written.origin = time_zero(trace)
    if trace.has("nvtx"):
        note_open_ranges(trace)  # drawn to the capture's end: said as every table of them says it
    try:
        with open_output(path) as raw:
            if str(path).lower().endswith(".gz"):
                with igzip.open(raw, "wt", compresslevel=1, encoding="ascii") as f:
                    _Writer(trace, f, window, written.counts).write()  # type: ignore[arg-type]
            else:
                f = io.TextIOWrapper(raw, encoding="ascii", write_through=False)
                try:
                    _Writer(trace, f, window, written.counts).write()
                    f.flush()
                finally:
                    f.detach()  # the stream stays open for open_output (standard output stays open)
            if window is not None and not set(written.counts) - {"metadata"}:  # the file is not kept
                raise EmptyWindow(f"no event in the {written.window_words()}: nothing written")
        written.notes = list(trace.notes)
    except BrokenPipeError:
        raise  # `-o - | head`: ended quietly, as a table piped to head is
    except OSError as e:
        raise AnalysisError(f"cannot write {shown(path)}: {e.strerror or e}") from None
    return written


class _Writer:
    def __init__(
        self, trace: Trace, f: TextIO, window: tuple[int, int] | None, counts: dict[str, int]
    ) -> None:
        self.trace = trace
        self.f = f
        self.window = window
        self.counts = counts
        self.first = True
        self.processes: dict[int, str] = {}
        self.threads: dict[tuple[int, int], str] = {}
        self.launched = np.empty(0, dtype=np.int64)  # launch keys (_key) of the GPU work written, sorted
        # the call that launched each of them, by its place in `launched`: its thread (a code into
        # `call_threads`, the global thread ids' low 48 bits; -1: no call seen yet) and its start; 20 bytes
        # per launch in all
        self.call_thread = np.empty(0, dtype=np.int32)
        self.call_start = np.empty(0, dtype=np.int64)
        self.call_threads: dict[int, int] = {}

    def write(self) -> None:
        # the window as cut; an end not given is null, not the far-off instant that stands for it
        window = None if self.window is None else [None if abs(t) == OPEN else t for t in self.window]
        meta = {"source": self.trace.path.name, "format": self.trace.format, "window_ns": window}
        self.f.write('{"displayTimeUnit": "ns", "otherData": ' + json.dumps(meta) + ', "traceEvents": [\n')
        self.launched = self.gpu_keys()
        self.call_thread = np.full(len(self.launched), -1, dtype=np.int32)
        self.call_start = np.zeros(len(self.launched), dtype=np.int64)
        self.runtime()
        for frame, cat in (("kernels", "kernel"), ("memcpy", "gpu_memcpy"), ("memset", "gpu_memset"),
                           ("syncs", "cuda_sync")):  # fmt: skip
            self.gpu(frame, cat)
        # the arrows are out: the launch keys and calls (20 bytes per GPU operation) are not needed again
        self.launched = self.call_start = np.empty(0, dtype=np.int64)
        self.call_thread = np.empty(0, dtype=np.int32)
        trim_heap()
        self.nvtx()
        self.cpu("osrt", "os_runtime")
        self.cpu("cpu_ops", "cpu_op")
        self.metadata()
        self.f.write("\n]}\n")

    # --- output -------------------------------------------------------------------------------------

    def emit(self, kind: str, lines: Iterable[str]) -> None:
        lines = list(lines)
        if not lines:
            return
        self.f.write(("" if self.first else ",\n") + ",\n".join(lines))
        self.first = False
        self.counts[kind] = self.counts.get(kind, 0) + len(lines)

    def blocks(self, frame: str, columns: list[str]) -> Iterator[dict[str, np.ndarray]]:
        """The frame's rows in the window a block at a time (Trace.blocks: never the whole frame); no
        empty block."""
        if not self.trace.has(frame):
            return
        for block in self.trace.blocks(frame, columns):
            if self.window is not None:
                inside = self.inside(block["start"], block["end"])
                if not inside.all():
                    block = {c: v[inside] for c, v in block.items()}
            if len(block["start"]):
                yield block

    def inside(self, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Which rows overlap the window (there is one)."""
        assert self.window is not None
        lo, hi = self.window
        return (end >= lo) & (start <= hi)

    def names(self, ids: np.ndarray) -> dict[int, str]:
        """Names of string ids as JSON strings (escaped: names are outside text); "" for an unknown id."""
        wanted = np.unique(ids).tolist()
        out = {i: json.dumps(s) for i, s in self.trace.strings(wanted).items()}
        for i in wanted:
            out.setdefault(i, '""')
        return out

    # --- frames --------------------------------------------------------------------------------------

    def runtime(self) -> None:
        """The API calls (the export's biggest table)."""
        template = _X.replace("CAT", "cuda_runtime") + ',"args":{"correlation":%s}}'
        columns = ["start", "end", "correlation_id", "global_tid", "name_id"]
        for block in self.blocks("runtime", columns):
            pid, tid = _pid_tid(block["global_tid"])
            self.thread_seen(pid, tid)
            names = self.names(block["name_id"])
            for lo in range(0, len(pid), CHUNK):
                start, end = block["start"][lo : lo + CHUNK], block["end"][lo : lo + CHUNK]
                self.emit(
                    "cuda_runtime",
                    (
                        template % row
                        for row in zip(
                            map(names.__getitem__, block["name_id"][lo : lo + CHUNK].tolist()),
                            pid[lo : lo + CHUNK].tolist(),
                            tid[lo : lo + CHUNK].tolist(),
                            _us(start),
                            _us(end - start),
                            _ints(block["correlation_id"][lo : lo + CHUNK]),
                            strict=True,
                        )
                    ),
                )
            self.note_calls(block)

    def gpu_keys(self) -> np.ndarray:
        """The launch keys of the GPU work in the window (to keep, of the API calls, those that launched)."""
        parts = [
            _key(pid_of(block["global_pid"]), block["correlation_id"])
            for frame in ("kernels", "memcpy", "memset")
            for block in self.blocks(frame, ["start", "end", "global_pid", "correlation_id"])
        ]
        keys = np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
        del parts
        keys.sort()  # in place, and then unique without np.unique's copies: 8 bytes per GPU operation
        return keys[np.concatenate(([True], keys[1:] != keys[:-1]))] if len(keys) else keys

    def launch_of(self, key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(rows, their places in `launched`): the rows whose launch key is one of the GPU work's."""
        if not len(self.launched):
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        at = np.minimum(np.searchsorted(self.launched, key), len(self.launched) - 1)
        rows = np.flatnonzero((self.launched[at] == key) & (key >= 0))
        return rows, at[rows]

    def note_calls(self, calls: dict[str, np.ndarray]) -> None:
        """Keep the thread and start of the calls that launched GPU work (a key twice: the first call)."""
        rows, at = self.launch_of(_key(pid_of(calls["global_tid"]), calls["correlation_id"]))
        at, first = np.unique(at, return_index=True)
        new = self.call_thread[at] < 0
        rows, at = rows[first[new]], at[new]
        caller = calls["global_tid"][rows]
        threads, code = np.unique(thread_key(caller, caller), return_inverse=True)
        known = self.call_threads
        codes = np.array([known.setdefault(t, len(known)) for t in threads.tolist()], dtype=np.int32)
        self.call_thread[at] = codes[code.reshape(-1)]
        self.call_start[at] = calls["start"][rows]

    def gpu(self, frame: str, cat: str) -> None:
        columns = ["start", "end", "correlation_id", "global_pid", "device_id", "stream_id"]
        base = _X.replace("CAT", cat) + ',"args":{"device":%s,"stream":%s,"correlation":%s'
        template = base + {"kernels": ',"grid":%s,"block":%s}}', "syncs": "}}"}.get(frame, ',"bytes":%s}}')
        for block in self.blocks(frame, columns + GPU_COLUMNS[frame]):
            device, stream = block["device_id"], block["stream_id"]
            pid = GPU_PID + np.where(device == NULL, 0, device)
            tid = np.where(stream == NULL, 0, stream) & ID_MASK
            for d, s in set(zip(pid.tolist(), tid.tolist(), strict=True)):
                self.processes.setdefault(d, f"GPU {d - GPU_PID}")
                self.threads.setdefault((d, s), f"stream {s}")
            names = self.names(block["name_id"]) if "name_id" in block else {}
            self.flows(block, pid, tid)
            for lo in range(0, len(pid), CHUNK):
                part = {c: v[lo : lo + CHUNK] for c, v in block.items()}
                if frame == "kernels":
                    fields = [_dims(part["grid"], (32, 16)), _dims(part["block"], (22, 11))]
                elif frame == "syncs":
                    fields = []
                else:
                    fields = [_ints(part["bytes"])]
                if "name_id" in part:
                    name: Iterable[str] = map(names.__getitem__, part["name_id"].tolist())
                else:
                    name = _memop_names(part, frame)
                self.emit(
                    cat,
                    (
                        template % row
                        for row in zip(
                            name,
                            pid[lo : lo + CHUNK].tolist(),
                            tid[lo : lo + CHUNK].tolist(),
                            _us(part["start"]),
                            _us(part["end"] - part["start"]),
                            _ints(part["device_id"]),
                            _ints(part["stream_id"]),
                            _ints(part["correlation_id"]),
                            *fields,
                            strict=True,
                        )
                    ),
                )

    def flows(self, work: dict[str, np.ndarray], pid: np.ndarray, tid: np.ndarray) -> None:
        """An arrow from each written call to the GPU work it launched (same process, same correlation)."""
        rows, at = self.launch_of(_key(pid_of(work["global_pid"]), work["correlation_id"]))
        called = self.call_thread[at] >= 0
        hit, at = rows[called], at[called]
        threads = np.fromiter(self.call_threads, dtype=np.int64, count=len(self.call_threads))
        call_pid, call_tid = _pid_tid(threads[self.call_thread[at]])
        call_ts = self.call_start[at]
        work_pid, work_tid, work_ts = pid[hit], tid[hit], work["start"][hit]
        first = self.counts.get("flow", 0) // 2
        start = '{"ph":"s","cat":"ac2g","name":"launch","id":%d,"pid":%d,"tid":%d,"ts":%s}'
        finish = '{"ph":"f","bp":"e","cat":"ac2g","name":"launch","id":%d,"pid":%d,"tid":%d,"ts":%s}'
        for lo in range(0, len(hit), CHUNK):
            hi = min(lo + CHUNK, len(hit))
            ids = range(first + lo + 1, first + hi + 1)
            calls_at = zip(
                ids, call_pid[lo:hi].tolist(), call_tid[lo:hi].tolist(), _us(call_ts[lo:hi]), strict=True
            )
            work_at = zip(
                ids, work_pid[lo:hi].tolist(), work_tid[lo:hi].tolist(), _us(work_ts[lo:hi]), strict=True
            )
            self.emit(
                "flow",
                (line for a, b in zip(calls_at, work_at, strict=True) for line in (start % a, finish % b)),
            )

    def nvtx(self) -> None:
        """The NVTX ranges a block at a time (from the reader a chunk of the export at a time, names
        resolved per chunk: 7.1M ranges on a 4M-kernel export were ~400 MB read whole); the harness's
        steps and phases among them once more after them all."""
        harness: list[tuple[str, int, int, object]] = []
        for block in self.blocks("nvtx", ["start", "end", "global_tid", "payload", "name", "domain"]):
            # names and domains are escaped once per distinct value of the block, looked up by code
            names, name_code = _coded(block["name"])
            name_text = np.array([*map(json.dumps, names), '""'], dtype=object)  # code -1 (no name): ""
            domains, domain_code = _coded(block["domain"])
            domain_text = np.array([*domains, None], dtype=object)
            start, end, payload = block["start"], block["end"], block["payload"]
            for lo in range(0, len(start), NVTX_CHUNK):
                at = slice(lo, lo + NVTX_CHUNK)
                pid, tid = _pid_tid(block["global_tid"][at])
                gpu = pid >= GPU_PROCESS
                self.thread_seen(pid[~gpu], tid[~gpu])
                lines: dict[str, list[str]] = {"user_annotation": [], "gpu_user_annotation": []}
                for name, p, t, g, ts, dur, dom, load in zip(
                    name_text[name_code[at]].tolist(), pid.tolist(), tid.tolist(), gpu.tolist(),
                    _us(start[at]), _us(end[at] - start[at]), domain_text[domain_code[at]].tolist(),
                    payload[at].tolist(), strict=True,
                ):  # fmt: skip
                    args = {}
                    if isinstance(dom, str):
                        args["domain"] = dom
                    if load is not None and load is not pd.NA:
                        args["payload"] = int(load)
                    if g:  # a GPU range of a Kineto trace: on its stream
                        device, cat = p - GPU_PROCESS, "gpu_user_annotation"
                        args.update(device=device, stream=t)
                        p = GPU_PID + device
                        self.processes.setdefault(p, f"GPU {device}")
                        self.threads.setdefault((p, t), f"stream {t}")
                    else:
                        cat = "user_annotation"
                    lines[cat].append(
                        f'{{"ph":"X","cat":"{cat}","name":{name},"pid":{p},"tid":{t},"ts":{ts},"dur":{dur}'
                        f',"args":{json.dumps(args)}}}'
                    )
                for cat, written in lines.items():  # each counted under its own category
                    self.emit(cat, written)
            for row in np.flatnonzero(np.isin(name_code, _harness_codes(names))).tolist():
                harness.append((names[name_code[row]], int(start[row]), int(end[row]), payload[row]))
            trim_heap()  # the block's strings, freed between others, leave pages the heap cannot give back
        self.harness_track(harness)

    def harness_track(self, ranges: list[tuple[str, int, int, object]]) -> None:
        """The harness's steps (and measured/warmup) on one thread, its phases on another: `ranges` are
        (name, start, end, payload) of the NVTX ranges named after them, in the order written."""
        if not ranges:
            return
        self.processes[HARNESS_PID] = "harness"
        lines = []
        for text, start, end, load in ranges:
            tid = 2 if text in PHASES else 1
            self.threads[(HARNESS_PID, tid)] = "phases" if tid == 2 else "steps"
            step = "" if load is None or load is pd.NA else f',"args":{{"step":{int(load)}}}'
            ts, dur = _us(np.array([start, end - start], dtype=np.int64))
            lines.append(
                f'{{"ph":"X","cat":"harness_phase","name":{json.dumps(text)},"pid":{HARNESS_PID},"tid":{tid},'
                f'"ts":{ts},"dur":{dur}{step}}}'
            )
        self.emit("harness_phase", lines)

    def cpu(self, frame: str, cat: str) -> None:
        extra = ["external_id"] if frame == "cpu_ops" else []
        template = _X.replace("CAT", cat) + (',"args":{"External id":%s}' if extra else "") + "}"
        for block in self.blocks(frame, ["start", "end", "global_tid", "name_id", *extra]):
            pid, tid = _pid_tid(block["global_tid"])
            self.thread_seen(pid, tid)
            names = self.names(block["name_id"])
            for lo in range(0, len(pid), CHUNK):
                part = {c: v[lo : lo + CHUNK] for c, v in block.items()}
                fields = [_ints(part["external_id"])] if extra else []
                self.emit(
                    cat,
                    (
                        template % row
                        for row in zip(
                            map(names.__getitem__, part["name_id"].tolist()),
                            pid[lo : lo + CHUNK].tolist(),
                            tid[lo : lo + CHUNK].tolist(),
                            _us(part["start"]),
                            _us(part["end"] - part["start"]),
                            *fields,
                            strict=True,
                        )
                    ),
                )

    # --- names ---------------------------------------------------------------------------------------

    def thread_seen(self, pid: np.ndarray, tid: np.ndarray) -> None:
        for p, t in set(zip(pid.tolist(), tid.tolist(), strict=True)):
            self.processes.setdefault(p, f"process {p}")
            self.threads.setdefault((p, t), "")

    def metadata(self) -> None:
        known = (
            {_pid_tid_one(g): name for g, name in self.trace.thread_names().items()}
            if self.trace.has("threads")
            else {}
        )
        lines = []
        for pid, name in sorted(self.processes.items()):
            lines.append(_meta("process_name", pid, 0, name))
            if pid == HARNESS_PID:
                lines.append(
                    f'{{"ph":"M","name":"process_sort_index","pid":{pid},"tid":0,"args":{{"sort_index":-1}}}}'
                )
        for (pid, tid), name in sorted(self.threads.items()):
            lines.append(_meta("thread_name", pid, tid, name or known.get((pid, tid)) or f"thread {tid}"))
        self.emit("metadata", lines)


def _coded(values: object) -> tuple[list[str], np.ndarray]:
    """A block's names (a Categorical from the reader or the cache, an object array from memory) as their
    distinct texts and a code per row into them (-1: none)."""
    cat = values if isinstance(values, pd.Categorical) else pd.Categorical(np.asarray(values, dtype=object))
    return [str(c) for c in cat.categories], np.asarray(cat.codes)


def _harness_codes(names: list[str]) -> list[int]:
    """The codes of the harness's own range names among a block's `names`."""
    return [i for i, n in enumerate(names) if n in HARNESS_RANGES]
