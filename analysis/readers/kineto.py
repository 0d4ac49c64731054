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
import json
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.errors import ExportError
from analysis.readers import NULL, valid_duration
from analysis.readers.kineto_checks import clean_name, hashable, is_complete, notes_and_hints

__all__ = ["FORMAT", "VERSION", "KinetoReader", "clean_name", "is_complete", "open_kineto", "text_ns"]

VERSION = "kineto-3"  # bump when what a frame holds changes: cached frames of other versions are rebuilt
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
    """One parsed trace: its frames (built on open, the whole file being one JSON document) and metadata."""

    format = FORMAT
    version = VERSION

    def __init__(self, path: Path, doc: Any) -> None:
        self.path = path
        self.reads: dict[str, int] = {"traceEvents": 1}  # the file is parsed once, on open
        self._frames, self._meta = _build(doc)

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
    """Parse `path` (a Chrome/Kineto trace, gzipped or not), or raise ExportError saying what is wrong."""
    path = Path(path)
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
    except OSError as e:
        why = e.strerror or str(e)
        raise ExportError(f"cannot read {path}: {why}") from None
    except (EOFError, zlib.error) as e:
        raise ExportError(f"{path} is a corrupt or truncated gzip file ({e})") from None
    if not raw.strip():
        raise ExportError(f"{path} is empty: not a Kineto trace")
    try:
        doc = json.loads(raw, parse_float=str)  # floats as their text: exact nanoseconds below
    except (ValueError, RecursionError) as e:
        why = str(e).splitlines()[0]
        raise ExportError(f"{path} is not valid JSON ({why}): not a Kineto trace") from None
    if isinstance(doc, dict) and not isinstance(doc.get("traceEvents"), list):
        raise ExportError(f"{path} is JSON but not a Chrome/Kineto trace (no traceEvents list)")
    if not isinstance(doc, dict | list):
        raise ExportError(f"{path} is JSON but not a Chrome/Kineto trace")
    return KinetoReader(path, doc)


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


class _Strings:
    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def ids_of(self, names: list[Any]) -> np.ndarray:
        ids = self.ids
        return np.fromiter(
            (ids.setdefault(n if type(n) is str else str(n), len(ids)) for n in names),
            dtype=np.int64,
            count=len(names),
        )

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(
            {"id": np.arange(len(self.ids), dtype=np.int64), "value": pd.Series(list(self.ids), dtype=object)}
        )


def _events(doc: Any) -> list[Any]:
    return doc.get("traceEvents", []) if isinstance(doc, dict) else doc


def _build(doc: Any) -> tuple[dict[str, pd.DataFrame], dict[str, Any]]:
    """Every frame of the trace model from the parsed document, and what meta() reports."""
    events = _events(doc)
    groups: dict[str, list[tuple[int, dict[str, Any]]]] = {k: [] for k in set(CATEGORIES.values())}
    thread_names: dict[tuple[Any, Any], str] = {}
    ignored: dict[str, int] = {}
    float_times = False
    for i, e in enumerate(events):
        if type(e) is not dict:
            ignored["not an event"] = ignored.get("not an event", 0) + 1
            continue
        ph = e.get("ph")
        if ph == "X":
            cat = e.get("cat")
            kind = CATEGORIES.get(cat) if type(cat) is str else None
            if kind is not None:
                groups[kind].append((i, e))
                float_times = float_times or type(e.get("ts")) is str
                continue
        elif ph == "M":
            args = e.get("args")
            if e.get("name") == "thread_name" and type(args) is dict and isinstance(args.get("name"), str):
                thread_names[_key(e.get("pid"), e.get("tid"))] = clean_name(args["name"].strip())[0]
            continue
        key = str(e.get("cat", f"ph={ph}"))
        ignored[key] = ignored.get(key, 0) + 1
    b = _Builder(thread_names)
    frames = b.frames(groups)
    meta = _meta(doc, float_times, ignored, sum(b.unusable.values()))
    meta["notes"], meta["hints"] = notes_and_hints(b.unusable, b.escaped, frames, HINTS)
    return frames, meta


def _shapes(dims: Any) -> str:
    """An operator's input sizes as torch prints them ([[2, 3], [], [3]]); "" when not recorded."""
    if type(dims) is not list:
        return ""
    return (
        "["
        + ", ".join(
            "[" + ", ".join(str(d) for d in x) + "]" if type(x) is list else json.dumps(x) for x in dims
        )
        + "]"
    )


def _key(pid: Any, tid: Any) -> tuple[Any, Any]:
    """A (pid, tid) key that can be hashed whatever the JSON held (a list, an object)."""
    return hashable(pid), hashable(tid)


class _Builder:
    """Turns the events of each category into columns."""

    def __init__(self, thread_names: dict[tuple[Any, Any], str]) -> None:
        self.pids, self.tids = _Ids(), _Ids()
        self.strings = _Strings()
        self.thread_names = thread_names
        self.threads: dict[int, str] = {}
        self.unusable: dict[str, int] = {}  # X events without a usable ts or dur, by group
        self.escaped = 0  # distinct names that held lone surrogates
        self._names: dict[str, str] = {}

    def frames(self, groups: dict[str, list[tuple[int, dict[str, Any]]]]) -> dict[str, pd.DataFrame]:
        cpu = {k: self.common(groups[k], thread=True, kind=k) for k in ("runtime", "annotation", "cpu_ops")}
        gpu = {
            k: self.common(groups[k], thread=False, kind=k) for k in ("kernels", "memcpy", "memset", "syncs")
        }
        launcher = self._launcher(cpu["runtime"], cpu["annotation"], cpu["cpu_ops"])
        out: dict[str, pd.DataFrame] = {}
        rt = cpu["runtime"]
        out["runtime"] = pd.DataFrame(
            {
                "start": rt["start"],
                "end": rt["end"],
                "correlation_id": _ints([a.get("correlation") for a in rt["args"]]),
                "global_tid": rt["global_tid"],
                "name_id": self.strings.ids_of(rt["name"]),
            }
        )
        for frame, part in gpu.items():
            out[frame] = self.gpu_frame(frame, part, launcher)
        ops = cpu["cpu_ops"]
        out["cpu_ops"] = pd.DataFrame(
            {
                "start": ops["start"],
                "end": ops["end"],
                "global_tid": ops["global_tid"],
                "name_id": self.strings.ids_of(ops["name"]),
                "external_id": _ints([a.get("External id") for a in ops["args"]]),
                # record_shapes=True: input sizes, as key_averages(group_by_input_shape=True) shows them
                "shapes_id": self.strings.ids_of([_shapes(a.get("Input Dims")) for a in ops["args"]]),
            }
        )
        gpu_ranges = self.common(groups["gpu_annotation"], thread=False, kind="gpu_annotation")
        out["nvtx"] = self.ranges(cpu["annotation"], gpu_ranges)
        out["threads"] = pd.DataFrame(
            {
                "global_tid": np.fromiter(self.threads, dtype=np.int64, count=len(self.threads)),
                "name": pd.Series(list(self.threads.values()), dtype=object),
            }
        )
        out["strings"] = self.strings.frame()
        return out

    def common(self, group: list[tuple[int, dict[str, Any]]], *, thread: bool, kind: str) -> dict[str, Any]:
        """start, end (ns), index, name, args, pid, tid, and for CPU events global_tid, of the events whose
        ts and dur are usable."""
        ts, ok_ts = _times([e.get("ts") for _, e in group])
        dur, ok_dur = _times([e.get("dur") for _, e in group])
        ok = ok_ts & ok_dur & (dur >= 0)
        if not ok.all():
            self.unusable[kind] = int((~ok).sum())
            group = [g for g, keep in zip(group, ok, strict=True) if keep]
            ts, dur = ts[ok], dur[ok]
        part: dict[str, Any] = {
            "start": ts,
            "end": ts + dur,
            "index": np.fromiter((i for i, _ in group), dtype=np.int64, count=len(group)),
            "name": [self.name(e.get("name", "")) for _, e in group],
            "args": [a if type(a := e.get("args")) is dict else {} for _, e in group],
            "pid": [p if type(p := e.get("pid")) is int else hashable(p) for _, e in group],
            "tid": [t if type(t := e.get("tid")) is int else hashable(t) for _, e in group],
        }
        if thread:
            part["global_tid"] = self.cpu_threads(part["pid"], part["tid"])
        return part

    def name(self, value: Any) -> str:
        if type(value) is str and value.isascii():
            return value
        if type(value) is str and value in self._names:
            return self._names[value]
        text, escaped = clean_name(value)
        if type(value) is str:
            self._names[value] = text
            self.escaped += escaped
        return text

    def cpu_threads(self, pids: list[Any], tids: list[Any]) -> np.ndarray:
        out = np.empty(len(pids), dtype=np.int64)
        seen: dict[tuple[Any, Any], int] = {}
        for i, key in enumerate(zip(pids, tids, strict=True)):
            gtid = seen.get(key)
            if gtid is None:
                pid, tid = self.pids(key[0]), self.tids(key[1])
                gtid = seen[key] = (pid << 24) | tid
                if gtid not in self.threads:
                    name = self.thread_names.get(key) or f"thread {key[1]}"
                    if pid >= SMALL_ID or tid >= SMALL_ID:
                        name += f" [pid {key[0]}, tid {key[1]}]"
                    self.threads[gtid] = self.name(name)
            out[i] = gtid
        return out

    def _launcher(self, *cpu_parts: dict[str, Any]) -> Launcher:
        """Who launched each GPU event: correlation id -> global pid of the runtime call, the pid of the
        traced process, and the correlation ids that several processes used (traces merged from ranks)."""
        rt = cpu_parts[0]
        corr = _ints([a.get("correlation") for a in rt["args"]])
        gpid = rt["global_tid"] & ~0xFFFFFF
        by_corr: dict[int, int] = {}
        shared: set[int] = set()
        for c, p in zip(corr.tolist(), gpid.tolist(), strict=True):
            if by_corr.setdefault(c, p) != p:
                shared.add(c)
        main = next((int(p["global_tid"][0]) & ~0xFFFFFF for p in cpu_parts if len(p["global_tid"])), 0)
        return Launcher(by_corr, main, shared, set(gpid.tolist()))

    def gpu_frame(self, frame: str, part: dict[str, Any], launcher: Launcher) -> pd.DataFrame:
        args = part["args"]
        corr = _ints([a.get("correlation") for a in args])
        device = np.array(_device(part), dtype=np.int64)
        columns: dict[str, Any] = {
            "start": part["start"],
            "end": part["end"],
            "stream_id": _ints([a.get("stream") for a in args]),
            "correlation_id": corr,
            "global_pid": launcher.pids(corr, device),
            "device_id": device,
        }
        names = part["name"]
        if frame == "kernels":
            ids = self.strings.ids_of(names)
            short = {n: shorten(n) if isinstance(n, str) else str(n) for n in set(names)}
            columns.update(
                grid=_dims([a.get("grid") for a in args], (32, 16)),
                block=_dims([a.get("block") for a in args], (22, 11)),
                name_id=ids,
                short_name_id=self.strings.ids_of([short[n] for n in names]),
                mangled_name_id=ids,  # Kineto keeps demangled names only: fall back to them, as nsys does
            )
        elif frame == "syncs":
            columns["name_id"] = self.strings.ids_of(names)
        else:
            columns["bytes"] = _ints([a.get("bytes") for a in args])
            kinds = [_memop_kinds(n) for n in names]
            if frame == "memcpy":
                columns.update(
                    copy_kind=np.array([k[0] for k in kinds], dtype=np.int64),
                    src_kind=np.array([k[1] for k in kinds], dtype=np.int64),
                    dst_kind=np.array([k[2] for k in kinds], dtype=np.int64),
                )
            else:
                columns["mem_kind"] = np.array([k[1] for k in kinds], dtype=np.int64)
        return pd.DataFrame(columns)

    def ranges(self, cpu: dict[str, Any], gpu: dict[str, Any]) -> pd.DataFrame:
        """user_annotation ranges (push/pop on their thread) and gpu_user_annotation ones (start/end, domain
        GPU, on their stream's thread), in file order; range_id is the event's index in the file."""
        device = _device(gpu)
        stream = _ints([a.get("stream", t) for a, t in zip(gpu["args"], gpu["tid"], strict=True)])
        gpu_tid = np.fromiter(
            (self.gpu_thread(d, s if s != NULL else 0) for d, s in zip(device, stream.tolist(), strict=True)),
            dtype=np.int64,
            count=len(device),
        )
        n_cpu = len(cpu["start"])
        names = [n if isinstance(n, str) else str(n) for n in (*cpu["name"], *gpu["name"])]
        df = pd.DataFrame(
            {
                "range_id": np.concatenate([cpu["index"], gpu["index"]]),
                "start": np.concatenate([cpu["start"], gpu["start"]]),
                "end": np.concatenate([cpu["end"], gpu["end"]]),
                "global_tid": np.concatenate([cpu["global_tid"], gpu_tid]),
                "pushpop": np.concatenate([np.ones(n_cpu, dtype=bool), np.zeros(len(gpu_tid), dtype=bool)]),
                "payload": pd.array([_step(n) for n in names], dtype="Int64"),
                "name": pd.Categorical(names),
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


def _device(part: dict[str, Any]) -> list[int]:
    """Each GPU event's device: args.device, else the event's pid (Kineto's pid of GPU rows), else 0."""
    out = []
    for a, pid in zip(part["args"], part["pid"], strict=True):
        d = a.get("device", pid)
        out.append(d if type(d) is int and d >= 0 else 0)
    return out


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


def _meta(doc: Any, float_times: bool, ignored: dict[str, int], unusable: int) -> dict[str, Any]:
    top = doc if isinstance(doc, dict) else {}
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
