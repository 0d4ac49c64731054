"""nsys's global ids, composed and taken apart in one place.

A thread's globalTid holds its process id in bits 24-47 and its thread id in bits 0-23 (bits above 47 may
name the machine); a process's globalPid is the same with the thread bits 0. The Kineto reader composes
its ids the same way, so that every table reads both formats alike. A thread key is PID << 24 | TID alone,
one integer that keys a thread as the pair (PID, TID) does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

ID_BITS = 24  # the bits of one id: a process's or a thread's
ID_MASK = (1 << ID_BITS) - 1
PROCESS_MASK = ~ID_MASK  # globalTid -> its globalPid part


def pid_of(global_id: Any) -> np.ndarray:
    """The process id of globalTids or globalPids."""
    return (np.asarray(global_id, dtype=np.int64) >> ID_BITS) & ID_MASK


def tid_of(global_tid: Any) -> np.ndarray:
    """The thread id of globalTids."""
    return np.asarray(global_tid, dtype=np.int64) & ID_MASK


def compose_tid(pid: Any, tid: Any) -> Any:
    """PID << 24 | TID: the globalTid of a process's thread (integers or arrays, each id under 2**24)."""
    return (pid << ID_BITS) | tid


def thread_key(global_pid: Any, global_tid: Any) -> np.ndarray:
    """The thread key of a globalTid (both from it), or of a call's globalPid and globalTid where the
    export records them apart."""
    return compose_tid(pid_of(global_pid), tid_of(global_tid))
