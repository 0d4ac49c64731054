"""The text of a Chrome trace's lines (analysis.views.chrome_trace writes them): nanoseconds as exact decimal
microseconds, integers as JSON, launch dimensions, Kineto's names of memory copies and sets, metadata
lines, and the process and thread of an nsys global thread id.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np

from analysis.hta.gpu_events import memcpy_name, memset_name
from analysis.readers import NULL
from analysis.readers.global_ids import ID_MASK, pid_of, tid_of

_US = "%d.%03d"


def _meta(what: str, pid: int, tid: int, name: str) -> str:
    return f'{{"ph":"M","name":"{what}","pid":{pid},"tid":{tid},"args":{{"name":{json.dumps(name)}}}}}'


def _pid_tid(gtid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A global thread id's process and thread (analysis.readers.global_ids)."""
    return pid_of(gtid), tid_of(gtid)


def _key(pid: np.ndarray, corr: np.ndarray) -> np.ndarray:
    """(process, correlation id) as one integer, -1 where there is none (a correlation id unknown or past
    39 bits): a launch and what it launched share it."""
    ok = (corr >= 0) & (corr < 1 << 39)
    return np.where(ok, ((pid & ID_MASK) << 39) | np.where(ok, corr, 0), -1)


def _pid_tid_one(gtid: int) -> tuple[int, int]:
    return int(pid_of(gtid)), int(tid_of(gtid))


def _us(ns: np.ndarray) -> list[str]:
    """Nanoseconds as exact decimal microseconds ("123.456")."""
    if len(ns) == 0:
        return []
    if ns.min() >= 0:
        return [_US % qr for qr in zip((ns // 1000).tolist(), (ns % 1000).tolist(), strict=True)]
    a = np.abs(ns)
    return [
        ("-" + _US if neg else _US) % (q, r)
        for neg, q, r in zip((ns < 0).tolist(), (a // 1000).tolist(), (a % 1000).tolist(), strict=True)
    ]


def _ints(values: np.ndarray) -> list[str]:
    """Integers as JSON: null where missing."""
    text = [str(v) for v in values.tolist()]
    if (values == NULL).any():
        text = ["null" if v == NULL else t for v, t in zip(values.tolist(), text, strict=True)]
    return text


def _dims(packed: np.ndarray, shifts: tuple[int, int]) -> Iterator[str]:
    """Launch dimensions packed as (x << s0) + (y << s1) + z as [x,y,z]; unknown ones as [-1,-1,-1], which
    a reader takes for unknown again."""
    x = packed >> shifts[0]
    y = (packed >> shifts[1]) & ((1 << (shifts[0] - shifts[1])) - 1)
    z = packed & ((1 << shifts[1]) - 1)
    for p, a, b, c in zip(packed.tolist(), x.tolist(), y.tolist(), z.tolist(), strict=True):
        yield "[-1,-1,-1]" if p == NULL else f"[{a},{b},{c}]"


def _memop_names(part: dict[str, np.ndarray], frame: str) -> list[str]:
    """Kineto's names of copies and sets, which say their kinds ("Memcpy HtoD (Pageable -> Device)")."""
    if frame == "memcpy":
        kinds = zip(
            part["copy_kind"].tolist(), part["src_kind"].tolist(), part["dst_kind"].tolist(), strict=True
        )
        return [json.dumps(memcpy_name(k, s, d)) for k, s, d in kinds]
    return [json.dumps(memset_name(k)) for k in part["mem_kind"].tolist()]
