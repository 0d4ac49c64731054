"""One piece of a Kineto trace's events as columns: what can be done with a piece on its own, so that
pieces can be turned into columns in worker processes (analysis.readers.kineto merges them in file order).

Names stay raw here (ids into the piece's own list of distinct names); pids and tids stay as the JSON gave
them. Giving them trace-wide ids needs every piece before this one, so that is the merge's part.
This module imports neither pandas nor the trace model, so a worker starts in a fraction of a second.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from itertools import chain, compress, repeat
from operator import attrgetter
from typing import Any

import msgspec
import numpy as np

from analysis.readers import NULL
from analysis.readers.kineto_checks import clean_name, hashable
from analysis.readers.kineto_events import NO_ARGS, NOT_EVENT, UNSET, Args, Event, decode

try:
    from analysis.readers import _kineto_fast
except ImportError:  # not built (no C compiler where the harness was installed): msgspec reads every piece
    _kineto_fast = None

MAX_NS = 2**62  # times past this (146 years) cannot be right, and start + duration must not wrap round
MAX_US = MAX_NS // 1000

# category -> group. Older traces use capitalised names.
CATEGORIES = {
    "kernel": "kernels", "gpu_memcpy": "memcpy", "gpu_memset": "memset", "cuda_sync": "syncs",
    "cuda_runtime": "runtime", "cuda_driver": "runtime", "user_annotation": "annotation",
    "gpu_user_annotation": "gpu_annotation", "cpu_op": "cpu_ops",
    "Kernel": "kernels", "Memcpy": "memcpy", "Memset": "memset", "Runtime": "runtime",
    "Operator": "cpu_ops",
}  # fmt: skip
# the groups of complete events; CPU groups first (their threads are named in this order)
GROUPS = ("runtime", "annotation", "cpu_ops", "kernels", "memcpy", "memset", "syncs", "gpu_annotation")
CPU_GROUPS = GROUPS[:3]
_OTHER = len(GROUPS)
_CODES = {("X", cat): GROUPS.index(group) for cat, group in CATEGORIES.items()}
_CAT_CODES = {cat: GROUPS.index(group) for cat, group in CATEGORIES.items()}
_PH_CAT = attrgetter("ph", "cat")
_KIND = attrgetter("ph", "category")  # what a left-out event is counted by
_CAT, _TS, _DUR, _NAME, _PID, _TID, _ARGS = map(
    attrgetter, ("cat", "ts", "dur", "name", "pid", "tid", "args")
)
_CORRELATION, _STREAM, _DEVICE, _EXTERNAL, _INPUT_DIMS, _GRID, _BLOCK, _BYTES = map(
    attrgetter, ("correlation", "stream", "device", "external_id", "input_dims", "grid", "block", "bytes")
)
_DIMS = json.JSONDecoder(parse_float=str)  # numbers as DECODE reads them; also what json.dumps wrote
# Input Dims text -> shapes(), shared by the threads that read pieces: each only gets and sets single
# keys (and clears it), and looks a piece's texts up in its own dict (`_shape_texts`)
_SHOWN: dict[bytes, str] = {}
SHOWN_MAX = 1 << 18  # texts kept: a trace of ever new shapes does not grow it without end


class DigitLimit(Exception):
    """A piece's Input Dims hold an integer past Python's digit limit: the piece goes back to the stream,
    whose parser refuses it saying where (as msgspec and json.loads refuse such a number anywhere)."""


@dataclass
class Piece:
    """The columns of a piece of events. `groups[g]` holds start, end (ns), index (in the piece), name (ids
    into `names`), pid and tid (int64 arrays, or lists of hashable values where not all are integers)
    and the group's own columns (correlation, stream, device, grid, block, bytes, external_id)."""

    count: int
    names: list[Any] = field(default_factory=list)
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    ignored: Counter[tuple[Any, Any]] = field(default_factory=Counter)
    thread_names: dict[tuple[Any, Any], str] = field(default_factory=dict)
    unusable: dict[str, int] = field(default_factory=dict)
    float_times: bool = False


def decode_columns(data: bytes | memoryview, fast: bool = True) -> Piece | None:
    """The columns of a JSON list of events; None where msgspec does not take it (the caller parses it
    element by element). A piece on the common path is read by the C reader (`_kineto_fast`, the same
    columns: tests/test_kineto_fast.py); anything off it, by msgspec and `columns`."""
    try:
        if fast and _kineto_fast is not None and (raw := _kineto_fast.columns(data)) is not None:
            return fast_piece(raw)
        events = decode(data)
        return None if events is None else columns(events)
    except DigitLimit:
        return None


def fast_piece(raw: tuple[Any, ...]) -> Piece:
    """A Piece of what `_kineto_fast.columns` gives: each group's distinct names (and, for operators, the
    distinct texts of their Input Dims) get the ids `columns` gives them, in the same order."""
    count, groups, ignored, threads, float_times = raw
    piece = Piece(count, float_times=float_times)
    local: dict[Any, int] = {}
    for kind, group in zip(GROUPS, groups, strict=True):
        if group is None:
            continue
        names, dims, cols = group
        out = {c: np.frombuffer(b, dtype=np.int64) for c, b in cols.items()}
        out["name"] = _local_ids(names, local)[out["name"]]
        if dims is not None:
            out["shapes"] = _local_ids(_shape_texts(dims), local)[out["shapes"]]
        piece.groups[kind] = out
    piece.names = list(local)
    piece.ignored = Counter({(ph, UNSET if cat is None else cat): n for ph, cat, n in ignored})
    for pid, tid, name in threads:
        piece.thread_names[key(pid, tid)] = thread_name(name)
    return piece


def _local_ids(values: list[Any], local: dict[Any, int]) -> np.ndarray:
    return np.fromiter((local.setdefault(v, len(local)) for v in values), dtype=np.int64, count=len(values))


def columns(events: list[Event]) -> Piece:
    piece = Piece(len(events))
    local: dict[Any, int] = {}
    codes = _codes(events)
    buckets: list[list[Event]] = [[] for _ in range(_OTHER + 1)]
    append = [bucket.append for bucket in buckets]
    for e, code in zip(events, codes.tolist(), strict=True):  # one pass: 2x faster than a gather per group
        append[code](e)
    for code, chosen in enumerate(buckets):
        if not chosen:
            continue
        if code == _OTHER:
            _other(piece, chosen)
        else:
            _group(piece, GROUPS[code], chosen, np.flatnonzero(codes == code), local)
    piece.names = list(local)
    return piece


def _codes(events: list[Event]) -> np.ndarray:
    """Each event's group (an index into GROUPS), or _OTHER."""
    try:
        if events and type(events[0]) is not Event:  # phase structs: only X has a category of its own
            return np.fromiter(
                map(_CAT_CODES.get, map(_CAT, events), repeat(_OTHER)), dtype=np.int8, count=len(events)
            )
        return np.fromiter(
            map(_CODES.get, map(_PH_CAT, events), repeat(_OTHER)), dtype=np.int8, count=len(events)
        )
    except TypeError:  # a ph or cat that cannot be a key (a list): one event at a time
        return np.fromiter(
            (
                _CODES.get((e.ph, e.cat), _OTHER) if type(e.ph) is type(e.cat) is str else _OTHER
                for e in events
            ),
            dtype=np.int8,
            count=len(events),
        )


def _hashable(value: Any) -> Any:
    return value if value is NOT_EVENT or value is UNSET else hashable(value)


def key(pid: Any, tid: Any) -> tuple[Any, Any]:
    """A (pid, tid) key that can be hashed whatever the JSON held (a list, an object)."""
    return hashable(pid), hashable(tid)


def _other(piece: Piece, events: list[Event]) -> None:
    """Count the events left out by (ph, cat); read the thread names of metadata events."""
    try:
        pairs = Counter(map(_KIND, events))
    except TypeError:  # a ph or cat that cannot be a key
        pairs = Counter((_hashable(e.ph), _hashable(e.category)) for e in events)
    if any(ph == "M" for ph, _ in pairs):
        for e in events:
            if e.ph != "M" or e.name != "thread_name":
                continue
            if (name := thread_name(getattr(e.args, "name", None))) is not None:
                piece.thread_names[key(e.pid, e.tid)] = name
    piece.ignored = Counter({pair: n for pair, n in pairs.items() if pair[0] != "M"})


def thread_name(value: Any) -> str | None:
    """A thread_name event's `args.name` as its thread's name: text trimmed, a number as its JSON text (as
    an event's name that is a number reads; a float's text is kept as written, `float_hook`); anything
    else (null, true, a list) names nothing."""
    if type(value) is str:
        return clean_name(value.strip())[0]
    if type(value) is int:
        return str(value)
    return None


def ignored_key(ph: Any, cat: Any) -> str:
    """How a left-out event is counted in meta["ignored"]."""
    return "not an event" if ph is NOT_EVENT else f"ph={ph}" if cat is UNSET else str(cat)


def shapes(dims: Any) -> str:
    """An operator's input sizes as torch prints them ([[2, 3], [], [3]]); "" when not recorded."""
    if type(dims) is not list:
        return ""
    inner = ("[" + ", ".join(str(d) for d in x) + "]" if type(x) is list else json.dumps(x) for x in dims)
    return "[" + ", ".join(inner) + "]"


def _shape_texts(dims: list[msgspec.Raw] | list[bytes]) -> list[str]:
    """`shapes` of each event's Input Dims (JSON text), computed once per distinct text in the process.
    Safe in threads: the piece's texts are looked up in a dict of its own, filled from `_SHOWN` (which
    another thread may clear at any moment) or computed."""
    texts = list(map(bytes, dims))
    shown: dict[bytes, str | None] = {}
    for text in set(texts):
        shown[text] = _SHOWN.get(text)
        if shown[text] is None:
            try:
                shown[text] = shapes(_DIMS.decode(text.decode()))
            except ValueError:  # valid JSON (the reader took it): an integer past the digit limit
                raise DigitLimit from None
            if len(_SHOWN) >= SHOWN_MAX:
                _SHOWN.clear()
            _SHOWN[text] = shown[text]
    return list(map(shown.__getitem__, texts))


def _ids(values: list[Any], local: dict[Any, int]) -> np.ndarray:
    """Ids of names in the piece's list of distinct names (names that are not text: as their text)."""
    try:
        return _known_ids(values, local)
    except TypeError:  # a name that cannot be a key (a list)
        values = [v if type(v) is str or v is None else clean_name(v)[0] for v in values]
        return _known_ids(values, local)


def _known_ids(values: list[Any], local: dict[Any, int]) -> np.ndarray:
    for v in dict.fromkeys(values):  # the distinct values, in order of first sight
        local.setdefault(v, len(local))
    return np.fromiter(map(local.__getitem__, values), dtype=np.int64, count=len(values))


def _group(piece: Piece, kind: str, events: list[Event], index: np.ndarray, local: dict[Any, int]) -> None:
    ts_values, dur_values = list(map(_TS, events)), list(map(_DUR, events))
    name_values, args = list(map(_NAME, events)), list(map(_ARGS, events))
    cpu = kind in CPU_GROUPS
    pids = (
        list(map(_PID, events))
        if cpu or kind in ("kernels", "memcpy", "memset", "syncs", "gpu_annotation")
        else []
    )
    tids = list(map(_TID, events)) if cpu or kind == "gpu_annotation" else []
    piece.float_times = piece.float_times or str in set(map(type, ts_values))
    ts, ok_ts = _times(ts_values)
    dur, ok_dur = _times(dur_values)
    ok = ok_ts & ok_dur & (dur >= 0)
    if not ok.all():
        piece.unusable[kind] = int((~ok).sum())
        keep = ok.tolist()
        name_values, pids, tids, args = (
            list(compress(c, keep)) if c else c for c in (name_values, pids, tids, args)
        )
        ts, dur, index = ts[ok], dur[ok], index[ok]
    if None in args:  # `"args": null` (a phase struct holds it too: the fuzzer found one)
        args = [NO_ARGS if a is None else a for a in args]
    out: dict[str, Any] = {"start": ts, "end": ts + dur, "index": index, "name": _ids(name_values, local)}
    if cpu:
        out["pid"], out["tid"] = _pids(pids), _pids(tids)
    if kind == "runtime":
        out["correlation"] = _ints(list(map(_CORRELATION, args)))
    elif kind == "cpu_ops":
        out["external_id"] = _ints(list(map(_EXTERNAL, args)))
        # as key_averages(group_by_input_shape=True) shows them
        out["shapes"] = _ids(_shape_texts(list(map(_INPUT_DIMS, args))), local)
    elif kind == "gpu_annotation":
        out["device"] = _device(args, pids)
        out["stream"] = _ints([t if a.stream is UNSET else a.stream for a, t in zip(args, tids, strict=True)])
    elif kind != "annotation":
        out["device"] = _device(args, pids)
        out["stream"] = _ints(list(map(_STREAM, args)))
        out["correlation"] = _ints(list(map(_CORRELATION, args)))
        if kind == "kernels":
            out["grid"] = _dims(list(map(_GRID, args)), (32, 16))
            out["block"] = _dims(list(map(_BLOCK, args)), (22, 11))
        elif kind in ("memcpy", "memset"):
            out["bytes"] = _ints(list(map(_BYTES, args)))
    piece.groups[kind] = out


def _pids(values: list[Any]) -> np.ndarray | list[Any]:
    """pids or tids as int64 when all are integers that fit, else as hashable values."""
    if set(map(type, values)) == {int}:
        try:
            return np.array(values, dtype=np.int64)
        except OverflowError:
            pass
    return [hashable(v) for v in values]


def _device(args: list[Args], pids: list[Any]) -> np.ndarray:
    """Each GPU event's device: args.device, else the event's pid (Kineto's pid of GPU rows), else 0."""
    devices = list(map(_DEVICE, args))
    if set(map(type, devices)) == {int}:  # all given, all integers: in one numpy call
        try:
            out = np.array(devices, dtype=np.int64)
            return np.where(out < 0, 0, out)
        except OverflowError:
            pass
    out = []
    for a, pid in zip(args, pids, strict=True):
        d = pid if a.device is UNSET else a.device
        out.append(d if type(d) is int and 0 <= d < 2**63 else 0)
    return np.array(out, dtype=np.int64)


# --- numbers -------------------------------------------------------------------------------------------


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
        if us.ndim == 1 and (not len(us) or (us.max() <= MAX_US and us.min() >= -MAX_US)):  # x1000 fits
            return us * 1000, np.ones(len(values), dtype=bool)
    except (TypeError, ValueError, OverflowError):
        pass
    decimal = _decimal_ns(values)
    if decimal is not None:
        return decimal, np.ones(len(values), dtype=bool)
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


def _decimal_ns(values: list[Any]) -> np.ndarray | None:
    """Microseconds written with three decimals, as newer Kineto writes times ("4458676522690.655"), as
    ns: the digits without the dot (3-5x faster than `text_ns` on each, measured on 10,000 values). None
    where any value is written otherwise, or is out of range."""
    if not values or set(map(type, values)) != {str}:
        return None
    text = "".join(values)
    if text.count(".") != len(values) or not all(v[-4:-3] == "." for v in values):
        return None  # each value: one dot, three digits after it
    digits = list(map(str.replace, values, repeat("."), repeat("")))
    joined = "".join(digits)
    if not (joined.isascii() and joined.isdigit()):
        return None
    try:
        ns = np.array(list(map(int, digits)), dtype=np.int64)
    except OverflowError:
        return None
    return ns if ns.max() <= MAX_NS else None


def _ints(values: list[Any]) -> np.ndarray:
    """Integer args (stream, device, correlation, bytes); NULL where absent or not an integer."""
    try:
        ints = np.array(values, dtype=np.int64)
        if ints.ndim == 1:  # not lists of integers
            return ints
    except (TypeError, ValueError, OverflowError):
        pass
    out = np.full(len(values), NULL, dtype=np.int64)
    for i, v in enumerate(values):
        if type(v) is int and -(2**63) < v < 2**63:
            out[i] = v
    return out


def _dims(values: list[Any], shifts: tuple[int, int]) -> np.ndarray:
    """[x, y, z] launch dimensions packed as (x << s0) + (y << s1) + z; NULL (shown as unknown) where
    absent, or present but not three non-negative integers that fit their bits (a kernel launched with
    no grid does not run: `0 0 0` would be a shape no kernel has)."""
    limits = (1 << (63 - shifts[0]), 1 << (shifts[0] - shifts[1]), 1 << shifts[1])
    if values and set(map(type, values)) == {list} and set(map(type, chain.from_iterable(values))) == {int}:
        try:
            dims = np.array(values, dtype=np.int64)
        except (ValueError, OverflowError):  # not all of length 3, or too big
            dims = None
        if (
            dims is not None
            and dims.shape == (len(values), 3)
            and (dims >= 0).all()
            and (dims < limits).all()
        ):
            return (dims[:, 0] << shifts[0]) + (dims[:, 1] << shifts[1]) + dims[:, 2]
    out = np.full(len(values), NULL, dtype=np.int64)
    for i, v in enumerate(values):
        if (
            isinstance(v, list)
            and len(v) == 3
            and all(type(d) is int and 0 <= d < top for d, top in zip(v, limits, strict=True))
        ):
            out[i] = (v[0] << shifts[0]) + (v[1] << shifts[1]) + v[2]
    return out
