"""Read a Chrome/Kineto trace (what torch.profiler writes: `.json` or `.json.gz`) into the trace model.

Which events go where (complete events, `"ph": "X"`; categories as Kineto names them):

- kernel → kernels; gpu_memcpy → memcpy; gpu_memset → memset; cuda_sync → syncs (all on a stream, with
  device, stream and correlation from `args`; launch shapes packed like the nsys reader's).
- cuda_runtime and cuda_driver → runtime (the calls, with their correlation ids).
- user_annotation (record_function ranges, `ProfilerStep#N`) → nvtx as push/pop ranges of their CPU thread,
  so `nvtx-gpu` credits kernels to the annotations open on the launching thread; `ProfilerStep#N` carries N
  as its payload. gpu_user_annotation (the same ranges as the GPU ran them) → nvtx in domain `GPU`, as
  start/end ranges of the stream they ran on: they are not thread-bound, so they never take kernels.
- cpu_op → cpu_ops, not nvtx: a training step holds thousands of them (40,506 in the diff-control fixture)
  and they are operators, not annotations; NVTX tables would drown in them.
- Everything else (python_function, flows, instant events, the `Trace` span) is counted in meta
  ("ignored") and left out.

Times: Kineto writes microseconds, integers in most traces and floats with nanosecond fractions in newer
ones. The JSON is parsed with floats kept as their text and turned into integer nanoseconds digit by digit,
so 1695835542514261.123 µs is 1695835542514261123 ns exactly (a float64 keeps 0.25 µs there).

Ids: `global_tid` is composed as nsys does (pid in bits 24-47, tid in bits 0-23). Linux pids and tids fit;
one that does not (a string, a pthread id) gets a small id of its own and the threads frame keeps the real
one in the name. A GPU's streams are threads of a process of their own, 2**23 + device: kernels' global_pid
is the process that launched them (through the correlation id), as in nsys exports.
"""

from __future__ import annotations

import gzip
import re
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from itertools import repeat
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from isal import igzip_threaded
from isal.isal_zlib import IsalError

from analysis.errors import ExportError
from analysis.readers import NULL, valid_duration
from analysis.readers.kineto_checks import clean_name, hashable, is_complete, notes_and_hints
from analysis.readers.kineto_stream import NOT_EVENT, UNSET, Args, Event, TraceStream

__all__ = ["FORMAT", "VERSION", "KinetoReader", "clean_name", "is_complete", "open_kineto", "text_ns"]

VERSION = "kineto-2"  # bump when what a frame holds changes: cached frames of other versions are rebuilt
FORMAT = "kineto-json"
GPU_PROCESS = 1 << 23  # + device: the "process" whose threads are a GPU's streams
MAX_NS = 2**62  # times past this (146 years) cannot be right, and start + duration must not wrap round
MAX_US = MAX_NS // 1000
SMALL_ID = 1 << 22  # ids from here on stand for pids/tids that do not fit 24 bits
ANNOTATION_DOMAIN = "GPU"  # nvtx domain of gpu_user_annotation ranges
STEP_RE = re.compile(r"ProfilerStep\s*#\s*(\d+)")

# category -> frame ("annotation" and "gpu_annotation" go to nvtx). Older traces use capitalised names.
CATEGORIES = {
    "kernel": "kernels", "gpu_memcpy": "memcpy", "gpu_memset": "memset", "cuda_sync": "syncs",
    "cuda_runtime": "runtime", "cuda_driver": "runtime", "user_annotation": "annotation",
    "gpu_user_annotation": "gpu_annotation", "cpu_op": "cpu_ops",
    "Kernel": "kernels", "Memcpy": "memcpy", "Memset": "memset", "Runtime": "runtime",
    "Operator": "cpu_ops",
}  # fmt: skip
# CUPTI's enums, as Kineto spells them in memcpy/memset names ("Memcpy HtoD (Pageable -> Device)")
COPY_KINDS = {"Unknown": 0, "HtoD": 1, "DtoH": 2, "HtoA": 3, "AtoH": 4, "AtoA": 5, "AtoD": 6, "DtoA": 7,
              "DtoD": 8, "HtoH": 9, "PtoP": 10}  # fmt: skip
MEMORY_KINDS = {"Unknown": 0, "Pageable": 1, "Pinned": 2, "Device": 3, "Array": 4, "Managed": 5,
                "Device Static": 6, "Managed Static": 7}  # fmt: skip
MEMCPY_RE = re.compile(r"Memcpy (\w+) \((.+) -> (.+)\)$")
MEMSET_RE = re.compile(r"Memset \((.+)\)$")
HINTS = {
    "kernels": "record it with torch.profiler and ProfilerActivity.CUDA",
    "runtime": "record it with torch.profiler and ProfilerActivity.CUDA",
    "memcpy": "record it with torch.profiler and ProfilerActivity.CUDA",
    "memset": "record it with torch.profiler and ProfilerActivity.CUDA",
    "syncs": "record it with torch.profiler and ProfilerActivity.CUDA",
    "nvtx": "wrap code in torch.profiler.record_function (or profile with a schedule: ProfilerStep#N)",
    "cpu_ops": "record it with torch.profiler and ProfilerActivity.CPU",
    "osrt": "Kineto traces have no OS runtime calls: profile with nsys --trace=osrt",
}


class KinetoReader:
    """One parsed trace: its frames (built on open, in one pass over the file) and metadata."""

    format = FORMAT
    version = VERSION

    def __init__(self, path: Path, stream: TraceStream) -> None:
        self.path = path
        self.reads: dict[str, int] = {"traceEvents": 1}  # the file is parsed once, on open
        self._frames, self._meta = _build(stream)

    def __repr__(self) -> str:
        return f"KinetoReader({str(self.path)!r})"

    def close(self) -> None:
        self._frames = {}

    def meta(self) -> dict[str, Any]:
        nonempty = {name: len(df) > 0 for name, df in self._frames.items()}
        return {"hints": HINTS, **self._meta, "format": self.format, "nonempty": nonempty}

    def count(self, frame: str) -> int:
        df = self._frames.get(frame)
        return 0 if df is None else len(df)

    def read(self, frame: str, columns: Sequence[str]) -> pd.DataFrame:
        df = self._frames.get(frame)
        if df is None:
            return pd.DataFrame({c: np.empty(0, dtype=np.int64) for c in columns})
        if frame in ("nvtx", "threads", "strings"):
            return df
        out = df[[c for c in columns if c != "duration"]]
        if "duration" in columns:
            out = out.assign(duration=valid_duration(df["start"].to_numpy(), df["end"].to_numpy()))
        return out


def open_kineto(path: str | Path) -> KinetoReader:
    """Parse `path` (a Chrome/Kineto trace, gzipped or not), or raise ExportError saying what is wrong.
    The file is read as a stream (analysis.readers.kineto_stream): never whole in memory."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            gzipped = f.read(2) == b"\x1f\x8b"
            f.seek(0)
            if not gzipped:
                return KinetoReader(path, TraceStream(path, f.read))
            with igzip_threaded.open(f, "rb", threads=1) as unzipped:
                return KinetoReader(path, TraceStream(path, unzipped.read))
    except (EOFError, zlib.error, gzip.BadGzipFile, IsalError) as e:
        raise ExportError(f"{path} is a corrupt or truncated gzip file ({e})") from None
    except OSError as e:
        why = e.strerror or str(e)
        raise ExportError(f"cannot read {path}: {why}") from None


# --- numbers -----------------------------------------------------------------------------------------


def text_ns(value: Any) -> int:
    """Microseconds as Kineto writes them (an int, or a float's text) -> integer nanoseconds, exactly
    (sub-nanosecond digits rounded half to even). Raises ValueError for anything else."""
    if isinstance(value, bool):
        raise ValueError(value)
    if isinstance(value, int):
        return value * 1000
    if not isinstance(value, str):
        raise ValueError(value)
    whole, dot, frac = value.partition(".")
    if dot and len(frac) <= 3 and frac.isdigit() and whole.lstrip("-").isdigit():
        ns = abs(int(whole)) * 1000 + int(frac.ljust(3, "0"))
        return -ns if whole.startswith("-") else ns
    try:
        return int((Decimal(value) * 1000).to_integral_value(ROUND_HALF_EVEN))
    except (InvalidOperation, ValueError, OverflowError):
        raise ValueError(value) from None


def _times(values: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """(ns as int64, which were valid) of microsecond values; one numpy call when all are integers."""
    try:
        us = np.array(values, dtype=np.int64)
        if not len(us) or (us.max() <= MAX_US and us.min() >= -MAX_US):  # times 1000 without wrapping
            return us * 1000, np.ones(len(values), dtype=bool)
    except (TypeError, ValueError, OverflowError):
        pass
    out = np.empty(len(values), dtype=np.int64)
    ok = np.ones(len(values), dtype=bool)
    for i, v in enumerate(values):
        try:
            ns = text_ns(v)
            if not -MAX_NS <= ns <= MAX_NS:
                raise OverflowError(ns)
            out[i] = ns
        except (ValueError, OverflowError):
            out[i], ok[i] = NULL, False
    return out, ok


def _ints(values: list[Any]) -> np.ndarray:
    """Integer args (stream, device, correlation, bytes); NULL where absent or not an integer."""
    try:
        return np.array(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        pass
    out = np.full(len(values), NULL, dtype=np.int64)
    for i, v in enumerate(values):
        if type(v) is int and -(2**63) < v < 2**63:
            out[i] = v
    return out


def _dims(values: list[Any], shifts: tuple[int, int]) -> np.ndarray:
    """[x, y, z] launch dimensions packed as (x << s0) + (y << s1) + z; 0 where absent, NULL (shown as
    unknown) where present but not three non-negative integers that fit their bits."""
    out = np.zeros(len(values), dtype=np.int64)
    limits = (1 << (63 - shifts[0]), 1 << (shifts[0] - shifts[1]), 1 << shifts[1])
    for i, v in enumerate(values):
        if v is None:
            continue
        if (
            isinstance(v, list)
            and len(v) == 3
            and all(type(d) is int and 0 <= d < top for d, top in zip(v, limits, strict=True))
        ):
            out[i] = (v[0] << shifts[0]) + (v[1] << shifts[1]) + v[2]
        else:
            out[i] = NULL
    return out


def shorten(name: str) -> str:
    """A kernel's base name: template and function arguments and the return type dropped (HTA's rule)."""
    if name.startswith(("Memcpy", "Memset", "dma")) or ("<" not in name and "(" not in name):
        return name
    stack: list[str] = []
    for c in name.replace("->", ""):
        if c in ">)":
            opener = "<" if c == ">" else "("
            while stack and stack[-1] != opener:
                stack.pop()
            if stack:
                stack.pop()
        else:
            stack.append(c)
    return "".join(stack).split(" ")[-1] or name


# --- building the frames ------------------------------------------------------------------------------


class _Ids:
    """pid/tid -> the 24-bit ids global_tid is made of (small ones for those that do not fit)."""

    def __init__(self) -> None:
        self.small: dict[Any, int] = {}

    def __call__(self, value: Any) -> int:
        if type(value) is int and 0 <= value < SMALL_ID:
            return value
        key = (type(value).__name__, value if isinstance(value, int | str) else str(value))
        if key not in self.small:
            self.small[key] = SMALL_ID + len(self.small)
        return self.small[key]


class _Names:
    """Every name seen, cleaned (analysis.readers.kineto_checks.clean_name), as integer ids in order of
    first sight; the raw strings already seen map straight to their id."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.text_ids: dict[str, int] = {}
        self.raw: dict[str, int] = {}
        self.escaped = 0  # distinct names that held lone surrogates

    def ids(self, values: list[Any]) -> np.ndarray:
        try:
            return np.fromiter(map(self.raw.__getitem__, values), dtype=np.int64, count=len(values))
        except (KeyError, TypeError):
            return np.fromiter(map(self.id, values), dtype=np.int64, count=len(values))

    def id(self, value: Any) -> int:
        if type(value) is str and value in self.raw:
            return self.raw[value]
        text = self.clean(value)
        i = self.text_ids.setdefault(text, len(self.texts))
        if i == len(self.texts):
            self.texts.append(text)
        if type(value) is str:
            self.raw[value] = i
        return i

    def clean(self, value: Any) -> str:
        if type(value) is str and value.isascii():
            return value
        text, escaped = clean_name(value)
        if type(value) is str:
            self.escaped += escaped
        return text


# the groups of complete events, by category; CPU groups first (their threads are named in this order)
GROUPS = ("runtime", "annotation", "cpu_ops", "kernels", "memcpy", "memset", "syncs", "gpu_annotation")
CPU_GROUPS = GROUPS[:3]
_METADATA, _OTHER = len(GROUPS), len(GROUPS) + 1
_CODES = {("X", cat): GROUPS.index(group) for cat, group in CATEGORIES.items()}
NO_ARGS = Args()


def _build(stream: TraceStream) -> tuple[dict[str, pd.DataFrame], dict[str, Any]]:
    """Every frame of the trace model from the events of a stream, and what meta() reports."""
    b = _Builder()
    for events in stream:
        b.add(events)
    if not stream.has_events:
        raise ExportError(f"{stream.path} is JSON but not a Chrome/Kineto trace (no traceEvents list)")
    frames = b.frames()
    meta = _meta(stream.top, b.float_times, b.ignored, sum(b.unusable.values()))
    meta["notes"], meta["hints"] = notes_and_hints(b.unusable, b.names.escaped, frames, HINTS)
    return frames, meta


def _key(pid: Any, tid: Any) -> tuple[Any, Any]:
    """A (pid, tid) key that can be hashed whatever the JSON held (a list, an object)."""
    return hashable(pid), hashable(tid)


def _ignored_key(e: Event) -> str:
    if e.ph is NOT_EVENT:
        return "not an event"
    return f"ph={e.ph}" if e.cat is UNSET else str(e.cat)


def _codes(events: list[Event]) -> np.ndarray:
    """Each event's group (an index into GROUPS), or _METADATA, or _OTHER."""
    phs = [e.ph for e in events]
    try:
        codes = np.fromiter(
            map(_CODES.get, zip(phs, [e.cat for e in events], strict=True), repeat(_OTHER)),
            dtype=np.int8,
            count=len(events),
        )
    except TypeError:  # a category that cannot be a key (a list): one event at a time
        codes = np.fromiter(
            (_CODES.get(("X", e.cat), _OTHER) if type(e.cat) is str else _OTHER for e in events),
            dtype=np.int8,
            count=len(events),
        )
    meta = np.fromiter((p == "M" for p in phs), dtype=bool, count=len(phs)) if "M" in phs else None
    if meta is not None:
        codes[meta] = _METADATA
    return codes


class _Builder:
    """Turns the events of each group into columns, a chunk at a time (numpy arrays, names as ids), and
    the columns into frames at the end."""

    def __init__(self) -> None:
        self.pids, self.tids = _Ids(), _Ids()
        self.names = _Names()
        self.pieces: dict[str, list[dict[str, np.ndarray]]] = {k: [] for k in GROUPS}
        self.thread_names: dict[tuple[Any, Any], str] = {}
        self.cpu_threads: dict[int, tuple[int, int, Any, Any]] = {}  # gtid -> (group, index, pid, tid)
        self.threads: dict[int, str] = {}
        self.unusable: dict[str, int] = {}  # X events without a usable ts or dur, by group
        self.ignored: dict[str, int] = {}
        self.float_times = False
        self.seen = 0  # events so far: the index of the next one in the file

    # --- a chunk of events ------------------------------------------------------------------------

    def add(self, events: list[Event]) -> None:
        first, self.seen = self.seen, self.seen + len(events)
        codes = _codes(events)
        for code in np.unique(codes).tolist():
            where = np.flatnonzero(codes == code)
            chosen = [events[i] for i in where.tolist()]
            if code == _METADATA:
                self.metadata(chosen)
            elif code == _OTHER:
                self.other(chosen)
            else:
                self.group(GROUPS[code], chosen, where + first)

    def metadata(self, events: list[Event]) -> None:
        for e in events:
            a = e.args
            if e.name == "thread_name" and a is not None and isinstance(a.name, str):
                self.thread_names[_key(e.pid, e.tid)] = clean_name(a.name.strip())[0]

    def other(self, events: list[Event]) -> None:
        for key, n in Counter(map(_ignored_key, events)).items():
            self.ignored[key] = self.ignored.get(key, 0) + n

    def group(self, kind: str, events: list[Event], index: np.ndarray) -> None:
        ts_values = [e.ts for e in events]
        self.float_times = self.float_times or str in set(map(type, ts_values))
        ts, ok_ts = _times(ts_values)
        dur, ok_dur = _times([e.dur for e in events])
        ok = ok_ts & ok_dur & (dur >= 0)
        if not ok.all():
            self.unusable[kind] = self.unusable.get(kind, 0) + int((~ok).sum())
            events = [e for e, keep in zip(events, ok.tolist(), strict=True) if keep]
            ts, dur, index = ts[ok], dur[ok], index[ok]
        args = [NO_ARGS if (a := e.args) is None else a for e in events]
        names = self.names.ids([e.name for e in events])
        piece = {"start": ts, "end": ts + dur, "index": index, "name": names}
        if kind in CPU_GROUPS:
            piece["global_tid"] = self.cpu_tids(events, GROUPS.index(kind), index)
        if kind == "runtime":
            piece["correlation"] = _ints([a.correlation for a in args])
        elif kind == "cpu_ops":
            piece["external_id"] = _ints([a.external_id for a in args])
        elif kind == "gpu_annotation":
            piece["device"] = _device(args, events)
            streams = [e.tid if a.stream is UNSET else a.stream for a, e in zip(args, events, strict=True)]
            piece["stream"] = _ints(streams)
        elif kind != "annotation":
            piece["device"] = _device(args, events)
            piece["stream"] = _ints([a.stream for a in args])
            piece["correlation"] = _ints([a.correlation for a in args])
            if kind == "kernels":
                piece["grid"] = _dims([a.grid for a in args], (32, 16))
                piece["block"] = _dims([a.block for a in args], (22, 11))
            elif kind in ("memcpy", "memset"):
                piece["bytes"] = _ints([a.bytes for a in args])
        self.pieces[kind].append(piece)

    def cpu_tids(self, events: list[Event], group: int, index: np.ndarray) -> np.ndarray:
        """global_tid of CPU events; a thread seen for the first time is remembered with where."""
        pids, tids = [e.pid for e in events], [e.tid for e in events]
        if set(map(type, pids)) | set(map(type, tids)) <= {int}:
            p, t = np.array(pids, dtype=np.int64), np.array(tids, dtype=np.int64)
            if len(p) == 0 or (p.min() >= 0 and t.min() >= 0 and p.max() < SMALL_ID and t.max() < SMALL_ID):
                out = (p << 24) | t
                new, first = np.unique(out, return_index=True)
                for gtid, i in zip(new.tolist(), first.tolist(), strict=True):
                    self.thread_seen(gtid, (group, int(index[i]), pids[i], tids[i]))
                return out
        out = np.empty(len(pids), dtype=np.int64)
        for i, (pid, tid) in enumerate(zip(pids, tids, strict=True)):
            gtid = (self.pids(hashable(pid)) << 24) | self.tids(hashable(tid))
            self.thread_seen(gtid, (group, int(index[i]), hashable(pid), hashable(tid)))
            out[i] = gtid
        return out

    def thread_seen(self, gtid: int, where: tuple[int, int, Any, Any]) -> None:
        """Keep where a thread is first seen: its first group, then its first event there."""
        known = self.cpu_threads.get(gtid)
        if known is None or where[:2] < known[:2]:
            self.cpu_threads[gtid] = where

    # --- the frames --------------------------------------------------------------------------------

    def frames(self) -> dict[str, pd.DataFrame]:
        parts = {k: _concat(self.pieces.pop(k)) for k in GROUPS}
        self.name_threads()
        rt, ops = parts["runtime"], parts["cpu_ops"]
        launcher = self._launcher(rt, parts["annotation"], ops)
        kernels = parts["kernels"]
        texts = self.names.texts
        short = np.array(
            [self.names.id(shorten(texts[i])) for i in range(len(texts))] or [0], dtype=np.int64
        )  # every name's short name, by id (only kernels' are used)
        kernels["short"] = short[kernels["name"]]
        strings = _StringTable(
            texts, [rt["name"], kernels["name"], kernels["short"], parts["syncs"]["name"], ops["name"]]
        )
        out: dict[str, pd.DataFrame] = {}
        out["runtime"] = pd.DataFrame(
            {
                "start": rt["start"],
                "end": rt["end"],
                "correlation_id": rt["correlation"],
                "global_tid": rt["global_tid"],
                "name_id": strings.ids(rt["name"]),
            }
        )
        for frame in ("kernels", "memcpy", "memset", "syncs"):
            out[frame] = self.gpu_frame(frame, parts[frame], launcher, strings)
        out["cpu_ops"] = pd.DataFrame(
            {
                "start": ops["start"],
                "end": ops["end"],
                "global_tid": ops["global_tid"],
                "name_id": strings.ids(ops["name"]),
                "external_id": ops["external_id"],
            }
        )
        out["nvtx"] = self.ranges(parts["annotation"], parts["gpu_annotation"])
        out["threads"] = pd.DataFrame(
            {
                "global_tid": np.fromiter(self.threads, dtype=np.int64, count=len(self.threads)),
                "name": pd.Series(list(self.threads.values()), dtype=object),
            }
        )
        out["strings"] = strings.frame()
        return out

    def name_threads(self) -> None:
        """Name the CPU threads (now that every thread_name event is read), in the order the groups and
        the file first show them."""
        for gtid, (_, _, pid, tid) in sorted(self.cpu_threads.items(), key=lambda kv: kv[1][:2]):
            name = self.thread_names.get((pid, tid)) or f"thread {tid}"
            if (gtid >> 24) >= SMALL_ID or (gtid & 0xFFFFFF) >= SMALL_ID:
                name += f" [pid {pid}, tid {tid}]"
            self.threads[gtid] = self.names.texts[self.names.id(name)]

    def _launcher(self, *cpu_parts: dict[str, np.ndarray]) -> Launcher:
        """Who launched each GPU event: correlation id -> global pid of the runtime call, the pid of the
        traced process, and the correlation ids that several processes used (traces merged from ranks)."""
        rt = cpu_parts[0]
        gpid = rt["global_tid"] & ~0xFFFFFF
        by_corr: dict[int, int] = {}
        shared: set[int] = set()
        for c, p in zip(rt["correlation"].tolist(), gpid.tolist(), strict=True):
            if by_corr.setdefault(c, p) != p:
                shared.add(c)
        main = next((int(p["global_tid"][0]) & ~0xFFFFFF for p in cpu_parts if len(p["global_tid"])), 0)
        return Launcher(by_corr, main, shared, set(gpid.tolist()))

    def gpu_frame(
        self, frame: str, part: dict[str, np.ndarray], launcher: Launcher, strings: _StringTable
    ) -> pd.DataFrame:
        corr, device = part["correlation"], part["device"]
        columns: dict[str, Any] = {
            "start": part["start"],
            "end": part["end"],
            "stream_id": part["stream"],
            "correlation_id": corr,
            "global_pid": launcher.pids(corr, device),
            "device_id": device,
        }
        if frame == "kernels":
            ids = strings.ids(part["name"])
            columns.update(
                grid=part["grid"],
                block=part["block"],
                name_id=ids,
                short_name_id=strings.ids(part["short"]),
                mangled_name_id=ids,  # Kineto keeps demangled names only: fall back to them, as nsys does
            )
        elif frame == "syncs":
            columns["name_id"] = strings.ids(part["name"])
        else:
            columns["bytes"] = part["bytes"]
            distinct = np.unique(part["name"])
            kinds = np.zeros((len(self.names.texts), 3), dtype=np.int64)
            for i in distinct.tolist():
                kinds[i] = _memop_kinds(self.names.texts[i])
            kind = kinds[part["name"]]
            if frame == "memcpy":
                columns.update(copy_kind=kind[:, 0], src_kind=kind[:, 1], dst_kind=kind[:, 2])
            else:
                columns["mem_kind"] = kind[:, 1]
        return pd.DataFrame(columns)

    def ranges(self, cpu: dict[str, np.ndarray], gpu: dict[str, np.ndarray]) -> pd.DataFrame:
        """user_annotation ranges (push/pop on their thread) and gpu_user_annotation ones (start/end, domain
        GPU, on their stream's thread), in file order; range_id is the event's index in the file."""
        streams = np.where(gpu["stream"] == NULL, 0, gpu["stream"])
        gpu_tid = np.fromiter(
            (self.gpu_thread(d, s) for d, s in zip(gpu["device"].tolist(), streams.tolist(), strict=True)),
            dtype=np.int64,
            count=len(streams),
        )
        n_cpu = len(cpu["start"])
        ids = np.concatenate([cpu["name"], gpu["name"]])
        texts = np.array([*self.names.texts, ""], dtype=object)
        steps = {i: _step(texts[i]) for i in np.unique(ids).tolist()}
        df = pd.DataFrame(
            {
                "range_id": np.concatenate([cpu["index"], gpu["index"]]),
                "start": np.concatenate([cpu["start"], gpu["start"]]),
                "end": np.concatenate([cpu["end"], gpu["end"]]),
                "global_tid": np.concatenate([cpu["global_tid"], gpu_tid]),
                "pushpop": np.concatenate([np.ones(n_cpu, dtype=bool), np.zeros(len(gpu_tid), dtype=bool)]),
                "payload": pd.array([steps[i] for i in ids.tolist()], dtype="Int64"),
                "name": pd.Categorical(texts[ids]),
                "domain": pd.Categorical([None] * n_cpu + [ANNOTATION_DOMAIN] * len(gpu_tid)),
            }
        )
        return df.sort_values("range_id", kind="stable", ignore_index=True)

    def gpu_thread(self, device: int, stream: int) -> int:
        """A stream's global_tid: process GPU_PROCESS + device, thread = the stream."""
        gtid = ((GPU_PROCESS + (device & 0x3FFFFF)) << 24) | (stream & 0xFFFFFF)
        if gtid not in self.threads:
            self.threads[gtid] = f"GPU {device} stream {stream}"
        return gtid


# the columns of each group, with their dtypes, for a group without events
_COLUMNS = ("start", "end", "index", "name", "global_tid", "correlation", "external_id", "device", "stream",
            "grid", "block", "bytes")  # fmt: skip


def _concat(pieces: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    if not pieces:
        return {c: np.empty(0, dtype=np.int64) for c in _COLUMNS}
    return {c: np.concatenate([p[c] for p in pieces]) for c in pieces[0]}


class _StringTable:
    """The strings frame: the names that tables look up by id, numbered in the order the frames list
    them (runtime, kernels, their short names, syncs, cpu_ops), as they were before the reader streamed."""

    def __init__(self, texts: list[str], in_order: list[np.ndarray]) -> None:
        self.order = pd.unique(np.concatenate(in_order)) if in_order else np.empty(0, dtype=np.int64)
        self.remap = np.full(len(texts) + 1, -1, dtype=np.int64)
        self.remap[self.order] = np.arange(len(self.order), dtype=np.int64)
        self.texts = texts

    def ids(self, names: np.ndarray) -> np.ndarray:
        return self.remap[names]

    def frame(self) -> pd.DataFrame:
        values = [self.texts[i] for i in self.order.tolist()]
        return pd.DataFrame(
            {"id": np.arange(len(values), dtype=np.int64), "value": pd.Series(values, dtype=object)}
        )


@dataclass
class Launcher:
    """The process that launched each GPU event, by its correlation id. A correlation id is unique within a
    process only: where several processes used one (a trace merged from ranks), the event goes to the
    process that launched the rest of its device's work, else, with as many such processes as devices, the
    k-th process (by pid) drives the k-th device, as torchrun's local ranks do."""

    by_corr: dict[int, int]
    main: int
    shared: set[int]
    processes: set[int]

    def pids(self, corr: np.ndarray, device: np.ndarray) -> np.ndarray:
        out = np.fromiter((self.by_corr.get(c, self.main) for c in corr.tolist()), np.int64, len(corr))
        if not self.shared:
            return out
        ambiguous = np.fromiter((c in self.shared for c in corr.tolist()), bool, len(corr))
        sure = pd.DataFrame({"device": device[~ambiguous], "pid": out[~ambiguous]})
        owner = sure.groupby("device")["pid"].agg(lambda p: p.mode().iloc[0]).to_dict() if len(sure) else {}
        devices = sorted(set(device[ambiguous].tolist()) - set(owner))
        processes = sorted(self.processes - set(owner.values()))
        if len(devices) == len(processes):
            owner.update(zip(devices, processes, strict=True))
        guess = [owner.get(int(d), int(p)) for d, p in zip(device[ambiguous], out[ambiguous], strict=True)]
        out[ambiguous] = guess
        return out


def _device(args: list[Args], events: list[Event]) -> np.ndarray:
    """Each GPU event's device: args.device, else the event's pid (Kineto's pid of GPU rows), else 0."""
    out = []
    for a, e in zip(args, events, strict=True):
        d = e.pid if a.device is UNSET else a.device
        out.append(d if type(d) is int and 0 <= d < 2**63 else 0)
    return np.array(out, dtype=np.int64)


def _memop_kinds(name: Any) -> tuple[int, int, int]:
    """(copy kind, source or set memory kind, destination memory kind) from a Kineto memcpy/memset name."""
    if isinstance(name, str):
        if m := MEMCPY_RE.match(name):
            return (COPY_KINDS.get(m[1], 0), MEMORY_KINDS.get(m[2], 0), MEMORY_KINDS.get(m[3], 0))
        if m := MEMSET_RE.match(name):
            return (0, MEMORY_KINDS.get(m[1], 0), 0)
    return (0, 0, 0)


def _step(name: str) -> int | None:
    m = STEP_RE.match(name)
    if not m or len(m[1]) > 18:  # a step number past int64 is no step number
        return None
    return int(m[1])


def _meta(top: dict[str, Any], float_times: bool, ignored: dict[str, int], unusable: int) -> dict[str, Any]:
    dist = top.get("distributedInfo") if isinstance(top.get("distributedInfo"), dict) else {}
    devices = top.get("deviceProperties") if isinstance(top.get("deviceProperties"), list) else []
    rank = dist.get("rank")
    base = top.get("baseTimeNanoseconds")
    return {
        "producer": "PyTorch Profiler (Kineto)",
        "producer_version": None,
        "schema": str(top["schemaVersion"]) if "schemaVersion" in top else None,
        "time_unit": "us",
        "rank": rank if type(rank) is int else None,
        "world_size": dist.get("world_size") if type(dist.get("world_size")) is int else None,
        "devices": [str(d.get("name")) for d in devices if isinstance(d, dict)],
        "base_time_ns": base if type(base) is int else None,
        "float_times": float_times,  # microseconds with fractions: what makes HTA round (analysis.hta_rules)
        "ignored": ignored,
        "unusable": unusable,
    }
