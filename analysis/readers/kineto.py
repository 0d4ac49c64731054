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

Reading: the file is a stream (analysis.readers.kineto_stream: decompressed in a thread, cut into ~4 MiB
pieces of traceEvents, never whole in memory); each piece becomes columns: by the C reader
(analysis/readers/_kineto_fast.c, which lets go of the GIL), in threads for a file of THREAD_BYTES of JSON
and more; by msgspec and analysis.readers.kineto_columns for a piece the C reader steps aside from, and
for every piece where it is not built, then in worker processes for a file of PARALLEL_BYTES and more,
which read it from slots of memory shared with this one (copied once, not pickled through a pipe). This
module merges the pieces in file order (names and threads get trace-wide ids) and builds the frames.
docs/performance.md, "Kineto traces", has the current figures; the measurements behind each choice are in
the repository's history.

Ids: `global_tid` is composed as nsys does (pid in bits 24-47, tid in bits 0-23). Linux pids and tids fit;
one that does not (a string, a pthread id) gets a small id of its own and the threads frame keeps the real
one in the name. A GPU's streams are threads of a process of their own, 2**23 + device: kernels' global_pid
is the process that launched them (through the correlation id), as in nsys exports.
"""

from __future__ import annotations

import gzip
import multiprocessing as mp
import os
import zlib
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pandas as pd
from isal import igzip_threaded
from isal.isal_zlib import IsalError

from analysis import readers
from analysis.errors import ExportError
from analysis.readers import BOM, kineto_pool, valid_duration
from analysis.readers.kineto_build import HINTS, build
from analysis.readers.kineto_checks import clean_name, is_complete
from analysis.readers.kineto_columns import text_ns
from analysis.readers.kineto_stream import TraceStream, too_deep

__all__ = ["FORMAT", "VERSION", "KinetoReader", "clean_name", "is_complete", "open_kineto", "text_ns"]

VERSION = readers.KINETO_VERSION  # bump it there when what a frame holds changes: cached frames are rebuilt
FORMAT = "kineto-json"
NOT_EVENT = "not an event"  # the meta's `ignored` key of list elements that are not objects (kineto_columns)
WIDE_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"), (b"\xff\xfe", "UTF-16"),
             (b"\xfe\xff", "UTF-16"))  # fmt: skip
PARALLEL_BYTES = 256 << 20  # JSON from which a trace is read by several processes (their start is ~0.3 s)
THREAD_BYTES = 8 << 20  # ... by several threads (the C reader: a thread costs next to nothing)


class KinetoReader:
    """One parsed trace: its frames (built on open, in one pass over the file) and metadata."""

    format = FORMAT
    version = VERSION

    def __init__(
        self, path: Path, stream: TraceStream, pool: kineto_pool.Pool | kineto_pool.Threads | None = None
    ) -> None:
        self.path = path
        self.reads: dict[str, int] = {"traceEvents": 1}  # the file is parsed once, on open
        self._frames, self._meta = build(kineto_pool.pieces(stream, pool), stream)
        values = self._meta["ignored"].get(NOT_EVENT, 0)
        if values and set(self._meta["ignored"]) == {NOT_EVENT} and not self._meta["unusable"]:
            # no element of its list is an event: torch.profiler's memory timeline (export_memory_timeline:
            # a list of [time, action, …] rows, or [times, sizes]) reads so. Capture health fails it; every
            # command that reads events says what it is (Trace.require: the hint of each frame)
            self._meta["not_events"] = (
                f"its list holds {values:,} values and no event, as a memory timeline (torch.profiler's "
                f"export_memory_timeline) does: it is not a trace; {readers.GIVE_A_TRACE}"
            )

    def __repr__(self) -> str:
        return f"KinetoReader({str(self.path)!r})"

    def close(self) -> None:
        self._frames = {}

    def meta(self) -> dict[str, Any]:
        nonempty = {name: len(df) > 0 for name, df in self._frames.items()}
        meta = {"hints": HINTS, **self._meta, "format": self.format, "nonempty": nonempty}
        if "not_events" in meta:  # what the file is, said by every command that asks for a frame of it
            meta["hints"] = {f: meta["not_events"] for f in {*HINTS, *meta["hints"]}}
        return meta

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


def open_kineto(path: str | Path, workers: int | None = None) -> KinetoReader:
    """Parse `path` (a Chrome/Kineto trace, gzipped or not), or raise ExportError saying what is wrong.
    The file is read as a stream (analysis.readers.kineto_stream), never whole in memory; a big one is
    turned into columns by `workers` threads (the C reader) or, where that is not built, processes
    (default: as many as cores, up to 4, for files of THREAD_BYTES or PARALLEL_BYTES of JSON or more, in
    a process that is not itself a worker)."""
    path = Path(path)
    try:
        with open(path, "rb") as f, ExitStack() as stack:
            gzipped = f.read(2) == b"\x1f\x8b"
            if workers is None:
                workers = _workers(f, gzipped)
            f.seek(0)
            pool = kineto_pool.start(workers) if workers > 1 else None
            if pool is not None:
                stack.callback(pool.close)
            read = stack.enter_context(igzip_threaded.open(f, "rb", threads=1)).read if gzipped else f.read
            return KinetoReader(path, TraceStream(path, _without_bom(path, read)), pool)
    except (EOFError, zlib.error, gzip.BadGzipFile, IsalError) as e:
        raise ExportError(f"{path} is a corrupt or truncated gzip file ({e})") from None
    except OSError as e:
        why = e.strerror or str(e)
        raise ExportError(f"cannot read {path}: {why}") from None
    except RecursionError:  # a value nested deeply enough for a parser to take it, but not json.dumps
        raise too_deep(path) from None


def _without_bom(path: Path, read: Callable[[int], bytes]) -> Callable[[int], bytes]:
    """`read`, with a UTF-8 byte-order mark at the start of the text left out (editors on Windows write
    one before JSON; JSON parsers refuse it); text that starts with UTF-16's or UTF-32's is refused, saying
    so."""
    first = True

    def reader(n: int) -> bytes:
        nonlocal first
        data = read(n)
        if first:
            first = False
            while len(data) < 4 and (more := read(n)):
                data += more  # a first read shorter than a mark
            for mark, name in WIDE_BOMS:
                if data.startswith(mark):
                    raise ExportError(
                        f"{path} is {name} text (it starts with its byte-order mark): a trace is UTF-8 JSON; "
                        "save it as UTF-8"
                    )
            data = data.removeprefix(BOM)
        return data

    return reader


def _workers(f: BinaryIO, gzipped: bool) -> int:
    """How many threads (the C reader) or processes to read a file with: 1 below THREAD_BYTES or
    PARALLEL_BYTES of JSON (gzip's trailer says how much, modulo 4 GiB) or inside a worker process (no
    pools within pools)."""
    size = f.seek(0, os.SEEK_END)
    if gzipped and size >= 4:
        f.seek(-4, os.SEEK_END)
        size = max(size, int.from_bytes(f.read(4), "little"))
    if size < (THREAD_BYTES if kineto_pool.FAST else PARALLEL_BYTES) or mp.parent_process() is not None:
        return 1
    return min(os.cpu_count() or 1, 4)


# --- building the frames ------------------------------------------------------------------------------
