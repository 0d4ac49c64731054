"""The trace model's frames built from a Kineto trace's decoded events (`_build`, `_Builder`): ids made to fit
nsys's global ids, names and strings numbered, memory operations' kinds, GPU streams as threads, kernels
tied to their launches, and what the trace says of itself (`_meta`)."""

from __future__ import annotations

import gc
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from analysis.errors import ExportError
from analysis.readers import COPY_KINDS, MEMORY_KINDS, NULL, trim_heap
from analysis.readers.global_ids import ID_MASK, PROCESS_MASK, compose_tid, pid_of, tid_of
from analysis.readers.kineto_checks import clean_name, notes_and_hints
from analysis.readers.kineto_columns import CPU_GROUPS, GROUPS, Piece, ignored_key
from analysis.readers.kineto_stream import TraceStream

GPU_PROCESS = 1 << 23  # + device: the "process" whose threads are a GPU's streams
COMPACT = 16  # pieces of a group held apart before they are joined
STEP = 1 << 16  # values a pass over a whole column takes at a time, where its temporaries would be as long
SMALL_ID = 1 << 22  # ids from here on stand for pids/tids that do not fit 24 bits
ANNOTATION_DOMAIN = "GPU"  # nvtx domain of gpu_user_annotation ranges
STEP_RE = re.compile(r"ProfilerStep\s*#\s*(\d+)")
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


def _small_ids(values: np.ndarray, ids: _Ids) -> np.ndarray:
    """Integer pids or tids as their 24-bit ids."""
    if values.min() >= 0 and values.max() < SMALL_ID:
        return values
    distinct, inverse = np.unique(values, return_inverse=True)
    return np.array([ids(v) for v in distinct.tolist()], dtype=np.int64)[inverse]


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
            pass
        if all(type(v) is str for v in values):  # new names: given ids in order, then all looked up at once
            for v in values:
                if v not in self.raw:
                    self.id(v)
            return np.fromiter(map(self.raw.__getitem__, values), dtype=np.int64, count=len(values))
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


def build(pieces: Iterable[Piece], stream: TraceStream) -> tuple[dict[str, pd.DataFrame], dict[str, Any]]:
    """Every frame of the trace model from the pieces of a stream (kineto_pool), and what meta() reports."""
    b = _Builder()
    gc_was_on = gc.isenabled()
    gc.disable()  # millions of short-lived objects and no cycles: the collector would only rescan them
    try:
        for piece in pieces:
            b.merge(piece)
    finally:
        if gc_was_on:
            gc.enable()
    if not stream.has_events:
        raise ExportError(f"{stream.path} is JSON but not a Chrome/Kineto trace (no traceEvents list)")
    frames = b.frames()
    meta = _meta(stream.top, b.float_times, b.ignored, sum(b.unusable.values()))
    meta["notes"], meta["hints"] = notes_and_hints(b.unusable, b.names.escaped, frames, HINTS)
    meta["left_out"] = sorted(f for f, hint in meta["hints"].items() if hint != HINTS.get(f))  # all unusable
    return frames, meta


class _Builder:
    """Turns the events of each group into columns, a chunk at a time (numpy arrays, names as ids), and
    the columns into frames at the end."""

    def __init__(self) -> None:
        self.pids, self.tids = _Ids(), _Ids()
        self.names = _Names()
        self.pieces: dict[str, list[dict[str, np.ndarray]]] = {k: [] for k in GROUPS}
        self.fresh = dict.fromkeys(GROUPS, 0)  # the last pieces of each group, not joined yet
        self.thread_names: dict[tuple[Any, Any], str] = {}
        self.cpu_threads: dict[int, tuple[int, int, Any, Any]] = {}  # gtid -> (group, index, pid, tid)
        self.threads: dict[int, str] = {}
        self.unusable: dict[str, int] = {}  # X events without a usable ts or dur, by group
        self.ignored: dict[str, int] = {}
        self.float_times = False
        self.seen = 0  # events so far: the index of the next one in the file

    # --- a piece of events ------------------------------------------------------------------------

    def merge(self, piece: Piece) -> None:
        """Take a piece's columns: trace-wide indexes, name ids and thread ids."""
        first, self.seen = self.seen, self.seen + piece.count
        lookup = self.names.ids(piece.names)
        for kind, out in piece.groups.items():
            out["index"] = out["index"] + first
            out["name"] = lookup[out["name"]] if len(lookup) else out["name"]
            if "shapes" in out:
                out["shapes"] = lookup[out["shapes"]] if len(lookup) else out["shapes"]
            if kind in CPU_GROUPS:
                out["global_tid"] = self.cpu_tids(
                    out.pop("pid"), out.pop("tid"), GROUPS.index(kind), out["index"]
                )
            if kind not in ("annotation", "gpu_annotation"):
                del out["index"]  # a range's id; no other frame keeps where an event was in the file
            pieces = self.pieces[kind]
            pieces.append(out)
            self.fresh[kind] += 1
            if self.fresh[kind] == COMPACT:
                self.fresh[kind] = 0
                # the last pieces' small arrays (malloc's heap, which a process does not give back) joined
                # into a big one (its own mapping, given back when freed): the heap is reused, not grown
                pieces[-COMPACT:] = [_concat(pieces[-COMPACT:])]
        for (ph, cat), n in piece.ignored.items():
            k = ignored_key(ph, cat)
            self.ignored[k] = self.ignored.get(k, 0) + n
        self.thread_names.update(piece.thread_names)
        for kind, n in piece.unusable.items():
            self.unusable[kind] = self.unusable.get(kind, 0) + n
        self.float_times = self.float_times or piece.float_times

    def cpu_tids(self, pids: Any, tids: Any, group: int, index: np.ndarray) -> np.ndarray:
        """global_tid of CPU events; a thread seen for the first time is remembered with where."""
        if isinstance(pids, np.ndarray) and isinstance(tids, np.ndarray):
            out = compose_tid(_small_ids(pids, self.pids), _small_ids(tids, self.tids))
            new, first = np.unique(out, return_index=True)
            for gtid, i in zip(new.tolist(), first.tolist(), strict=True):
                self.thread_seen(gtid, (group, int(index[i]), int(pids[i]), int(tids[i])))
            return out
        out = np.empty(len(pids), dtype=np.int64)
        for i, (pid, tid) in enumerate(zip(pids, tids, strict=True)):
            pid, tid = (v.item() if isinstance(v, np.integer) else v for v in (pid, tid))
            gtid = compose_tid(self.pids(pid), self.tids(tid))
            self.thread_seen(gtid, (group, int(index[i]), pid, tid))
            out[i] = gtid
        return out

    def thread_seen(self, gtid: int, where: tuple[int, int, Any, Any]) -> None:
        """Keep where a thread is first seen: its first group, then its first event there."""
        known = self.cpu_threads.get(gtid)
        if known is None or where[:2] < known[:2]:
            self.cpu_threads[gtid] = where

    # --- the frames --------------------------------------------------------------------------------

    def frames(self) -> dict[str, pd.DataFrame]:
        parts = {k: _concat(self.pieces.pop(k), trim=True) for k in GROUPS}
        self.name_threads()
        rt, ops = parts["runtime"], parts["cpu_ops"]
        launcher = self._launcher(rt, parts["annotation"], ops)
        trim_heap()  # its temporaries
        kernels = parts["kernels"]
        texts = self.names.texts
        short = np.zeros(len(texts) or 1, dtype=np.int64)  # kernel names' short names, by id
        for i in np.unique(kernels["name"]).tolist():
            short[i] = self.names.id(shorten(texts[i]))
        kernels["short"] = short[kernels["name"]]
        strings = _StringTable(
            texts,
            [
                rt["name"],
                kernels["name"],
                kernels["short"],
                parts["syncs"]["name"],
                ops["name"],
                ops["shapes"],
            ],
        )
        out: dict[str, pd.DataFrame] = {}
        out["runtime"] = pd.DataFrame(
            {
                "start": rt["start"],
                "end": rt["end"],
                "correlation_id": rt["correlation"],
                "global_tid": rt["global_tid"],
                "name_id": strings.ids(rt["name"]),
            },
            copy=False,  # the columns are the frame's own: no second copy of them (memory)
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
                "shapes_id": strings.ids(ops["shapes"]),
            },
            copy=False,
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
            if int(pid_of(gtid)) >= SMALL_ID or int(tid_of(gtid)) >= SMALL_ID:
                name += f" [pid {pid}, tid {tid}]"
            self.threads[gtid] = self.names.texts[self.names.id(name)]

    def _launcher(self, *cpu_parts: dict[str, np.ndarray]) -> Launcher:
        """Who launched each GPU event: correlation id -> global pid of the runtime call, the pid of the
        traced process, and the correlation ids that several processes used (traces merged from ranks)."""
        rt = cpu_parts[0]
        corr, gtid = rt["correlation"], rt["global_tid"]
        keys = np.sort(corr)  # np.unique(corr) took 0.5 s for 226,000 distinct ids (numpy 2.4: a hash set)
        keys = keys[np.concatenate(([True], keys[1:] != keys[:-1]))] if len(keys) else keys
        pid = np.full(len(keys), -1, dtype=np.int64)  # global pids are not negative
        shared: set[int] = set()
        processes: set[int] = set()
        # a block of calls at a time, in file order (each id's first call decides): no temporary as long as
        # the calls (np.unique's return_index took 77 MB more at 2 GB of JSON)
        for at in range(0, len(corr), STEP):
            c, gpid = corr[at : at + STEP], gtid[at : at + STEP] & PROCESS_MASK
            where = np.searchsorted(keys, c)
            new = pid[where] < 0
            if new.any():
                seen, first = np.unique(where[new], return_index=True)
                pid[seen] = gpid[new][first]
            shared.update(np.unique(c[gpid != pid[where]]).tolist())
            processes.update(np.unique(gpid).tolist())
        main = next((int(p["global_tid"][0]) & PROCESS_MASK for p in cpu_parts if len(p["global_tid"])), 0)
        return Launcher(keys, pid, main, shared, processes)

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
        if frame != "syncs":  # Kineto records no CUDA context, nor a copy's devices
            columns["context_id"] = np.full(len(corr), NULL, dtype=np.int64)
        if frame in ("memcpy", "memset"):
            columns["green_context_id"] = columns["context_id"]
        if frame == "memcpy":
            columns["src_device"] = columns["dst_device"] = columns["context_id"]
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
        return pd.DataFrame(columns, copy=False)

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
        gtid = compose_tid(GPU_PROCESS + (device & 0x3FFFFF), stream & ID_MASK)
        if gtid not in self.threads:
            self.threads[gtid] = f"GPU {device} stream {stream}"
        return gtid


# the columns of each group, with their dtypes, for a group without events
_COLUMNS = ("start", "end", "index", "name", "global_tid", "correlation", "external_id", "device", "stream",
            "grid", "block", "bytes", "shapes")  # fmt: skip


def _concat(pieces: list[dict[str, np.ndarray]], trim: bool = False) -> dict[str, np.ndarray]:
    """The pieces' columns joined, a column at a time: each piece's column is freed once joined (and, with
    `trim`, its memory given back: `trim_heap`)."""
    if not pieces:
        return {c: np.empty(0, dtype=np.int64) for c in _COLUMNS}
    out = {}
    for c in list(pieces[0]):
        out[c] = np.concatenate([p.pop(c) for p in pieces])
        if trim:
            trim_heap()
    return out


class _StringTable:
    """The strings frame: the names that tables look up by id, numbered in the order the frames list
    them (runtime, kernels, their short names, syncs, cpu_ops), as they were before the reader streamed."""

    def __init__(self, texts: list[str], in_order: list[np.ndarray]) -> None:
        seen = np.zeros(len(texts) + 1, dtype=bool)
        order = [np.empty(0, dtype=np.int64)]
        for names in in_order:  # the ids in order of first sight, without joining the columns (memory)
            for at in range(0, len(names), STEP):  # pd.unique's hash table is sized by its input: a block
                distinct = pd.unique(names[at : at + STEP])
                order.append(distinct[~seen[distinct]])
                seen[distinct] = True
        self.order = np.concatenate(order)
        self.remap = np.full(len(texts) + 1, -1, dtype=np.int64)
        self.remap[self.order] = np.arange(len(self.order), dtype=np.int64)
        self.texts = texts

    def ids(self, names: np.ndarray) -> np.ndarray:
        """The strings' ids of names (ids into the reader's names), written over them: each is asked once."""
        return np.take(self.remap, names, out=names, mode="clip")  # "raise" would buffer a copy of `out`

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

    keys: np.ndarray  # the runtime calls' correlation ids, sorted, distinct
    pid: np.ndarray  # the global pid of each key's first call
    main: int
    shared: set[int]
    processes: set[int]

    def pids(self, corr: np.ndarray, device: np.ndarray) -> np.ndarray:
        if not len(self.keys):
            return np.full(len(corr), self.main, dtype=np.int64)
        at = np.minimum(np.searchsorted(self.keys, corr), len(self.keys) - 1)
        out = np.where(self.keys[at] == corr, self.pid[at], self.main).astype(np.int64)
        if not self.shared:
            return out
        ambiguous = np.isin(corr, np.fromiter(self.shared, np.int64, len(self.shared)))
        sure = pd.DataFrame({"device": device[~ambiguous], "pid": out[~ambiguous]})
        owner = sure.groupby("device")["pid"].agg(lambda p: p.mode().iloc[0]).to_dict() if len(sure) else {}
        devices = sorted(set(device[ambiguous].tolist()) - set(owner))
        processes = sorted(self.processes - set(owner.values()))
        if len(devices) == len(processes):
            owner.update(zip(devices, processes, strict=True))
        guess = [owner.get(int(d), int(p)) for d, p in zip(device[ambiguous], out[ambiguous], strict=True)]
        out[ambiguous] = guess
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
        "devices": [str(d["name"]) for d in devices if isinstance(d, dict) and d.get("name") is not None],
        "base_time_ns": base if type(base) is int else None,
        "float_times": float_times,  # microseconds with fractions: HTA rounds them (analysis.hta.hta_rules)
        "ignored": ignored,
        "unusable": unusable,
    }
